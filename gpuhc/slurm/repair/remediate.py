"""The remediation ladder on the node: the health check climbs it for its own node.

Who runs it, and why the health check: it already runs on every node every few minutes as
root, it has just judged the node (so it knows the finding and its catalog action), and it
finds out by itself when gpuhc holds its node. No other daemon, timer or shared directory is
needed, and a node whose slurmd is down is left alone (nothing runs the health check). After
a failing health check that kept its own node drained (policy decision ``keep``), it asks the
pure ladder (:mod:`gpuhc.slurm.repair.ladder`) for the next step and carries it out:

- **reset**: reset the finding's GPUs the way NVIDIA documents it (:mod:`gpuhc.slurm.repair.reset_run`:
  quiesce what holds them, reset, restore, verify; a failed procedure goes straight on to the
  reboot rung in the same run), acknowledge the kernel
  log incidents held so far (the reset is what they asked for), run the health check's stage
  again inside what is left of its deadline, and resume through the actuator only on a pass;
  otherwise tag the reason ``[reset n/N]``;
- **reboot**: ``scontrol reboot ASAP nextstate=DOWN`` with the reason tagged ``[reboot]``; the
  boot-time ``gpuhc quarantine retest`` resumes the node or tags the next cycle ``[qN]``;
- **retire** / **failed cycle**: a verified drain with the new reason.

Every step goes to the decision log and to the event log (``slurm.remediation`` of the run),
and fires the ``remediation`` hook (``retire`` for a retirement). Nothing here drains a node
that is in service, so the breaker is not asked; the node stays counted by it throughout,
because its reason stays gpuhc's.

A reset is bounded and honest (docs/repair.md "The GPU reset procedure"):

- Slurm is read again right before it (an admin's resume, a job that landed: no reset), and
  the attempt is written ahead, in the node's memory and as the ``[reset n/N]`` tag, so a run
  killed mid-reset still moves the ladder on;
- a run whose NVML reads already timed out, and a reset whose NVML or commands hung, go to the
  reboot rung: a reset needs a driver that answers;
- the kernel log is acknowledged up to the time taken *before* the reset, so an Xid the reset
  itself raises fails the retest and the node stays drained;
- a refused ``scontrol reboot`` (no RebootProgram) is said, fires the hook with the error, and
  is asked again only after ``reboot_timeout_s``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuhc.errors import SlurmError
from gpuhc.model.result import Result, Status
from gpuhc.slurm.repair.ladder import REBOOT_REFUSED, Do, Finding, LadderMemory, LadderSettings, Step, next_step
from gpuhc.slurm.flows.memory import load_ladder, note_resumed, save_ladder
from gpuhc.slurm.policy.drain import Act, Verdict, out_of_service, reboot_pending, unjudged, unjudged_hold, verdict_of
from gpuhc.slurm.policy.reason import _severity_key, owned

if TYPE_CHECKING:
    from gpuhc.slurm.flows.frame import Flow, Outcome
    from gpuhc.slurm.read.nodes import Node

_GPU = "gpu"
RESET_KEEP_S = 2.0  # kept free after the reset, besides the scontrol calls' reserve (frame.SLURM_RESERVE_S)


def finding_of(results: list[Result]) -> Finding | None:
    """The worst failing result's action (the one the reason names), and the GPUs of the failing
    results with that action."""
    failing = sorted((r for r in results if r.status is Status.FAIL), key=_severity_key)
    if not failing:
        return None
    action = failing[0].action
    gpus = sorted({int(r.subject[len(_GPU):]) for r in failing
                   if r.action is action and r.subject.startswith(_GPU) and r.subject[len(_GPU):].isdigit()})
    return Finding(action, tuple(gpus))


def jobs_of(node: Node) -> str | None:
    """Slurm's view: a job allocated or completing on the node, or None."""
    if node.draining or node.state in ("ALLOCATED", "MIXED", "COMPLETING") or "COMPLETING" in node.flags:
        return f"Slurm shows jobs on the node (state {node.raw_state})"
    return None


