"""Nodes whose hooks run on a stand-in config, read back from the event logs.

A hook whose config in place does not load judges the node on the last good copy (or the
built-in defaults) and logs ``config_error`` in its event-log line (gpuhc/state/config_guard.py). A
typo pushed to every node shows here as one row per node: the error, where, what the run used
instead, since when. A node whose latest run loaded its config again drops out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from gpuhc.errors import GpuhcError
from gpuhc.export.eventlog import read_events
from gpuhc.fleet.gather import event_log_paths
from gpuhc.text.logtext import escape


@dataclass(frozen=True)
class ConfigErrorRow:
    node: str
    error: str
    using: str
    since: float  # the first run of this spell on the stand-in config
    last: float

    def to_dict(self) -> dict:
        return {"node": self.node, "error": self.error, "using": self.using, "since": self.since, "last": self.last}


def read_rows(paths: Iterable[str], since: float, problems: list[str]) -> list[ConfigErrorRow]:
    """Per node, its runs since ``since`` in time order: a row when the latest one ran on a
    stand-in config."""
    latest: dict[str, dict] = {}
    for doc in read_events(paths, b'"node"', problems):
        try:
            t, node = float(doc["started"]), str(doc["node"])
        except (ValueError, KeyError, TypeError):
            continue
        if t < since:
            continue
        problem = doc.get("config_error")
        rec = latest.setdefault(node, {"t": float("-inf"), "spell": None})
        if t < rec["t"]:
            continue  # (logs merged out of order: only a later run changes the answer)
        rec["t"] = t
        if isinstance(problem, dict):
            first = rec["spell"]["since"] if rec["spell"] else t
            rec["spell"] = {"since": first, "last": t, "error": str(problem.get("error") or "?"),
                            "using": str(problem.get("using") or "?")}
        else:
            rec["spell"] = None
    return [ConfigErrorRow(node, r["spell"]["error"], r["spell"]["using"], r["spell"]["since"], r["spell"]["last"])
            for node, r in sorted(latest.items()) if r["spell"]]


def table(rows: list[ConfigErrorRow]) -> list[str]:
    if not rows:
        return ["every node's latest run loaded its config"]
    out = [f"{'NODE':12} {'SINCE':19} {'USING':40} ERROR"]
    for r in rows:
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r.since))
        out.append(escape(f"{r.node:12} {since:19} {r.using:40} {r.error}"))
    return out


def gather(config, since_s: float, given=(), now: float | None = None) -> tuple[list[ConfigErrorRow], list[str]]:
    paths = event_log_paths(config, given)
    if not paths:
        raise GpuhcError("no event log to read: set fleet.event_logs or output.event_log, or pass --event-log")
    notes: list[str] = []
    return read_rows(paths, (time.time() if now is None else now) - since_s, notes), notes
