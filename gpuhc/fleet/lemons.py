"""`gpuhc fleet lemons`: nodes and GPUs drained again and again, from the event logs.

The same rule the flows apply before a drain (:mod:`gpuhc.slurm.repair.lemons`), over every node's
event log (``fleet.event_logs``, shipped copies included), so a GPU that moved between nodes is
one record: lemons (K drains within D days) and near-lemons (one short), each with its drains.

Drains that were one switch incident (the same check on K nodes under one leaf switch within
``fleet.switch.window_s``: :mod:`gpuhc.slurm.policy.shared_cause`) count for the switch, not for the
nodes: they are left out of every node's and GPU's count and the switch is named instead.
The fleet sees every node's log, so this is where such incidents are always told
apart; a node judging its own drain sees them only through shared logs (docs/repair.md).
"""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from gpuhc.fleet.switches import Failure, Incident, group_by_switch
from gpuhc.text.logtext import escape
from gpuhc.slurm.repair.lemons import LemonSettings, SharedCauses, Standing, standings, without_shared
from gpuhc.slurm.repair.lemon_memory import read_faults


def gather(config, paths: list[str], now: float | None = None, show_all: bool = False,
           leaf_of: Mapping[str, str] | None = None) -> tuple[list[Standing], LemonSettings, list[str], list[Incident]]:
    """(standings, settings, notes, switch incidents). ``leaf_of``: Slurm's topology; without it
    no drain can be told a switch's."""
    settings = LemonSettings.from_section(config.section("slurm")["lemon"])
    switch = config.section("fleet")["switch"]
    now = time.time() if now is None else now
    notes: list[str] = []
    faults = read_faults(paths, now - settings.window_s, notes, per_node=False)
    causes = SharedCauses.from_section(leaf_of or {}, switch)
    found = standings(without_shared(faults, causes), now, settings)
    inside = [f for f in faults if now - settings.window_s < f.time <= now and f.counts]
    incidents, _ = group_by_switch([Failure(f.node, f.check, f.time) for f in inside],
                                   dict(causes.leaf_of), causes.min_nodes, causes.window_s)
    return [s for s in found if show_all or s.lemon or s.near], settings, notes, incidents


def table(rows: list[Standing], settings: LemonSettings, incidents: Iterable[Incident] = ()) -> list[str]:
    """The plain table, node names, serials and checks escaped (an event log is anyone's file);
    then the switch incidents whose drains counted for the switch."""
    if not rows:
        out = [f"no lemon or near-lemon: no node or GPU drained {settings.faults - 1} times in {settings.window_text}"]
    else:
        out = [f"{'KIND':5} {'KEY':28} {'STANDING':10} {'DRAINS':6} NODES / DRAINS (time check)"]
    for s in rows:
        standing = "LEMON" if s.lemon else "near" if s.near else "-"
        drains = ", ".join(f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(f.time))} {f.check}" for f in s.faults)
        out.append(escape(f"{s.kind:5} {s.key:28} {standing:10} {len(s.faults):<6} {','.join(s.nodes)} / {drains}"))
    for inc in incidents:
        out.append(escape(f"switch {inc.switch}: {len(inc.failures)} drains counted for the switch, not the nodes: "
                          f"{inc.summary}"))
    return out