def owner_of(pid: int, name: str | None, remediation: dict) -> str:
    """Whose is a GPU process on a node Slurm shows no job on: ``admin`` (root's, or a configured
    admin tool: ``dcgmi diag``, ``nvidia-bug-report.sh``, a retest over clush), ``unknown`` (its
    /proc entry cannot be read: gone, or another PID namespace), or ``stray`` (a user's, with no
    job: a job's leftover). Only a stray is a reason to reboot. Whose is the real uid
    of ``/proc/<pid>/status``, not the owner of ``/proc/<pid>``: the kernel shows the effective
    uid there, root for a set-uid program a user runs."""
    from gpuhc.sources.job_activity import JobResolver

    if name and name in set(remediation["admin_tools"]):
        return "admin"
    uid = JobResolver(remediation["reset"]["proc_root"]).owner_of(pid)
    if uid is None:
        return "unknown"
    return "admin" if uid == 0 else "stray"


def busy_of(node: Node, flow: Flow) -> str | None:
    """What runs on the node, or None: Slurm's view (a job allocated) first, then NVML's (a
    process on a GPU). A GPU whose processes cannot be listed counts as busy."""
    if jobs := jobs_of(node):
        return jobs
    from gpuhc.sources import build_sources

    try:
        procs = build_sources(flow.opts.sources).procs
        occ = procs.read() if procs is not None else None
    except Exception as e:  # unreadable is not idle
        return f"GPU processes unreadable ({type(e).__name__}: {e})"
    if occ is None or not occ.available:
        return "GPU processes unknown" + (f" ({occ.error})" if occ is not None and occ.error else "")
    for g in occ.gpus:
        if g.error:
            return f"gpu{g.index}: processes unreadable ({g.error})"
        if g.processes:
            p = g.processes[0]
            who = owner_of(p.pid, p.name, flow.slurm["remediation"])
            whose = "" if who == "stray" else f", {who}"
            return f"gpu{g.index}: process {p.pid} ({p.name or '?'}{whose})"
    return None


def gpu_processes(sources):
    """The occupancy reading (NVML's process lists and MIG mode per GPU); None: not read (a
    recording without it)."""
    return sources.procs.read() if sources.procs is not None else None


def mig_gpus(sources) -> tuple[int, ...]:
    """The GPUs in MIG mode, from the occupancy reading (NVML's MIG mode per GPU); a reset of
    one is refused (gpuhc/slurm/repair/reset_plan.py)."""
    occ = gpu_processes(sources)
    return tuple(g.index for g in (occ.gpus if occ is not None else ()) if g.mig)


# ---------------------------------------------------------------------------- the climb


class Done(str, enum.Enum):
    """How carrying out a step ended."""

    NOT_TAKEN = "not-taken"  # not started (no time, not ours any more) or not verified: the memory stays
    DONE = "done"  # carried out (a reset that failed its retest included)
    RESUMED = "resumed"  # a reset passed its retest and the node is back in service: the episode is over
    FALLTHROUGH = "fallthrough"  # the reset procedure failed: on to the reboot rung in the same run
    WEDGED = "wedged"  # ... because NVML or a command hung: the same, and the run ends with os._exit
    REFUSED = "refused"  # scontrol reboot was refused


@dataclass(frozen=True)
class Climb:
    """What one climb did, whichever way it went: the step taken (None: the ladder was not
    asked, or Slurm failed before it answered), how carrying it out ended, and why."""

    step: Step | None
    done: Done
    why: str


def climb(flow: Flow, report: Any, verdict: Verdict, out: Outcome) -> Climb:
    """After the health check's decision: the ladder's next step for this node, if any. A bug
    here costs the step, never the health check's verdict or its decision."""
    try:
        return _climb(flow, report, verdict, out)
    except Exception as e:
        out.extra.setdefault("remediation", {})["error"] = f"{type(e).__name__}: {e}"
        flow.log(f"remediation: internal error, step not taken: {type(e).__name__}: {e}", loud=True)
        return Climb(None, Done.NOT_TAKEN, f"internal error: {type(e).__name__}: {e}")


