"""Where sweeps live on disk: records and fleet memory on the admin side, results from the jobs.

Two places, on purpose:

- ``<state_dir>/sweep/`` (admin host, root or the operator account): the index (current sweep,
  per-node probe times and history, per-shape fleet history) in a locked JSON document
  (:class:`gpuhc.files.jsonstore.LockedJson`), whose lock also serialises ``submit`` and ``analyze``; and one record per sweep in
  ``sweeps/<id>.json``.
- ``<results_dir>/<sweep id>/<group id>.json``: written by the jobs, which run unprivileged on
  the compute nodes, so this must be on a shared file system writable by the job's user. When a
  collective hangs, each surviving rank writes ``<group id>.rank<N>.json`` instead, and
  :func:`load_group_result` merges them: a rank that wrote nothing is the one that hung.

Every write is atomic (temporary file, fsync, rename, fsync of the directory): a reader never
sees half a results file, and a crash leaves the old version or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Iterator

from gpuhc.errors import GpuhcError

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


class SweepStoreError(GpuhcError):
    pass


def check_id(value: str, what: str) -> str:
    """Ids become file names: refuse anything that could climb out of the directory."""
    if not _SAFE_ID.match(value or ""):
        raise SweepStoreError(f"bad {what} {value!r}: letters, digits, '.', '_' and '-' only")
    return value


def write_json_atomic(path: str, obj: Any, mode: int = 0o644) -> None:
    from gpuhc.files.fsutil import write_atomic

    try:
        write_atomic(path, json.dumps(obj, indent=1, sort_keys=True, default=str).encode(), mode)
    except OSError as e:
        raise SweepStoreError(f"cannot write {path}: {e.strerror}") from None


MAX_RECORD_BYTES = 64 * 1024 * 1024  # a sweep record of 8,192 nodes is a few MB
MAX_INDEX_BYTES = 16 * 1024 * 1024  # the index: each node's last probes and the per-shape history
MAX_INDEX_DEPTH = 32
INDEX_FILE, INDEX_LOCK = "state.json", "state.lock"  # the names it had when it borrowed the node's state store


def read_json(path: str) -> Any:
    """The parsed file, or None when it does not exist; a broken file is an error naming it.
    Through the bounded reader: the sweep's directory may belong to the sweep account rather
    than root, and `analyze --apply` runs as root (docs/security.md)."""
    import errno

    from gpuhc.files.untrusted import UntrustedInputError, load_json, read_bounded

    try:
        return load_json(read_bounded(path, MAX_RECORD_BYTES, "sweep record"), f"sweep record {path}")
    except UntrustedInputError as e:
        if e.errno_hint == errno.ENOENT:
            return None
        raise SweepStoreError(f"cannot read {e}") from None


# ---------------------------------------------------------------------------- results (job side)


def results_path(results_dir: str, sweep_id: str, group_id: str, rank: int | None = None) -> str:
    name = check_id(group_id, "group id") + (f".rank{rank}" if rank is not None else "") + ".json"
    return os.path.join(results_dir, check_id(sweep_id, "sweep id"), name)


def write_group_result(results_dir: str, sweep_id: str, group_id: str, result: dict, rank: int | None = None) -> str:
    path = results_path(results_dir, sweep_id, group_id, rank)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, result)
    return path


def load_group_result(results_dir: str, sweep_id: str, group_id: str) -> dict | None:
    """The group's results file, or the merge of its ranks' partial files, or None.

    A partial result (some collective timed out) is rebuilt from what each surviving rank wrote;
    ranks missing from the merge are reported as ``silent``: they never came back from the hang.
    Every file is read as untrusted input (:mod:`gpuhc.sweep.results`), by name under one fd of
    the sweep's directory opened without following a link, so a job user who swaps the
    directory for a link cannot point root's reads elsewhere (docs/security.md). One that cannot
    be used is :class:`~gpuhc.sweep.results.BadResults` naming it, for the caller to make that
    group's error.
    """
    from gpuhc.sweep.results import BadResults
    from gpuhc.files.untrusted import UntrustedInputError, open_directory

    directory = os.path.join(results_dir, check_id(sweep_id, "sweep id"))
    check_id(group_id, "group id")
    try:
        dfd = open_directory(directory, "bad results:")
    except FileNotFoundError:
        return None
    except UntrustedInputError as e:
        raise BadResults(str(e)) from None
    try:
        return _load_group_at(dfd, directory, group_id)
    finally:
        os.close(dfd)


def _load_group_at(dfd: int, directory: str, group_id: str) -> dict | None:
    from gpuhc.sweep.results import MAX_GROUP_BYTES, MAX_PARTIAL_BYTES, MAX_RANKS, BadResults, check_partials, \
        check_result, merge_partials, read_partial, read_result

    whole_name = group_id + ".json"
    whole = read_result(whole_name, dir_fd=dfd, shown=os.path.join(directory, whole_name))
    if whole is not None:
        return whole
    prefix = f"{group_id}.rank"
    try:
        names = sorted(n for n in os.listdir(dfd) if n.startswith(prefix) and n.endswith(".json"))
    except OSError as e:
        raise BadResults(f"bad results: {directory}: cannot list: {e.strerror}") from None
    if len(names) > MAX_RANKS:
        raise BadResults(f"bad results: {directory}: more than {MAX_RANKS} rank files for {group_id}")
    parts, budget = [], MAX_GROUP_BYTES
    for name in names:
        path = os.path.join(directory, name)
        if budget <= 0:
            raise BadResults(f"bad results: {directory}: the rank files of {group_id} hold more than "
                             f"{MAX_GROUP_BYTES >> 20} MiB together")
        part = read_partial(name, min(MAX_PARTIAL_BYTES, budget), dir_fd=dfd, shown=path)
        if part is None:
            continue
        if name != f"{prefix}{part['rank']}.json":
            raise BadResults(f"bad results: {path}: holds rank {part['rank']}")
        budget -= os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size
        parts.append(part)
    if not parts:
        return None
    pattern = os.path.join(directory, prefix + "*.json")
    check_partials(parts, pattern)
    # The merge computes new numbers (busbw from the ranks' times): a mean_s of 5e-324 passes
    # the partial's check yet divides to inf. The merged document is checked like a read one.
    return check_result(merge_partials(parts), pattern)


# ---------------------------------------------------------------------------- records (admin side)


def _is_record(doc: Any) -> bool:
    rounds = doc.get("rounds") if isinstance(doc, dict) else None
    return (isinstance(doc, dict) and isinstance(doc.get("id"), str) and isinstance(doc.get("state"), str)
            and isinstance(doc.get("findings", {}), dict) and isinstance(rounds, list) and rounds
            and all(isinstance(r, dict) and isinstance(r.get("groups"), list)
                    and all(isinstance(g, dict) and isinstance(g.get("id"), str) and isinstance(g.get("nodes"), list)
                            for g in r["groups"]) for r in rounds))


class SweepStore:
    """The admin side: index document + one file per sweep."""

    def __init__(self, state_dir: str, results_dir: str | None = None):
        from gpuhc.files.jsonstore import LockedJson

        self.root = os.path.join(state_dir, "sweep")
        self.results_dir = results_dir or os.path.join(self.root, "results")
        self.index = LockedJson(self.root, INDEX_FILE, INDEX_LOCK, what="sweep index", max_bytes=MAX_INDEX_BYTES,
                                max_depth=MAX_INDEX_DEPTH, lock_timeout_s=30.0, error=SweepStoreError)
        self.sweeps_dir = os.path.join(self.root, "sweeps")

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The index, exclusively: one submit or analyze at a time. Written back on success."""
        with self.index.transaction() as doc:
            yield doc

    def read_index(self) -> dict[str, Any]:
        return self.index.read()

    def sweep_path(self, sweep_id: str) -> str:
        return os.path.join(self.sweeps_dir, check_id(sweep_id, "sweep id") + ".json")

    def save_sweep(self, record: dict) -> None:
        os.makedirs(self.sweeps_dir, mode=0o755, exist_ok=True)
        write_json_atomic(self.sweep_path(record["id"]), record, mode=0o644)

    def load_sweep(self, sweep_id: str) -> dict | None:
        """The sweep's record, or None; one that is not a sweep record is an error naming it
        (every reader may then index rounds and groups without checking again)."""
        path = self.sweep_path(sweep_id)
        record = read_json(path)
        if record is not None and not _is_record(record):
            raise SweepStoreError(f"{path}: not a gpuhc sweep record (no rounds of groups); move it aside to start afresh")
        return record

    def list_sweeps(self) -> list[str]:
        try:
            return sorted(n[:-5] for n in os.listdir(self.sweeps_dir) if n.endswith(".json"))
        except FileNotFoundError:
            return []

    def prepare_results(self, sweep_id: str) -> str:
        """Create the sweep's results directory; the jobs write into it."""
        path = os.path.join(self.results_dir, check_id(sweep_id, "sweep id"))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise SweepStoreError(f"cannot create results directory {path}: {e.strerror}") from None
        return path

    def group_result(self, sweep_id: str, group_id: str) -> dict | None:
        return load_group_result(self.results_dir, sweep_id, group_id)

    def round_results(self, sweep_id: str, group_ids: list[str]) -> tuple[dict[str, dict | None], dict[str, str]]:
        """Every group's results (None: nothing written yet), and why each unusable one was
        refused (``bad results: <file>: <why>``). One group's bad file never stops the others."""
        from gpuhc.sweep.results import BadResults

        results: dict[str, dict | None] = {}
        bad: dict[str, str] = {}
        for gid in group_ids:
            try:
                results[gid] = self.group_result(sweep_id, gid)
            except (BadResults, SweepStoreError) as e:
                results[gid] = None
                bad[gid] = str(e) if str(e).startswith("bad results:") else f"bad results: {e}"
        return results, bad
