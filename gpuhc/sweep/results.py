"""The probe results format (``gpuhc-sweep-result/1``): read it safely, check its shape, merge ranks.

A results file is written by a probe job, which runs unprivileged on a compute node, into a
shared directory that job users can write; ``gpuhc sweep analyze`` reads it on the admin host,
often as root. So a results file is untrusted input (docs/sweep.md, "Results files are
untrusted"): it is opened without following links, must be a regular file, is read up to
:data:`MAX_BYTES`, parsed with a bounded depth (:mod:`gpuhc.files.untrusted`), and its shape is
checked here before any other code looks at it. What comes out is a fresh copy holding only
the keys the judge and the report read, each of the type they expect: numbers finite, sizes
positive integers, node names one printable word, free text (error messages, GPU names) passed
through :func:`gpuhc.text.logtext.escape` so no control character can reach a log line. A
file that fails any of this is :class:`BadResults` naming the file and the first fault; the
caller makes it that group's error and carries on with the rest of the sweep.

:func:`merge_partials` lives here too, because it is the other half of the format: after a
hang each surviving rank writes its own partial file, and the merge rebuilds a group result
from them (the job side uses it with ``--out``, the admin side when reading a results
directory).
"""

from __future__ import annotations

import math
import os
from typing import Any

from gpuhc.errors import GpuhcError
from gpuhc.sweep.stats import summarize_size

FORMAT = "gpuhc-sweep-result/1"
MAX_BYTES = 16 * 1024 * 1024  # a 512-rank group's merged file is well under 1 MiB
MAX_PARTIAL_BYTES = 4 * 1024 * 1024  # one rank's file: ~30 sizes x 100 timings
MAX_GROUP_BYTES = 64 * 1024 * 1024  # all rank files of one group together
MAX_DEPTH = 16  # the format is 5 levels deep
MAX_RANKS = 65536  # 8,192 nodes of 8 GPUs
MAX_ITEMS = 4096  # rows, timeouts, errors: far more than a sweep writes
MAX_TEXT = 500  # characters kept of one error message
MAX_NAME = 255  # a host name


class BadResults(GpuhcError):
    """One group's results that cannot be used; the message is ``bad results: <file>: <why>``."""


def read_result(path: str, limit: int = MAX_BYTES, dir_fd: int | None = None, shown: str | None = None) -> dict | None:
    """The checked contents of one results file, None when there is none. With ``dir_fd``,
    ``path`` is a name in that directory and ``shown`` its whole path (see :func:`_load`)."""
    doc = _load(path, limit, dir_fd, shown)
    return None if doc is None else check_result(doc, shown or path)


def read_partial(path: str, limit: int = MAX_PARTIAL_BYTES, dir_fd: int | None = None,
                 shown: str | None = None) -> dict | None:
    """One rank's checked partial file, None when there is none."""
    doc = _load(path, limit, dir_fd, shown)
    return None if doc is None else check_partial(doc, shown or path)


def _load(path: str, limit: int, dir_fd: int | None = None, shown: str | None = None) -> Any:
    """Read and decode one file, or None when there is none. The admin side reads a results
    directory through one directory fd (``dir_fd``, openat with O_NOFOLLOW): job users write
    there, and a path re-resolved for every file could be swapped for a link between a check
    and the read (docs/security.md)."""
    import errno

    from gpuhc.files.untrusted import UntrustedInputError, load_json, read_bounded

    shown = shown or path
    try:
        # `what` reads as the message's head: "bad results: <path>: <why>"
        data = read_bounded(path, limit, what="bad results:", dir_fd=dir_fd, shown=shown)
        return load_json(data, f"bad results: {shown}", MAX_DEPTH)
    except UntrustedInputError as e:
        if e.errno_hint == errno.ENOENT:
            return None
        raise BadResults(str(e)) from None


# ---------------------------------------------------------------------------- shape


