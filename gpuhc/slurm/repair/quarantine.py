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
asks Slurm to reboot them (``scontrol reboot ASAP nextstate=DOWN``; DOWN for the release facts
in gpuhc/slurm/read/releases.py), and the boot-time retest does the rest. The health check never resumes a quarantined or retired node.

Pure: these functions take a node as Slurm shows it and say what to do; the admin commands
(:mod:`gpuhc.slurm.repair.admin`) read the nodes and have the actuator carry the plans out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.drain import Verdict, out_of_service, resumable
from gpuhc.slurm.policy.reason import GpuhcReason, format_reason, owned, parse_reason, retired_from
from gpuhc.slurm.read.releases import REBOOT_NOTES_TAIL


# What Slurm appends to the reason of a node it reboots (gpuhc/slurm/read/releases.py) is Slurm's
# words, not gpuhc's evidence: dropped before the reason is written again, or every reboot
# cycle would add them once more.
_SLURM_REBOOT_NOTES = REBOOT_NOTES_TAIL


def _own(mine: GpuhcReason) -> GpuhcReason:
    """The parsed reason without Slurm's reboot notes."""
    return replace(mine, body=_SLURM_REBOOT_NOTES.sub("", mine.body))


def returned_before_retest(node: Node, asked: str | None = None) -> bool:
    """Did Slurm put a node gpuhc had rebooted back in service before its boot-time retest ran?
    In service, a gpuhc reason that is not RETIRED, ending in Slurm's " : reboot complete"; or,
    where the release cleared the reason altogether (which releases do which:
    gpuhc/slurm/read/releases.py), the node's own memory, ``asked`` (the gpuhc reason it
    held the node with when its ladder asked for this reboot:
    :func:`gpuhc.slurm.repair.retest.asked_reboot`). The
    retest then still decides: a failure puts the hold back, which is not new capacity taken
    (gpuhc held the node before the reboot)."""
    if node.reason is None and asked is not None and not out_of_service(node):
        held = parse_reason(asked)
        return held is not None and not held.retired
    mine = parse_reason(node.reason)
    notes = _SLURM_REBOOT_NOTES.search(node.reason or "")
    return (mine is not None and not mine.retired and not out_of_service(node) and notes is not None
            and "reboot complete" in notes.group(0).lower())


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


def plan_retest(node: Node, verdict: Verdict, evidence_reason: str | None, max_cycles: int,
                asked: str | None = None) -> RetestPlan:
    """Pure: what a finished bootstrap retest means for a node. ``evidence_reason`` is the
    reason this run's failures would give (FAIL only); ``asked`` as in :func:`returned_before_retest`."""
    early = returned_before_retest(node, asked)
    mine = parse_reason(node.reason if node.reason is not None or not early else asked)
    if mine is None or not (out_of_service(node) or early):
        return RetestPlan("none", None, "not held by gpuhc: nothing to release or quarantine "
                                        "(the health check handles nodes in service)")
    if verdict is Verdict.ERROR:
        return RetestPlan("none", None, "retest could not judge the node: left as it is")
    if verdict in (Verdict.PASS, Verdict.WARN):
        if early:
            return RetestPlan("none", None, f"retest passed (was {_where(mine)}); Slurm had already "
                                            "returned the node to service after its reboot")
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


@dataclass(frozen=True)
class AdminPlan:
    """What an admin's release/retire/reboot means for one node: ``act`` is "resume", "drain",
    "reboot" or "none" (then ``ok`` says whether that is fine or a refusal)."""

    act: str
    message: str
    reason: str | None = None
    ok: bool = True


def plan_release(node: Node, force: bool = False) -> AdminPlan:
    """Resume a node held by gpuhc, RETIRED included (the admin's explicit call)."""
    if node.reason and not owned(node.reason) and not force:
        return AdminPlan("none", f"reason not set by gpuhc ({node.reason!r}); --force to resume anyway", ok=False)
    if not resumable(node):
        return AdminPlan("none", f"nothing to release: state {node.raw_state}")
    return AdminPlan("resume", f"released (was {node.raw_state}: {node.reason})")


def plan_retire(node: Node, note: str = "", force: bool = False) -> AdminPlan:
    """Mark a node RETIRED: drained with ``gpuhc: RETIRED ...``, never resumed automatically."""
    if node.reason and not owned(node.reason) and not force:
        return AdminPlan("none", f"reason not set by gpuhc ({node.reason!r}); --force to replace it", ok=False)
    mine = parse_reason(node.reason)
    reason = retired_from(mine if mine and not note else None, note)
    if node.reason == reason:
        return AdminPlan("none", "already retired")
    return AdminPlan("drain", f"retired: {reason}", reason)


def plan_reboot(node: Node, nextstate: str) -> AdminPlan:
    """Reboot a node gpuhc holds for its boot-time retest, keeping its gpuhc reason."""
    mine = parse_reason(node.reason)
    if mine is None or mine.retired or not out_of_service(node):
        return AdminPlan("none", "not drained or quarantined by gpuhc (retired nodes need release)", ok=False)
    return AdminPlan("reboot", f"reboot requested (nextstate={nextstate}); the boot-time `gpuhc quarantine retest` "
                               "decides", format_reason(_own(mine).body, cycle=mine.cycle))
