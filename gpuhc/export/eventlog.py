"""Append one JSON line per run to a local event log.

Several gpuhc runs can overlap on a node (the periodic health check, a prolog, an admin's manual
``gpuhc check``), and each appends. The file is opened with ``O_APPEND`` and the whole line is
handed to the kernel in a single ``write``, under an advisory ``flock``: on a local filesystem
that keeps every line whole and in one piece, whoever else is writing. The file is reopened on
every run, so logrotate's ``create`` and ``copytruncate`` both work. It is opened the way every
file root appends to is (:mod:`gpuhc.files.fsutil`): never through a link.

Nothing here raises: a full disk, a read-only filesystem or a directory in the file's place
returns a one-line message for the caller to log, and the health verdict stands.

The Slurm flows' line is the run's report plus a ``slurm`` part (:class:`SlurmPart`), built here
and nowhere else (:func:`run_record`). Reading back (the fleet commands, the lemon memory's
rebuild): :func:`event_lines` yields a log's lines through the untrusted-file reader (a shipped
copy of another node's log is anyone's file), each bounded, an oversized one skipped rather than
held in memory; :func:`read_records` reads them as typed :class:`Record` s.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator

DIR_MODE = 0o755
FILE_MODE = 0o644
MAX_LINE = 1 << 20  # an event-log line longer than this is skipped, not read into memory


@dataclass(frozen=True)
class SlurmPart:
    """What a Slurm flow did after its checks: the event-log line's ``slurm`` key."""

    action: str = "none"  # the policy's act (drain, resume, keep, blocked, ...) or "none"
    why: str | None = None
    reason: str | None = None  # the drain reason gpuhc wrote or would write
    acted: bool = False  # sent and verified
    breaker: dict[str, Any] | None = None
    error: str | None = None  # Slurm did not answer as needed, or gpuhc broke while acting
    postmortem: str | None = None  # the epilog's bundle
    remediation: dict[str, Any] | None = None  # the ladder's step, if one was taken
    observed: str | None = None  # observe mode: the act that was not sent
    fault: dict[str, Any] | None = None  # a drain's lemon record (gpuhc/slurm/repair/lemons.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SlurmPart:
        """From a line's ``slurm`` object (another version's, or anyone's: shipped logs are
        untrusted); ValueError when a field has the wrong type."""
        def text(key: str) -> str | None:
            v = d.get(key)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"slurm.{key} is not text")
            return v

        def obj(key: str) -> dict[str, Any] | None:
            v = d.get(key)
            if v is not None and not isinstance(v, dict):
                raise ValueError(f"slurm.{key} is not an object")
            return v

        return cls(action=text("action") or "none", why=text("why"), reason=text("reason"),
                   acted=d.get("acted") is True, breaker=obj("breaker"), error=text("error"),
                   postmortem=text("postmortem"), remediation=obj("remediation"), observed=text("observed"),
                   fault=obj("fault"))


def run_record(report: dict[str, Any], slurm: SlurmPart) -> dict[str, Any]:
    """A Slurm flow's event-log line: the run's report and what the flow did."""
    return {**report, "slurm": slurm.to_dict()}


@dataclass(frozen=True)
class Record:
    """One Slurm flow's line read back: which node, when, and its :class:`SlurmPart`."""

    node: str
    started: float | None  # when the run started (every run writes it)
    logged_at: float | None
    stage: str | None
    slurm: SlurmPart

    @property
    def time(self) -> float | None:
        """When it happened: the run's start, else when it was logged."""
        return self.started if self.started is not None else self.logged_at

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Record:
        """ValueError when ``doc`` is not a Slurm flow's line."""
        sl = doc.get("slurm")
        if not isinstance(sl, dict) or doc.get("node") is None:
            raise ValueError("not a gpuhc Slurm event")
        stage = doc.get("stage")
        return cls(str(doc["node"]), _number(doc.get("started")), _number(doc.get("logged_at")),
                   stage if isinstance(stage, str) else None, SlurmPart.from_dict(sl))