class _Shape:
    """Walks one document; every refusal names the file and the key path."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, where: str, why: str) -> None:
        raise BadResults(f"bad results: {self.path}: {where}: {why}" if where else f"bad results: {self.path}: {why}")

    def obj(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def items(self, value: Any, where: str, limit: int = MAX_ITEMS) -> list:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(where, f"expected a list, got {_kind(value)}")
        if len(value) > limit:
            self.fail(where, f"more than {limit} entries")
        return value

    def int(self, value: Any, where: str, lo: int = 0, hi: int = 1 << 62, null: bool = False) -> int | None:
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"expected an integer, got {_kind(value)}")
        if not lo <= value <= hi:
            self.fail(where, f"{value} is outside {lo}..{hi}")
        return value

    def num(self, value: Any, where: str, null: bool = True) -> float | None:
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"expected a number, got {_kind(value)}")
        if not math.isfinite(value) or value < 0:
            self.fail(where, f"expected a finite number >= 0, got {value!r}")
        return value

    def flag(self, value: Any, where: str, null: bool = True) -> bool | None:
        if value is None and null:
            return None
        if not isinstance(value, bool):
            self.fail(where, f"expected true or false, got {_kind(value)}")
        return value

    def name(self, value: Any, where: str, null: bool = False) -> str | None:
        """A node name: one printable word. Refused rather than cleaned: a node name with a
        newline in it is no node's name, and must not reach a log line or a drain."""
        if value is None and null:
            return None
        if not isinstance(value, str) or not value or len(value) > MAX_NAME or not value.isprintable() \
                or any(c.isspace() for c in value):
            self.fail(where, f"not a node name: {_quote(value)}")
        return value

    def names(self, value: Any, where: str, limit: int = MAX_RANKS) -> list[str]:
        return [self.name(v, f"{where}[{i}]") for i, v in enumerate(self.items(value, where, limit))]

    def text(self, value: Any, where: str) -> str | None:
        """Free text (an NCCL error, a GPU's name): kept, as one clean printable line."""
        from gpuhc.text.logtext import escape

        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(where, f"expected text, got {_kind(value)}")
        return escape(value[:MAX_TEXT], MAX_TEXT)

    def texts(self, value: Any, where: str) -> list[str]:
        return [self.text(v, f"{where}[{i}]") or "" for i, v in enumerate(self.items(value, where))]


_ROW_NUMBERS = ("time_us", "algbw_gbs", "busbw_gbs", "p50_us", "p95_us", "p99_us", "mean_s")


def check_result(doc: Any, path: str) -> dict:
    """A group's results file (``gpuhc sweep run`` output, or a merge), checked and copied."""
    s = _Shape(path)
    d = s.obj(doc, "")
    if "rank" in d and "sizes_done" in d and "sizes" not in d:
        s.fail("", "a rank's partial file where the group's file belongs")
    out: dict[str, Any] = {
        "format": FORMAT,
        "backend": s.text(d.get("backend"), "backend"),
        "nodes": s.names(d.get("nodes"), "nodes"),
        "nranks": s.int(d.get("nranks"), "nranks", 1, MAX_RANKS, null=True),
        "complete": s.flag(d.get("complete"), "complete"),
        "fault_hook": bool(s.flag(d.get("fault_hook"), "fault_hook")),
        "errors": s.texts(d.get("errors"), "errors"),
        "sizes": [_row(s, r, f"sizes[{i}]") for i, r in enumerate(s.items(d.get("sizes"), "sizes"))],
        "timeouts": [_timeout(s, t, f"timeouts[{i}]") for i, t in enumerate(s.items(d.get("timeouts"), "timeouts"))],
        "ranks": [_rank(s, r, f"ranks[{i}]") for i, r in enumerate(s.items(d.get("ranks"), "ranks", MAX_RANKS))],
    }
    if d.get("ranks_per_node") is not None:
        per_node = s.obj(d["ranks_per_node"], "ranks_per_node")
        if len(per_node) > MAX_RANKS:
            s.fail("ranks_per_node", f"more than {MAX_RANKS} entries")
        out["ranks_per_node"] = {s.name(k, "ranks_per_node"): s.int(v, f"ranks_per_node.{k}", 0, MAX_RANKS)
                                 for k, v in per_node.items()}
    for key in ("sweep_id", "group_id"):
        if d.get(key) is not None:
            out[key] = s.name(d[key], key)
    for key in ("duration_s", "started"):
        if d.get(key) is not None:
            out[key] = s.num(d[key], key)
    return out


