"""What observe mode would have done (``slurm.mode: observe``), read back from the event logs.

Every run that decided to drain, resume or retire and sent nothing logs the act it did not send
(``slurm.observed`` in its event-log line, gpuhc/slurm/act/actuator.py). A site trying gpuhc for a
week reads them here, per node and act: how many runs decided it, when first and last, the
reason it would have written, so thresholds can be tuned before going live (docs/repair.md,
"Observe mode").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from gpuhc.errors import GpuhcError
from gpuhc.export.eventlog import read_events
from gpuhc.fleet.gather import event_log_paths
from gpuhc.text.logtext import escape
from gpuhc.slurm.act.actuator import would_do


@dataclass(frozen=True)
class Observed:
    node: str
    act: str  # drain / resume / retire / reboot
    runs: int
    first: float
    last: float
    reason: str | None  # the latest run's
    stages: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"node": self.node, "act": self.act, "runs": self.runs, "first": self.first, "last": self.last,
                "reason": self.reason, "stages": list(self.stages)}


def read_observed(paths: Iterable[str], since: float, problems: list[str]) -> list[Observed]:
    """One :class:`Observed` per (node, act) seen since ``since``, in node order."""
    seen: dict[tuple[str, str], dict] = {}
    for doc in read_events(paths, b'"observed":"', problems):
        sl = doc["slurm"]
        try:
            t, node, act = float(doc["started"]), str(doc["node"]), str(sl["observed"])
        except (ValueError, KeyError, TypeError):
            problems.append("an observed event without its time, node or act was skipped")
            continue
        reason = sl.get("reason") if isinstance(sl.get("reason"), str) else None
        if t < since:
            continue
        rec = seen.setdefault((node, would_do(act, reason)), {"runs": 0, "first": t, "last": t, "reason": None,
                                                              "stages": {}})
        rec["runs"] += 1
        rec["first"] = min(rec["first"], t)
        if t >= rec["last"]:
            rec["last"], rec["reason"] = t, reason
        rec["stages"][str(doc.get("stage") or "?")] = None
    return [Observed(node, act, r["runs"], r["first"], r["last"], r["reason"], tuple(r["stages"]))
            for (node, act), r in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[1]["first"]))]


def table(rows: list[Observed]) -> list[str]:
    """The plain table, every field someone else wrote escaped."""
    if not rows:
        return ["no run decided anything it did not do (observe mode)"]
    out = [f"{'NODE':12} {'WOULD':7} {'RUNS':5} {'FIRST':19} {'LAST':19} {'STAGES':22} REASON"]
    for r in rows:
        first, last = (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) for t in (r.first, r.last))
        out.append(escape(f"{r.node:12} {r.act:7} {r.runs:<5} {first:19} {last:19} {','.join(r.stages):22} "
                          f"{r.reason or '-'}"))
    return out


def gather(config, since_s: float, given=(), now: float | None = None) -> tuple[list[Observed], list[str]]:
    """The observed acts of the last ``since_s`` in the configured (or given) event logs."""
    paths = event_log_paths(config, given)
    if not paths:
        raise GpuhcError("no event log to read: set fleet.event_logs or output.event_log, or pass --event-log")
    notes: list[str] = []
    rows = read_observed(paths, (time.time() if now is None else now) - since_s, notes)
    return rows, notes