def _number(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{v!r} is not a time")
    return float(v)


def encode_line(report: dict[str, Any]) -> bytes:
    """The report as one line of JSON (ASCII, no raw newlines), ending in a newline.

    Non-finite floats become null (bare NaN is not JSON, and log shippers reject the line);
    anything that is not JSON-able is written as its ``str`` rather than dropping the event.
    """
    doc = dict(_clean(report))
    doc.setdefault("logged_at", round(time.time(), 3))
    return (json.dumps(doc, default=str, allow_nan=False, separators=(",", ":")) + "\n").encode("ascii")


def append_event(path: str, report: dict[str, Any]) -> str | None:
    """Append ``report`` as one JSON line to ``path``; None on success, else why not.

    As root the file is never opened through a link (a planted ``events.jsonl -> /root/x`` or a
    dangling one is refused, not followed) and its directories must be root's
    (:func:`gpuhc.files.fsutil.open_append`)."""
    from gpuhc.files.fsutil import UnsafePath, open_append

    try:
        data = encode_line(report)
    except Exception as e:  # a report that cannot be encoded is a bug, but not one worth a drain
        return f"event log {path}: cannot encode the report: {type(e).__name__}: {e}"
    try:
        fd = open_append(path, "event log", FILE_MODE, DIR_MODE)
    except UnsafePath as e:
        return str(e)
    except OSError as e:
        return f"event log {path}: {_why(e)}"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # e.g. a filesystem without locks: O_APPEND alone still keeps lines whole
        written = os.write(fd, data)
        if written != len(data):
            # only on a full disk or a signal: a line cut short is reported, not completed later
            return f"event log {path}: short write ({written} of {len(data)} bytes)"
        return None
    except OSError as e:
        return f"event log {path}: {_why(e)}"
    finally:
        os.close(fd)  # also drops the flock


def _why(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "")
    text = e.strerror or str(e)
    return f"{text} ({name})" if name else text


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def expand_paths(patterns: Iterable[str]) -> list[str]:
    """Paths and globs; a pattern that matches nothing is kept (and reported when read)."""
    out: list[str] = []
    for p in patterns:
        found = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        out.extend(found or [p])
    return list(dict.fromkeys(out))


def event_lines(path: str) -> Iterator[bytes]:
    """The lines of one event log, each at most :data:`MAX_LINE` bytes; raises
    :class:`gpuhc.files.untrusted.UntrustedInputError` when the file is refused."""
    from gpuhc.files.untrusted import open_regular

    fd = open_regular(path, "event log")
    with os.fdopen(fd, "rb") as f:
        while True:
            line = f.readline(MAX_LINE)
            if not line:
                return
            if not line.endswith(b"\n") and len(line) == MAX_LINE:
                while (rest := f.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                    pass  # skip the rest of an oversized line
                continue
            yield line


def read_events(paths: Iterable[str], marker: bytes, problems: list[str]) -> Iterator[dict[str, Any]]:
    """The decoded events of these logs (paths or globs) whose line holds ``marker``: a byte
    test first, since most lines of a fleet's logs are healthy runs nobody needs decoded. A
    refused file or a line that is not an event is said in ``problems`` and skipped."""
    for _path, doc in _decoded(paths, marker, problems):
        yield doc


def read_records(paths: Iterable[str], marker: bytes, problems: list[str]) -> Iterator[Record]:
    """:func:`read_events`, typed: each Slurm flow's line whose text holds ``marker``."""
    for path, doc in _decoded(paths, marker, problems):
        try:
            yield Record.from_doc(doc)
        except ValueError:
            problems.append(f"{path}: {NOT_AN_EVENT}")


NOT_AN_EVENT = "a line that is not a gpuhc event was skipped"


def _decoded(paths: Iterable[str], marker: bytes, problems: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    from gpuhc.files.untrusted import UntrustedInputError

    for path in expand_paths(paths):
        try:
            for line in event_lines(path):
                if marker not in line:
                    continue
                try:
                    doc = json.loads(line)
                except ValueError:
                    doc = None
                if isinstance(doc, dict) and isinstance(doc.get("slurm"), dict):
                    yield path, doc
                else:
                    problems.append(f"{path}: {NOT_AN_EVENT}")
        except (UntrustedInputError, OSError) as e:
            problems.append(str(e))
