"""The admin's retests on the node itself, and what a release leaves behind on it.

- :func:`retest`: ``gpuhc quarantine retest`` of this node (the boot-time unit,
  examples/systemd/gpuhc-retest.service): the bootstrap stage, then resume, re-quarantine or
  retire by the pure quarantine rules (:mod:`gpuhc.slurm.repair.quarantine`).
- :func:`release_after_retest`: ``gpuhc quarantine release --retest``: resume only on a pass; in a
  job on a node an admin put in service behind a reservation, a failure drains it again.
- :func:`after_release`: a release's hooks, and on this very node forgetting the local hold.

A retest or a release is the admin's word that the cause was dealt with: kernel-log incidents
held from before it no longer count; new ones do (docs/repair.md, "Quarantine"). Every change
to the node goes through the actuator; the boot-time retest's checks run before this node's
turn with Slurm is taken (:mod:`gpuhc.slurm.flows.runlock`), so minutes of bootstrap checks block no
other run; ``release --retest`` takes it first, because its checks' processes on the GPUs must
not look like a stray to the health check's ladder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhc.slurm.repair.admin import AdminResult, apply_plan, retire_evidence
from gpuhc.slurm.repair.admin import release as do_release
from gpuhc.slurm.flows.frame import Flow, actuator, announce, run_checks, summary_line, take_turn
from gpuhc.slurm.flows.memory import load_memory, note_resumed
from gpuhc.slurm.policy.drain import Act, Decision, Memory, Verdict, resumable, verdict_of
from gpuhc.slurm.policy.reason import build_reason, owned

EXIT_COULD_NOT_JUDGE = 3


@dataclass(frozen=True)
class RetestOutcome:
    code: int  # 0 resumed or nothing to retest, 1 re-quarantined/retired/unverified/busy, 3 could not judge
    act: str  # the plan carried out (resume, requarantine, retire), or none, error, busy, unverified


def asked_reboot(flow: Flow) -> str | None:
    """The gpuhc reason this node held itself with when its ladder asked for the reboot it is
    now coming back from (the node's own state, gpuhc/slurm/flows/memory.py: the ladder's, with
    its quarantine cycle; else the drain's), or None: no such request, or its deadline has passed."""
    from gpuhc.slurm.repair.ladder import REBOOT
    from gpuhc.slurm.flows.memory import load_ladder

    step = load_ladder(flow)
    if step.step != REBOOT or step.deadline is None or flow.now() >= step.deadline:
        return None
    return step.reason or load_memory(flow).reason


def retest(flow: Flow) -> RetestOutcome:
    """Retest this node if gpuhc holds it (or Slurm returned it before its retest)."""
    from gpuhc.slurm.flows.handover import acknowledge_kernel_log
    from gpuhc.slurm.repair.quarantine import phase, plan_retest, returned_before_retest

    undo = _replay(flow)  # at boot, before anything else: what a reset killed half-way left undone
    act = actuator(flow)
    node = act.sc.node(flow.node)  # before minutes of checks: is there anything to retest?
    asked = asked_reboot(flow)
    if phase(node) is None and not returned_before_retest(node, asked):
        flow.log(f"not held by gpuhc (state {node.raw_state}, reason {node.reason!r}): nothing to retest")
        return RetestOutcome(0, "none")
    acknowledge_kernel_log(flow.opts.state_dir, flow.now())
    report = run_checks(flow)
    if report is None:
        return RetestOutcome(EXIT_COULD_NOT_JUDGE, "error")
    verdict = verdict_of(report.results)
    flow.log(summary_line(report, verdict))
    if not take_turn(flow).ok:  # one run with Slurm at a time (slurm/flows/runlock.py)
        return RetestOutcome(1, "busy")
    node = act.sc.node(flow.node)  # re-read: an admin may have acted during the checks
    evidence = build_reason(report.results) if verdict is Verdict.FAIL else None
    plan = plan_retest(node, verdict, evidence, int(flow.slurm["quarantine"]["max_cycles"]), asked)
    if plan.act == "resume" and undo:
        flow.log(f"{undo}: not resuming until it has run", loud=True)
        return RetestOutcome(1, "none")
    flow.log(plan.why + (f": {plan.reason}" if plan.reason else ""), loud=plan.act != "resume")
    if plan.act == "none":
        if returned_before_retest(node, asked) and verdict in (Verdict.PASS, Verdict.WARN) and not act.observe:
            # The episode ends here all the same: a hook that opened a ticket at the drain
            # hears that the node is back (Slurm returned it; the retest agrees).
            announce(flow, "resume", {"node": flow.node, "stage": "bootstrap", "why": plan.why, "reason": None,
                                      "was": node.reason or asked, "retest": verdict.value})
            note_resumed(flow)
        return RetestOutcome(report.exit_code, "none")
    ok = apply_plan(act, node, plan)
    if act.observe:  # the actuator logged what it would have done; nothing took, nothing to remember
        return RetestOutcome(0 if plan.act == "resume" else 1, plan.act if ok else "unverified")
    if ok and plan.act in ("retire", "resume"):  # verified: the event happened, once (a requarantine stays drained)
        announce(flow, plan.act, {"node": flow.node, "stage": "bootstrap", "why": plan.why, "reason": plan.reason,
                                  "was": node.reason, "retest": verdict.value})
    if ok and plan.act == "retire":
        retire_evidence(flow, report.snapshot, plan.why, plan.reason)
    if ok and plan.act == "resume":
        note_resumed(flow)
    q = flow.slurm["quarantine"]
    if ok and plan.act == "requarantine" and q["reboot"]:
        act.reboot(flow.node, plan.reason, q["reboot_nextstate"])
        flow.log("reboot requested for the next retest")
    if not ok:
        flow.log(f"{plan.act} not verified: Slurm shows {act.sc.node(flow.node).reason!r}", loud=True)
        return RetestOutcome(1, "unverified")
    return RetestOutcome(0 if plan.act == "resume" else 1, plan.act)


def release_after_retest(flow: Flow, force: bool) -> tuple[list[AdminResult], int]:
    """Run the bootstrap checks on this node, then release it on a pass. The results to show and
    the least exit code (3 when the retest could not judge, 1 after a failure drained it)."""
    from gpuhc.slurm.flows.handover import acknowledge_kernel_log

    me = flow.node
    if undo := _replay(flow):
        return [AdminResult(me, False, f"{undo}: not released until it has run")], 1
    node = flow.scontrol().node(me)  # before minutes of checks: is there anything this may release?
    in_job = bool(flow.env.get("SLURM_JOB_ID")) and not node.unavailable
    if node.reason and not owned(node.reason) and not force and not in_job:
        return [AdminResult(me, False, f"reason not set by gpuhc ({node.reason!r}); --force to resume anyway")], 0
    if not in_job and not resumable(node):
        return [AdminResult(me, True, f"nothing to release: state {node.raw_state}")], 0
    acknowledge_kernel_log(flow.opts.state_dir, flow.now())  # the release is the admin's word: old Xids are dealt with
    # The run lock for the whole retest: its checks put processes on the GPUs, and a health check
    # meanwhile must not take them for a stray and reboot the node.
    if not take_turn(flow).ok:
        return [AdminResult(me, False, "another gpuhc run is acting on this node: not retested")], 0
    report = run_checks(flow)
    verdict = verdict_of(report.results) if report is not None else Verdict.ERROR
    if report is not None:
        flow.log(summary_line(report, verdict), loud=verdict is Verdict.FAIL)
    if verdict is Verdict.ERROR:
        flow.log("retest could not judge the node: not released", loud=True)
        return [], EXIT_COULD_NOT_JUDGE
    if verdict is Verdict.FAIL:
        evidence = build_reason(report.results)
        if in_job:
            return _drain_after_failed_retest(flow, evidence)
        return [AdminResult(me, False, f"retest failed, not released: {evidence}")], 0
    if in_job:
        return [AdminResult(me, True, "retest passed; the node is in service (end its maintenance reservation "
                                      "to open it to jobs)")], 0
    results = do_release(actuator(flow), [me], force)
    after_release(results, flow.opts.config, [me], me, log=flow.log, all_or_none=True, retest=verdict.value)
    return results, 0


def _replay(flow: Flow) -> str | None:
    """Replay a killed reset's undo (gpuhc/slurm/repair/undo_journal.py); what is still pending."""
    from gpuhc.slurm.repair.undo_journal import replay

    return replay(flow.opts.state_dir, flow.slurm["remediation"]["reset"], flow.log, flow.deadline)


def _drain_after_failed_retest(flow: Flow, reason: str) -> tuple[list[AdminResult], int]:
    """A retest in a job on a node the admin resumed into a reservation: failing, it goes back out
    (through the one actuator, like every drain; the admin's release is what put it in service)."""
    ok = actuator(flow).carry_out(flow.node, Decision(Act.DRAIN, "retest failed", Memory(), reason))
    if ok:
        announce(flow, "drain", {"node": flow.node, "why": "release --retest failed in a job", "reason": reason})
    return [AdminResult(flow.node, False, f"retest failed: drained again: {reason}" if ok else
                        "retest failed; the drain did not take")], 1


def after_release(results: list[AdminResult], config: Any, names: list[str], me: str, log=None,
                  all_or_none: bool = False, **extra: Any) -> None:
    """After ``quarantine release``: the ``resume`` hook of each node released, then
    :func:`forget_here` (with ``all_or_none``, only when every node was released). Nothing in
    observe mode, where nothing was released."""
    from gpuhc.export.hooks import fire

    if config.section("slurm")["mode"] == "observe":
        return
    for r in results:
        if r.ok and r.message.startswith("released"):
            fire("resume", {"node": r.node, "why": "released by an admin", "message": r.message, **extra}, config, log)
    if not all_or_none or all(r.ok for r in results):
        forget_here(names, me, config, log)


def forget_here(names: list[str], me: str, config: Any, log=None) -> None:
    """Released on this very node: drop the local hold so the health check starts afresh, and
    acknowledge the held kernel-log incidents (the release is the admin's word that they were
    dealt with; without this the next health check would drain again for the same old Xid).
    Elsewhere the node's own next health check notices the resume and does the same."""
    import time

    from gpuhc.slurm.flows.handover import acknowledge_kernel_log
    from gpuhc.state.node import default_state_dir

    if me not in names:
        return
    try:
        acknowledge_kernel_log(default_state_dir(config.data.get("state_dir")), time.time(), me)
    except Exception as e:
        (log or _stderr)(f"warning: local state not cleared: {e}", loud=True)


def _stderr(text: str, loud: bool = False) -> None:
    import sys

    print(f"gpuhc: {text}", file=sys.stderr, flush=True)
