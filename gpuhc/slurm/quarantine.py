"""Quarantine: what happens to a node gpuhc drained and that did not heal by itself.

Lifecycle (every step keeps a ``gpuhc:`` reason, so ownership survives reboots)::

    drained by gpuhc ──retest passes──> resumed
        │ retest fails
        v
    quarantine [q1] ──retest passes──> resumed
        │ retest fails ... up to slurm.quarantine.max_cycles
        v
    RETIRED (never resumed automatically; `gpuhc quarantine release` by an admin)

Where the state lives — decided: **in the reason string itself** (``... [q2]``,
``gpuhc: RETIRED ...``). Slurm keeps it across node reboots and slurmctld restarts, every
machine sees it (the admin's login node, the node itself, ``gpuhc drain-report``), and there is
no second copy to disagree with it. No shared directory is needed.

A retest is the ``bootstrap`` stage (passive plus active checks, minutes long), so it runs on
the node itself: ``gpuhc quarantine retest`` there (by hand, by clush/pdsh, or by a boot-time
unit after the reboot gpuhc requested). From another machine, ``retest --reboot NODES`` only
asks Slurm to reboot them (``scontrol reboot ASAP nextstate=DOWN``; DOWN because Slurm 22.05
clears an ASAP drain at reboot and knows no ``nextstate=DRAIN``), and the boot-time retest does
the rest. The health check never resumes a quarantined or retired node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

from gpuhc.errors import SlurmError
from gpuhc.slurm.nodes import Node
from gpuhc.slurm.entry import carry_out
from gpuhc.slurm.policy import Act, Decision, Memory, Verdict, out_of_service, resumable
from gpuhc.slurm.reason import GpuhcReason, format_reason, owned, parse_reason, retired_from
from gpuhc.slurm.scontrol import Scontrol


# What Slurm appends to the reason of a node it reboots (`scontrol reboot`): " : reboot issued",
# then " : reboot complete" (22.05, 24.11 and 26.05 alike; docs/slurm.md, "Slurm releases").
# Slurm's words, not gpuhc's evidence: dropped before the reason is written again, or every
# reboot cycle would add them once more.
_SLURM_REBOOT_NOTES = re.compile(r"(?:\s+:\s+reboot (?:issued|complete))+\s*$", re.IGNORECASE)


def _own(mine: GpuhcReason) -> GpuhcReason:
    """The parsed reason without Slurm's reboot notes."""
    return replace(mine, body=_SLURM_REBOOT_NOTES.sub("", mine.body))


def phase(node: Node) -> str | None:
    """``drained`` / ``quarantine`` / ``retired`` for a node gpuhc holds; None otherwise."""
    mine = parse_reason(node.reason)
    if mine is None or not out_of_service(node):
        return None
    if mine.retired:
        return "retired"
    return "quarantine" if mine.quarantined else "drained"


@dataclass(frozen=True)
class Row:
    node: str
    state: str
    phase: str
    cycle: int
    since: float | None
    reason: str

    def to_dict(self) -> dict:
        return {"node": self.node, "state": self.state, "phase": self.phase, "cycle": self.cycle,
                "since": self.since, "reason": self.reason}


def listing(nodes: list[Node]) -> list[Row]:
    rows = []
    for n in nodes:
        p = phase(n)
        if p is not None:
            mine = parse_reason(n.reason)
            rows.append(Row(n.name, n.raw_state or n.state, p, mine.cycle, n.reason_time, n.reason))
    return sorted(rows, key=lambda r: r.node)


@dataclass(frozen=True)
class RetestPlan:
    act: str  # "resume", "requarantine", "retire", "none"
    reason: str | None
    why: str