def _climb(flow: Flow, report: Any, verdict: Verdict, out: Outcome) -> Climb:
    settings = LadderSettings.from_section(flow.slurm)
    if not settings.enabled:
        return Climb(None, Done.NOT_TAKEN, "remediation off")
    if flow.observe:  # a GPU reset changes the node as a drain changes Slurm: observe mode does neither
        return Climb(None, Done.NOT_TAKEN, "observe mode")
    memory = load_ladder(flow)
    kept = out.decision is not None and out.decision.act is Act.KEEP
    if not kept and memory == LadderMemory():  # a count left from a past episode is cleared below
        return Climb(None, Done.NOT_TAKEN, "not held, nothing remembered")
    from gpuhc.slurm.flows.frame import actuator, take_turn

    if not take_turn(flow, out).ok:  # another run acts on the node (a retest over clush): not now
        flow.log("remediation: another gpuhc run holds the node: no step this run", loud=True)
        return Climb(None, Done.NOT_TAKEN, "another gpuhc run holds the node")
    act = actuator(flow)
    finding = finding_of(report.results)
    try:
        node = act.sc.node(flow.node)
        step = next_step(node, verdict, finding, None, memory, flow.now(), settings)
        if step.do in (Do.RESET, Do.REBOOT) and (busy := busy_of(node, flow)):
            step = _when_busy(flow, node, verdict, finding, busy, memory, settings)
        if step.do is Do.RESET and getattr(report, "timed_out", None):
            # NVML (or another reader) already hung in this run: a reset needs a driver that answers.
            hung = f"{','.join(report.timed_out)} timed out in this run"
            step = next_step(node, verdict, finding, None, memory, flow.now(), settings, resets_closed=hung)
            step = replace(step, why=f"{step.why}; no reset: {hung}")
        if step.do is Do.NONE and memory == LadderMemory():
            return Climb(step, Done.NOT_TAKEN, step.why)
        if step.do is Do.NONE and not kept and not out_of_service(node) and not reboot_pending(node):
            save_ladder(flow, LadderMemory())  # back in service: the episode, and its reset count, are over
            return Climb(step, Done.NOT_TAKEN, "back in service: the episode is over")
        record = {"step": step.label, "why": step.why, "attempt": step.attempt, "of": step.of,
                  "finding": finding.action.value if finding else None,
                  "gpus": list(finding.gpus) if finding else [], "reason": step.reason}
        out.extra["remediation"] = record
        done = _carry_out(flow, act, node, step, finding, record)
        if done is Done.WEDGED:
            out.hard_exit = True  # a thread may still sit in NVML: leave without waiting for it
            record["wedged"] = True
        if done in (Done.FALLTHROUGH, Done.WEDGED):  # the reset procedure itself failed: its GPUs need the reboot rung
            after = LadderMemory(resets=step.memory.resets)  # the reset just tried, its step over
            step = next_step(node, verdict, finding, None, after, flow.now(), settings,
                             resets_closed=f"the reset procedure failed ({done.value})")
            record.update(fallthrough=step.label, reason=step.reason)
            done = _carry_out(flow, act, node, step, finding, record) if step.do is Do.REBOOT else Done.DONE
        if done is Done.REFUSED:
            step = replace(step, memory=LadderMemory(resets=memory.resets, step=REBOOT_REFUSED, since=flow.now(),
                                                     deadline=flow.now() + settings.reboot_timeout_s))
        record["ok"] = done in (Done.DONE, Done.RESUMED)
    except SlurmError as e:
        out.extra.setdefault("remediation", {})["error"] = str(e)
        flow.log(f"remediation: Slurm did not answer as needed, nothing remembered: {e}", loud=True)
        return Climb(None, Done.NOT_TAKEN, f"Slurm did not answer as needed: {e}")
    if done is Done.RESUMED:  # the episode is over
        record["resumed"] = True
        save_ladder(flow, LadderMemory())
    elif step.do is not Do.NONE or memory != step.memory:
        taken = done is not Done.NOT_TAKEN or step.do in (Do.WAIT, Do.NONE)
        save_ladder(flow, step.memory if taken else memory)
    if step.do not in (Do.NONE, Do.WAIT):  # the hooks fire after the run (gpuhc.slurm.flows.frame.finish)
        out.events.append(("retire" if step.do is Do.RETIRE else "remediation", {"node": flow.node, **record}))
    if done is Done.RESUMED:
        out.events.append(("resume", {"node": flow.node, "why": f"{step.label} passed its retest", "step": step.label}))
    if step.do is Do.RETIRE and done is Done.DONE:  # the evidence for the vendor, while it is on the node
        from gpuhc.slurm.repair.admin import retire_evidence

        retire_evidence(flow, getattr(report, "snapshot", None), step.why, step.reason)
    return Climb(step, done, step.why)