def _row(s: _Shape, value: Any, where: str) -> dict:
    r = s.obj(value, where)
    row: dict[str, Any] = {"bytes": s.int(r.get("bytes"), f"{where}.bytes", 1)}
    for key in _ROW_NUMBERS:
        if r.get(key) is not None:
            row[key] = s.num(r[key], f"{where}.{key}")
    if r.get("iters") is not None:
        row["iters"] = s.int(r["iters"], f"{where}.iters")
    if "correct" in r:
        row["correct"] = s.flag(r["correct"], f"{where}.correct")
    if r.get("rank_time_us") is not None:
        row["rank_time_us"] = [s.num(v, f"{where}.rank_time_us[{i}]", null=False)
                               for i, v in enumerate(s.items(r["rank_time_us"], f"{where}.rank_time_us", MAX_RANKS))]
    if r.get("node_time_us") is not None:
        times = s.obj(r["node_time_us"], f"{where}.node_time_us")
        if len(times) > MAX_RANKS:
            s.fail(f"{where}.node_time_us", f"more than {MAX_RANKS} entries")
        row["node_time_us"] = {s.name(k, f"{where}.node_time_us"): s.num(v, f"{where}.node_time_us.{k}", null=False)
                               for k, v in times.items()}
    return row


def _timeout(s: _Shape, value: Any, where: str) -> dict:
    t = s.obj(value, where)
    return {"bytes": s.int(t.get("bytes"), f"{where}.bytes", null=True),
            "ranks": [s.int(v, f"{where}.ranks[{i}]", 0, MAX_RANKS) for i, v in enumerate(s.items(t.get("ranks"), f"{where}.ranks", MAX_RANKS))],
            "silent_ranks": [s.int(v, f"{where}.silent_ranks[{i}]", 0, MAX_RANKS)
                             for i, v in enumerate(s.items(t.get("silent_ranks"), f"{where}.silent_ranks", MAX_RANKS))],
            "silent_nodes": s.names(t.get("silent_nodes"), f"{where}.silent_nodes")}


def _rank(s: _Shape, value: Any, where: str) -> dict:
    r = s.obj(value, where)
    out: dict[str, Any] = {"rank": s.int(r.get("rank"), f"{where}.rank", 0, MAX_RANKS, null=True),
                           "node": s.name(r.get("node"), f"{where}.node", null=True)}
    for key in ("local_rank", "device", "nccl"):
        if r.get(key) is not None:
            out[key] = s.int(r[key], f"{where}.{key}")
    for key in ("gpu", "library"):  # what the backends describe (backends.py: describe)
        if r.get(key) is not None:
            out[key] = s.text(r[key], f"{where}.{key}")
    return out


def check_partial(doc: Any, path: str) -> dict:
    """One rank's partial file, checked and copied, in the shape :func:`merge_partials` reads."""
    s = _Shape(path)
    d = s.obj(doc, "")
    nranks = s.int(d.get("nranks"), "nranks", 1, MAX_RANKS)
    rank_nodes = d.get("rank_nodes")
    out: dict[str, Any] = {
        "rank": s.int(d.get("rank"), "rank", 0, nranks - 1),
        "nranks": nranks,
        "node": s.name(d.get("node"), "node", null=True),
        "local_rank": s.int(d.get("local_rank"), "local_rank", 0, MAX_RANKS, null=True),
        "rank_nodes": None if rank_nodes is None else s.names(rank_nodes, "rank_nodes"),
        "planned_nodes": s.names(d.get("planned_nodes"), "planned_nodes"),
        "sweep_id": s.name(d.get("sweep_id"), "sweep_id", null=True),
        "group_id": s.name(d.get("group_id"), "group_id", null=True),
        "backend": s.text(d.get("backend"), "backend"),
        "started": s.num(d.get("started"), "started") or 0.0,
        "info": _rank(s, d.get("info") or {}, "info"),
        "errors": s.texts(d.get("errors"), "errors"),
        "timeout": None,
        "sizes_done": [],
    }
    out["info"] = {k: v for k, v in out["info"].items() if k not in ("rank", "node") and v is not None}
    if out["rank_nodes"] is not None and len(out["rank_nodes"]) != nranks:
        s.fail("rank_nodes", f"{len(out['rank_nodes'])} names for {nranks} ranks")
    if d.get("timeout") is not None:
        t = s.obj(d["timeout"], "timeout")
        out["timeout"] = {"bytes": s.int(t.get("bytes"), "timeout.bytes", null=True),
                          "seconds": s.num(t.get("seconds"), "timeout.seconds")}
    for i, v in enumerate(s.items(d.get("sizes_done"), "sizes_done")):
        where = f"sizes_done[{i}]"
        r = s.obj(v, where)
        iters = r.get("iter_s")
        out["sizes_done"].append({
            "bytes": s.int(r.get("bytes"), f"{where}.bytes", 1),
            "mean_s": s.num(r.get("mean_s"), f"{where}.mean_s", null=False),
            "iter_s": None if iters is None else [s.num(x, f"{where}.iter_s[{j}]", null=False)
                                                  for j, x in enumerate(s.items(iters, f"{where}.iter_s", 1 << 16))],
            "correct": s.flag(r.get("correct"), f"{where}.correct"),
        })
    return out