def plan_retest(node: Node, verdict: Verdict, evidence_reason: str | None, max_cycles: int) -> RetestPlan:
    """Pure: what a finished bootstrap retest means for a node. ``evidence_reason`` is the
    reason this run's failures would give (FAIL only)."""
    mine = parse_reason(node.reason)
    if mine is None or not out_of_service(node):
        return RetestPlan("none", None, "not held by gpuhc: nothing to release or quarantine "
                                        "(the health check handles nodes in service)")
    if verdict is Verdict.ERROR:
        return RetestPlan("none", None, "retest could not judge the node: left as it is")
    if verdict in (Verdict.PASS, Verdict.WARN):
        if mine.retired:
            return RetestPlan("none", None, "retired: passes now, but only `gpuhc quarantine release` returns it")
        if not resumable(node):
            return RetestPlan("none", None, f"state {node.raw_state} takes no RESUME")
        return RetestPlan("resume", None, f"retest passed (was {_where(mine)}): resuming")
    if mine.retired:
        return RetestPlan("none", None, "retired: still failing")
    mine = _own(mine)
    cycle = mine.cycle + 1
    if cycle >= max_cycles:
        return RetestPlan("retire", retired_from(mine), f"failed retest {cycle} of {max_cycles}: retiring")
    # Keep the evidence that put the node here; the new failure is in the log and the report.
    body = mine.body or (parse_reason(evidence_reason).body if evidence_reason else "retest failed")
    return RetestPlan("requarantine", format_reason(body, cycle=cycle),
                      f"failed retest {cycle} of {max_cycles}: quarantine [q{cycle}]")


def _where(mine: GpuhcReason) -> str:
    return f"quarantine cycle {mine.cycle}" if mine.quarantined else "drained"


def apply_plan(sc: Scontrol, node: Node, plan: RetestPlan) -> bool:
    """Carry out a retest plan and verify it; True when Slurm shows the intended result."""
    if plan.act == "resume":
        return carry_out(sc, node.name, Decision(Act.RESUME, plan.why, Memory()), lambda *a, **k: None)
    if plan.act in ("requarantine", "retire"):
        return carry_out(sc, node.name, Decision(Act.DRAIN, plan.why, Memory(), plan.reason), lambda *a, **k: None)
    return False


# ---------------------------------------------------------------------------- admin actions


@dataclass
class AdminResult:
    node: str
    ok: bool
    message: str


def release(sc: Scontrol, names: list[str], force: bool = False) -> list[AdminResult]:
    """Resume nodes held by gpuhc, RETIRED included (the admin's explicit call)."""
    out = []
    for name in names:
        try:
            node = sc.show_node(name)
            if node.reason and not owned(node.reason) and not force:
                out.append(AdminResult(name, False, f"reason not set by gpuhc ({node.reason!r}); --force to resume anyway"))
                continue
            if not resumable(node):
                out.append(AdminResult(name, True, f"nothing to release: state {node.raw_state}"))
                continue
            ok = carry_out(sc, name, Decision(Act.RESUME, "release", Memory()), lambda *a, **k: None)
            out.append(AdminResult(name, ok, f"released (was {node.raw_state}: {node.reason})" if ok else
                                   "resume sent, but Slurm shows the node still held"))
        except SlurmError as e:
            out.append(AdminResult(name, False, str(e)))
    return out


def retire(sc: Scontrol, names: list[str], note: str = "", force: bool = False) -> list[AdminResult]:
    """Mark nodes RETIRED: drained with ``gpuhc: RETIRED ...``, never resumed automatically."""
    out = []
    for name in names:
        try:
            node = sc.show_node(name)
            if node.reason and not owned(node.reason) and not force:
                out.append(AdminResult(name, False, f"reason not set by gpuhc ({node.reason!r}); --force to replace it"))
                continue
            mine = parse_reason(node.reason)
            reason = retired_from(mine if mine and not note else None, note)
            if node.reason == reason:
                out.append(AdminResult(name, True, "already retired"))
                continue
            ok = carry_out(sc, name, Decision(Act.DRAIN, "retire", Memory(), reason), lambda *a, **k: None)
            out.append(AdminResult(name, ok, f"retired: {reason}" if ok else "drain sent, but Slurm shows another reason"))
        except SlurmError as e:
            out.append(AdminResult(name, False, str(e)))
    return out


def reboot_for_retest(sc: Scontrol, names: list[str], nextstate: str,
                      log: Callable[[str], None]) -> list[AdminResult]:
    """Ask Slurm to reboot gpuhc-held nodes, keeping their gpuhc reason through the reboot."""
    out = []
    for name in names:
        try:
            node = sc.show_node(name)
            mine = parse_reason(node.reason)
            if mine is None or mine.retired or not out_of_service(node):
                out.append(AdminResult(name, False, "not drained or quarantined by gpuhc (retired nodes need release)"))
                continue
            sc.reboot(name, format_reason(_own(mine).body, cycle=mine.cycle), nextstate=nextstate)
            out.append(AdminResult(name, True, f"reboot requested (nextstate={nextstate}); "
                                               "the boot-time `gpuhc quarantine retest` decides"))
        except SlurmError as e:
            out.append(AdminResult(name, False, str(e)))
    return out