def _when_busy(flow: Flow, node: Node, verdict: Verdict, finding: Finding | None, busy: str,
               memory: LadderMemory, settings: LadderSettings) -> Step:
    """The step when something runs on the node. No job on it, yet something holds a GPU: no
    job's (a stray process, which nothing else ends: docs/campaign.md). A reboot ends it; a reset
    cannot while it holds the GPU, so the reboot rung, where the ladder has one. A job's, root's,
    an admin tool's or an unknown one's: wait for it."""
    jobs = jobs_of(node)
    stray = not jobs and not busy.endswith((", admin)", ", unknown)"))
    if not stray and not jobs:
        flow.log(f"remediation: {busy}: not a stray (root's, an admin tool's, or unknown): waiting, "
                 "no reboot for it", loud=True)
    if stray:
        rung = next_step(node, verdict, finding, None, memory, flow.now(), settings,
                         resets_closed=f"a stray process holds a GPU ({busy})")
        if rung.do is Do.REBOOT:
            return rung
    return next_step(node, verdict, finding, busy, memory, flow.now(), settings)


def _carry_out(flow: Flow, act, node: Node, step: Step, finding: Finding | None, record: dict) -> Done:
    loud = step.do not in (Do.NONE, Do.WAIT)
    flow.log(f"remediation: {step.label}: {step.why}", loud=loud)
    if step.do is Do.RESET:
        return _reset(flow, act, step, finding)
    if step.do is Do.REBOOT:
        # DOWN, not the quarantine setting: with RESUME the node would be back in service
        # before its boot-time retest, and the reason carrying the cycle count gone.
        try:
            act.reboot(flow.node, step.reason, "DOWN")
        except SlurmError as e:  # said and remembered: not asked again every interval
            flow.log(f"remediation: scontrol reboot refused ({e}): an admin must reboot {flow.node}; "
                     f"asked again after slurm.remediation.reboot_timeout_s", loud=True)
            record["error"] = f"scontrol reboot refused: {e}"
            return Done.REFUSED
        flow.log(f"remediation: reboot requested: {step.reason}", loud=True)
        return Done.DONE
    if step.do in (Do.RETIRE, Do.FAIL_CYCLE):
        ok = act.drain(flow.node, step.reason, step.do.value)
        if not ok:
            flow.log(f"remediation: {step.do.value} not verified", loud=True)
        return Done.DONE if ok else Done.NOT_TAKEN
    return Done.DONE