def check_partials(parts: list[dict], where: str) -> None:
    """Checked partial files that cannot be merged together (they disagree on the group size,
    or two claim one rank) are refused as one."""
    sizes = {p["nranks"] for p in parts}
    if len(sizes) > 1:
        raise BadResults(f"bad results: {where}: rank files disagree on the number of ranks ({sorted(sizes)})")
    ranks = [p["rank"] for p in parts]
    if len(set(ranks)) != len(ranks):
        raise BadResults(f"bad results: {where}: two rank files for one rank")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__)


def _quote(value: Any) -> str:
    """A refused value, shown safely: ascii() escapes every control character."""
    text = ascii(value) if isinstance(value, str) else _kind(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------- merge


def merge_partials(parts: list[dict]) -> dict:
    """One group result from the ranks' records (all of them, or the survivors of a hang)."""
    parts = sorted((p for p in parts if isinstance(p, dict)), key=lambda p: p.get("rank", 0))
    first = parts[0]
    nranks = int(first.get("nranks") or len(parts))
    rank_nodes = next((p["rank_nodes"] for p in parts if p.get("rank_nodes")), None)
    reporting = {p["rank"] for p in parts}
    silent = sorted(set(range(nranks)) - reporting)
    if rank_nodes:
        silent_nodes = sorted({rank_nodes[r] for r in silent})
    else:  # the hang came before names were exchanged: nodes that sent nothing at all
        seen = {p.get("node") for p in parts}
        silent_nodes = sorted(set(first.get("planned_nodes") or []) - seen)
    node_of = list(rank_nodes or [None] * nranks)
    for p in parts:
        node_of[p["rank"]] = p.get("node")
    sizes = _merge_sizes(parts, nranks, node_of)
    timeouts = []
    timed = [p for p in parts if p.get("timeout")]
    if timed or silent:
        at = min((p["timeout"]["bytes"] for p in timed if p["timeout"]["bytes"] is not None), default=None)
        timeouts.append({"bytes": at, "ranks": sorted(p["rank"] for p in timed), "silent_ranks": silent,
                         "silent_nodes": silent_nodes})
    nodes = list(dict.fromkeys(n for n in node_of if n)) or list(first.get("planned_nodes") or [])
    per_node = {n: sum(1 for x in node_of if x == n) for n in nodes}
    return {
        "format": FORMAT,
        "sweep_id": first.get("sweep_id"), "group_id": first.get("group_id"), "backend": first.get("backend"),
        "nodes": nodes, "nranks": nranks, "ranks_per_node": per_node,
        "ranks": [{"rank": p["rank"], "node": p.get("node"), "local_rank": p.get("local_rank"), **(p.get("info") or {})}
                  for p in parts],
        "started": min(p.get("started", 0) for p in parts),
        "complete": not timeouts and not any(p.get("errors") for p in parts),
        "sizes": sizes, "timeouts": timeouts,
        "errors": [f"rank {p['rank']}: {e}" for p in parts for e in p.get("errors", [])],
    }


def _merge_sizes(parts: list[dict], nranks: int, node_of: list) -> list[dict]:
    """Sizes every reporting rank finished, summarised with the slowest rank's clock."""
    by_rank = [{s["bytes"]: s for s in p.get("sizes_done", [])} for p in parts]
    common = sorted(set.intersection(*(set(d) for d in by_rank))) if by_rank else []
    rows = []
    for nbytes in common:
        samples = [d[nbytes] for d in by_rank]
        iters = [s["iter_s"] for s in samples] if all(s.get("iter_s") for s in samples) else None
        row = summarize_size(nbytes, nranks, [s["mean_s"] for s in samples], iters)
        row["correct"] = all(s.get("correct") for s in samples)
        node_time: dict[str, float] = {}
        for p, s in zip(parts, samples):
            name = node_of[p["rank"]] or f"rank{p['rank']}"
            node_time[name] = max(node_time.get(name, 0.0), round(s["mean_s"] * 1e6, 3))
        row["node_time_us"] = node_time
        rows.append(row)
    return rows
