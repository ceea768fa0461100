"""The admin's acts on nodes gpuhc holds: release, retire, reboot for a retest, and a retest's plan.

Each reads the node, asks the pure quarantine rules (:mod:`gpuhc.slurm.repair.quarantine`) what to do,
and has the actuator (:mod:`gpuhc.slurm.act.actuator`) carry it out and verify it. None of them
takes new capacity out of service (a retire or a re-quarantine only changes the reason of a node
that is out already, or is the admin's explicit word), so the circuit breaker does not apply.
In observe mode (``slurm.mode: observe``) the actuator sends nothing, and each result says what
would have been done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gpuhc.errors import SlurmError
from gpuhc.slurm.act.actuator import Actuator
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.repair.quarantine import RetestPlan, plan_reboot, plan_release, plan_retire


@dataclass
class AdminResult:
    node: str
    ok: bool
    message: str


def apply_plan(act: Actuator, node: Node, plan: RetestPlan) -> bool:
    """Carry out a retest plan and verify it; True when Slurm shows the intended result."""
    if plan.act == "resume":
        return act.resume(node.name, plan.why)
    if plan.act in ("requarantine", "retire"):
        return act.drain(node.name, plan.reason, plan.why)
    return False


def release(act: Actuator, names: list[str], force: bool = False) -> list[AdminResult]:
    """Resume nodes held by gpuhc, RETIRED included (the admin's explicit call)."""
    out = []
    for name in names:
        try:
            plan = plan_release(act.sc.node(name), force)
            if plan.act == "none":
                out.append(AdminResult(name, plan.ok, plan.message))
                continue
            ok = act.resume(name, "release")
            why = plan.message if ok else "resume sent, but Slurm shows the node still held"
            out.append(_observed(act, name, plan.message) or AdminResult(name, ok, why))
        except SlurmError as e:
            out.append(AdminResult(name, False, str(e)))
    return out


def retire(act: Actuator, names: list[str], note: str = "", force: bool = False) -> list[AdminResult]:
    """Mark nodes RETIRED: drained with ``gpuhc: RETIRED ...``, never resumed automatically."""
    out = []
    for name in names:
        try:
            plan = plan_retire(act.sc.node(name), note, force)
            if plan.act == "none":
                out.append(AdminResult(name, plan.ok, plan.message))
                continue
            ok = act.drain(name, plan.reason, "retire")
            out.append(_observed(act, name, plan.message)
                       or AdminResult(name, ok, plan.message if ok else "drain sent, but Slurm shows another reason"))
        except SlurmError as e:
            out.append(AdminResult(name, False, str(e)))
    return out


def reboot_for_retest(act: Actuator, names: list[str], nextstate: str) -> list[AdminResult]:
    """Ask Slurm to reboot gpuhc-held nodes, keeping their gpuhc reason through the reboot."""
    out = []
    for name in names:
        try:
            plan = plan_reboot(act.sc.node(name), nextstate)
            if plan.act == "reboot":
                act.reboot(name, plan.reason, nextstate)
            out.append((plan.act == "reboot" and _observed(act, name, plan.message))
                       or AdminResult(name, plan.ok, plan.message))
        except SlurmError as e:
            out.append(AdminResult(name, False, str(e)))
    return out


def after_retire(results: list[AdminResult], config: Any, me: str, flow_here: Callable[[], Any]) -> list[str]:
    """After ``quarantine retire``: the ``retire`` hook of each node retired and, for this node
    (``me``), its retire bundle (the evidence can only be read on the node itself), written
    through ``flow_here()``'s flow. The lines to show the admin."""
    from gpuhc.export.hooks import fire

    said = []
    for r in (r for r in results if r.ok and r.message.startswith("retired")):
        fire("retire", {"node": r.node, "why": "retired by an admin", "message": r.message}, config)
        if r.node == me:
            path = retire_evidence(flow_here(), None, "retired by an admin", r.message)
            said.append(f"retire bundle: {path}" if path else "retire bundle: not written (see the log)")
    return said


def _observed(act: Actuator, name: str, message: str) -> AdminResult | None:
    """In observe mode, the result of an act that was only logged; None otherwise."""
    return AdminResult(name, True, f"observe mode, nothing sent: would be {message}") if act.observe else None


def retire_evidence(flow, snapshot, why: str, reason: str | None) -> str | None:
    """Write the retire bundle of this node (:mod:`gpuhc.postmortem.retire`) after a verified
    retirement; its path, or None. Never raises: the retirement stands whatever happens here."""
    s = flow.slurm["retire_bundle"]
    if not s["enabled"]:
        return None
    from gpuhc.postmortem.retire import write_retire_bundle

    try:
        if snapshot is None:
            from gpuhc.run.runner import read_snapshot

            snapshot = read_snapshot(flow.opts.sources, flow.node, max(1.0, flow.deadline.cap(30.0)))
        path = write_retire_bundle(s, flow.slurm["postmortem_format"], flow.node, why, reason, snapshot,
                                   flow.opts.sources, flow.opts.config.section("output").get("event_log"), flow.now(),
                                   flow.deadline)
    except Exception as e:  # the evidence is best effort; the node is retired either way
        flow.log(f"retire bundle not written: {type(e).__name__}: {e}", loud=True)
        return None
    flow.log(f"retire bundle: {path}", loud=True)
    return path