def _reset(flow: Flow, act, step: Step, finding: Finding) -> Done:
    """Reset, retest, resume on a pass; else tag the reason with the attempt. RESUMED, DONE
    when the attempt was carried out and failed, NOT_TAKEN when it was not started (no time,
    not ours, a replay pending), FALLTHROUGH or WEDGED when the procedure itself failed."""
    from gpuhc.slurm.flows.frame import SLURM_RESERVE_S, run_checks, summary_line
    from gpuhc.slurm.flows.handover import acknowledge_kernel_log
    from gpuhc.slurm.repair.reset_run import procedure
    from gpuhc.sources import build_sources

    from gpuhc.slurm.repair.undo_journal import pending_note

    # The reset ends RESET_KEEP_S before the scontrol calls' reserve: its tag or resume, and the
    # log line, still fit. The run's one deadline, so the Slurm calls before the reset (the
    # re-read, the tag written ahead) come out of the reset's time, not on top of it.
    reset_by = flow.deadline.less(SLURM_RESERVE_S + RESET_KEEP_S)
    if reset_by.left() < 1.0:
        flow.log("remediation: no time left in this run for a reset; the next run tries", loud=True)
        return Done.NOT_TAKEN
    if pending := pending_note(flow.opts.state_dir):  # the replay at the run's start failed: the node is not whole
        flow.log(f"remediation: {pending}: no reset until it has run; the next run replays it", loud=True)
        return Done.NOT_TAKEN
    if not _still_ours(flow, act, step):
        return Done.NOT_TAKEN  # not started: not counted
    before = flow.now()  # acknowledged up to here, not after: what the reset raises must count
    # NVIDIA's way (docs/repair.md "The GPU reset procedure"): quiesce, reset, restore, verify.
    # Sources built per read: a replayed scenario is read anew, as live NVML is.
    _, result = procedure(flow.slurm["remediation"], finding.gpus, lambda: build_sources(flow.opts.sources).nvml.read(),
                          lambda line: flow.log(line, loud=True), reset_by,
                          lambda: mig_gpus(build_sources(flow.opts.sources)), flow.opts.state_dir,
                          lambda: gpu_processes(build_sources(flow.opts.sources)))
    flow.log(f"remediation: {step.label}: {'done' if result.ok else 'FAILED'}: {result.detail}", loud=True)
    if result.wedged:
        return Done.WEDGED
    if result.retry:  # only gpuhc itself was in the way: not counted (the memory written ahead is put back)
        return Done.NOT_TAKEN
    if result.ok:
        acknowledge_kernel_log(flow.opts.state_dir, before)
        report = run_checks(flow)
        verdict = verdict_of(report.results) if report is not None else Verdict.ERROR
        if report is not None:
            flow.log("remediation: retest " + summary_line(report, verdict), loud=True)
        # a drain by an active check stands until a run of that check passes (drain.unjudged_hold)
        from gpuhc.checks import active_ids

        held_for = unjudged_hold(step.reason, unjudged(report.results, active_ids())) if report is not None else None
        if held_for is not None:
            flow.log(f"remediation: the retest does not run {held_for}, which holds the node: not resuming")
        elif pending := pending_note(flow.opts.state_dir):
            flow.log(f"remediation: {pending}: not resuming until it has run", loud=True)
        elif verdict in (Verdict.PASS, Verdict.WARN):
            if act.resume(flow.node, f"remediation: {step.label} passed its retest"):
                note_resumed(flow)
                flow.log(f"resumed: {step.label} passed its retest")
                return Done.RESUMED
    # Failed reset or failed retest: the attempt counts; the reason shows it, if the node is
    # still gpuhc's (seconds went by: an admin may have taken it over meanwhile).
    now = act.sc.node(flow.node)
    if owned(now.reason) and out_of_service(now) and now.reason != step.reason:
        act.drain(flow.node, step.reason, f"remediation {step.label}")
    elif not owned(now.reason):
        flow.log(f"remediation: the node's reason changed meanwhile ({now.reason!r}): leaving it", loud=True)
        return Done.DONE
    return Done.FALLTHROUGH if result.fallthrough else Done.DONE


def _still_ours(flow: Flow, act, step: Step) -> bool:
    """Right before the reset: Slurm read again (an admin may have resumed the node, a job may
    have landed since the ladder's read), then the attempt written ahead (memory and tag), so a
    run killed mid-reset has counted it. False: no reset, said."""
    now = act.sc.node(flow.node)
    changed = jobs_of(now) or (None if owned(now.reason) and out_of_service(now) else
                               f"the node is no longer gpuhc's to reset (state {now.raw_state}, reason {now.reason!r})")
    if changed:
        flow.log(f"remediation: {step.label} not started: {changed}", loud=True)
        return False
    save_ladder(flow, step.memory)  # "reset n started"
    if now.reason != step.reason and not act.drain(flow.node, step.reason, f"remediation {step.label} started"):
        flow.log(f"remediation: {step.label} not started: the tag did not take", loud=True)
        return False
    return True

