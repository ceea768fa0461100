"""`gpuhc fleet lemons`: nodes and GPUs drained again and again, from the event logs.

The same rule the flows apply before a drain (:mod:`gpuhc.slurm.lemons`), over every node's
event log (``fleet.event_logs``, shipped copies included), so a GPU that moved between nodes is
one record: lemons (K drains within D days) and near-lemons (one short), each with its drains.
"""

from __future__ import annotations

import time

from gpuhc.logtext import escape
from gpuhc.slurm.lemons import LemonSettings, Standing, standings
from gpuhc.slurm.lemon_memory import read_faults


def gather(config, paths: list[str], now: float | None = None,
           show_all: bool = False) -> tuple[list[Standing], LemonSettings, list[str]]:
    settings = LemonSettings.from_section(config.section("slurm")["lemon"])
    now = time.time() if now is None else now
    notes: list[str] = []
    found = standings(read_faults(paths, now - settings.window_s, notes, per_node=False), now, settings)
    return [s for s in found if show_all or s.lemon or s.near], settings, notes


def table(rows: list[Standing], settings: LemonSettings) -> list[str]:
    """The plain table, node names, serials and checks escaped (an event log is anyone's file)."""
    if not rows:
        return [f"no lemon or near-lemon: no node or GPU drained {settings.faults - 1} times in {settings.window_text}"]
    out = [f"{'KIND':5} {'KEY':28} {'STANDING':10} {'DRAINS':6} NODES / DRAINS (time check)"]
    for s in rows:
        standing = "LEMON" if s.lemon else "near" if s.near else "-"
        drains = ", ".join(f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(f.time))} {f.check}" for f in s.faults)
        out.append(escape(f"{s.kind:5} {s.key:28} {standing:10} {len(s.faults):<6} {','.join(s.nodes)} / {drains}"))
    return out
