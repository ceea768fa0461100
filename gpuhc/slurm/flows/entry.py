"""The Slurm entry points: ``gpuhc healthcheck``, ``gpuhc prolog``, ``gpuhc epilog``.

Each flow is: run the stage (the runner) -> verdict -> policy decision -> scontrol -> verify ->
remember. The rules that make it safe to run on every node every few minutes:

- **Ask Slurm only with something to decide.** A healthy run of a node gpuhc does not hold sends
  nothing; so does a healthy prolog or epilog, whatever gpuhc remembers (only the health check
  resumes).
- **Read right before acting, re-read after.** There is no compare-and-set in Slurm; the window
  between our read and our update is one scontrol round trip, and the re-read tells us (and the
  log) whether the node ended up as we meant. Memory is stored only for what was verified, so a
  timed-out or refused drain is not remembered as a drain.
- **Stay inside the deadline.** slurmd kills the health check at 60 s; the checks get the stage
  budget, every scontrol call a timeout cut to what is left of ``slurm.deadline_s.<stage>``.
- **Fail open on gpuhc's bugs, closed on the hardware's failures.** If gpuhc itself breaks (bad
  config, internal error, a check that could not judge), the prolog and the epilog exit 0 with a
  loud log line: a gpuhc bug must not drain the cluster through "Prolog error". A real FAIL makes
  the prolog exit 1 after draining with our own reason, so Slurm requeues the job (and, if our
  drain did not go through, drains the node itself).
- **The circuit breaker wins over exit codes.** A non-zero exit makes Slurm drain the node
  itself, around the breaker's recount. So a prolog or an epilog exits 1 only when gpuhc holds
  the node already (its own drain, under the cap) or the breaker is off. A run that could not
  take its turn (another run held the lock), came too late to verify a drain, or found Slurm
  silent lets the job run and the log says why (:func:`may_fail_job`; docs/slurm.md, "No exit 1
  without the breaker"). Slurm's own "Prolog error" drains count under the cap all the same
  (gpuhc/slurm/policy/breaker.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from gpuhc.errors import EXIT_BREAKER, EXIT_INTERNAL, EXIT_OK, EXIT_UNHEALTHY, SlurmError
from gpuhc.slurm.flows.frame import (  # noqa: F401 - Flow, Outcome, Log re-exported for the campaign model (bench/)
    SLURM_RESERVE_S,
    Flow,
    Log,
    Outcome,
    actuator,
    breaker_off,
    run_checks,
    summary_line,
    take_turn,
)
from gpuhc.slurm.flows.memory import load_memory, save_memory
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.drain import (Act, Decision, PolicySettings, Verdict, decide, needs_slurm, rejudge, unjudged,
                                      verdict_of)
from gpuhc.slurm.policy.reason import build_reason, parse_reason

if TYPE_CHECKING:
    from gpuhc.slurm.repair.lemon_panics import PanicLemon


# ---------------------------------------------------------------------------- acting


def judge_and_act(flow: Flow, report, verdict: Verdict, out: Outcome, allow_resume: bool,
                  node: Node | None = None, panic: PanicLemon | None = None) -> None:
    """Policy and Slurm for one finished run; fills ``out`` (decision, breaker, errors).

    ``node`` is a reading taken before the checks (the health check's handover read); the
    actuator uses it for decisions that send nothing and re-reads before a drain or a resume.
    ``panic``: a previous boot's hardware panic made the node a lemon (verdict FAIL, its
    evidence the reason); only a retirement is sent, never a plain drain."""
    flow.verdict = verdict if panic is None else verdict_of(report.results)  # a panic's retirement: the run passed
    if verdict is Verdict.FAIL:  # known before the lock's wait: a run that gets no turn still knows it
        from gpuhc.slurm.flows.memory import last_breaker

        flow.breaker_known = last_breaker(flow)
    memory = load_memory(flow)
    if not needs_slurm(verdict, memory) or (verdict is not Verdict.FAIL and not allow_resume):
        return
    turn = take_turn(flow, out)
    if not turn.ok:
        return
    if turn.waited:  # another run acted meanwhile: start from what it did and remembered
        node, memory = None, load_memory(flow)
    reason = panic.reason if panic is not None else build_reason(report.results) if verdict is Verdict.FAIL else None
    settings = PolicySettings.from_section(flow.slurm)
    from gpuhc.checks import active_ids

    held_for = unjudged(report.results, active_ids())  # an active check's drain stands (drain.unjudged_hold)
    now = flow.now()
    lemon = panic.lemon if panic is not None else None
    if verdict is Verdict.FAIL and lemon is None:  # a drain may make a lemon: docs/repair.md "Lemon memory"
        from gpuhc.slurm.repair.lemon_memory import LemonCheck

        lemon = LemonCheck.for_flow(flow, report, reason, now)

    from gpuhc.slurm.repair.undo_journal import pending_note

    undo = pending_note(flow.opts.state_dir) if verdict is not Verdict.FAIL else None  # a reset left the node unwhole

    def decider(n: Node, breaker_open: bool) -> Decision:
        decision = decide(n, verdict, reason, memory, now, settings, breaker_open=breaker_open,
                          unjudged_checks=held_for, undo_pending=undo)
        decision = lemon.apply(decision) if lemon is not None else decision
        if panic is not None and decision.act is Act.DRAIN and not parse_reason(decision.reason).retired:
            return Decision(Act.NONE, "a hardware panic alone never drains", memory)
        return decision

    def remember(decision: Decision) -> None:
        save_memory(flow, decision.memory, decision)
        if lemon is not None:
            lemon.remember(decision, out.extra)
        if decision.act is Act.DRAIN:
            flow.log(f"drained: {decision.why}: {decision.reason}", loud=True)

    try:
        done = actuator(flow).apply(flow.node, decider, node, on_verified=remember)
    except SlurmError as e:
        out.slurm_error = str(e)
        flow.log(f"Slurm did not answer as needed, node left as it was, nothing remembered: {e}", loud=True)
        return
    except Exception as e:  # gpuhc broke while acting: the node's verdict stands (bookkeeping_failed)
        bookkeeping_failed(flow, out, e)
        return
    decision = out.decision = done.decision
    out.breaker = done.breaker
    if done.breaker is not None:
        from gpuhc.slurm.flows.memory import save_breaker

        save_breaker(flow, done.breaker)
        if done.breaker.retired_alert:  # retirements have their own cap: said, draining goes on (breaker.py)
            flow.log(done.breaker.message, loud=True)
    out.acted = done.acted
    out.slurm_error = done.error
    if decision.act is Act.BLOCKED:
        _blocked(flow, out, decision, reason)
    elif not decision.act.touches_slurm:
        save_memory(flow, decision.memory, decision)
        if panic is not None:  # nothing to retire (already held, not ours): the panic is counted all the same
            panic.lemon.add([], keep=True)
        flow.log(f"{decision.act.value}: {decision.why}", loud=decision.act is Act.KEEP)
    elif done.observed:  # observe mode: the actuator logged "would ..."; nothing is remembered
        out.extra["observed"] = decision.act.value
    elif not done.verified:
        flow.log(f"{decision.act.value} not verified: {decision.why}", loud=True)
    elif decision.act is Act.RESUME:
        flow.log(f"resumed: {decision.why}")
    elif done.undone:
        out.decision = Decision(Act.BLOCKED, "circuit breaker open (after concurrent drains)",
                                replace(memory, passes=0), decision.reason, uses_capacity=True)
        _blocked(flow, out, out.decision, decision.reason)


def bookkeeping_failed(flow: Flow, out: Outcome, e: Exception) -> None:
    """gpuhc's own failure while acting on a node whose verdict is known (docs/slurm.md,
    "Bookkeeping failures"): said, nothing remembered, and the verdict keeps its exit code (a
    FAIL stays 1: the prolog does not let the job run)."""
    out.slurm_error = f"internal error: {type(e).__name__}: {e}"
    flow.log(f"gpuhc broke while acting on the node ({out.slurm_error}): node left as it was, "
             "nothing remembered", loud=True)


def breaker_open(out: Outcome) -> bool:
    """Not drained because the breaker's cap is reached: the one FAIL that lets a job run and
    leaves Slurm's own drain out. Not drained because too little of the deadline was left to
    verify a drain (docs/slurm.md, "Time to verify") is a FAIL like any other: the prolog and
    the epilog exit 1, and Slurm drains the node itself."""
    b = out.breaker
    return out.decision is not None and out.decision.act is Act.BLOCKED and b is not None and b.open


def may_fail_job(flow: Flow, out: Outcome) -> bool:
    """May this failing prolog or epilog exit 1? Slurm then drains the node itself ("Prolog
    error"), a drain that the breaker counts only once it exists and that no recount can undo.
    In a storm every node is late at once (the lock, the jitter, a slow controller), and each
    such exit would be one more node out past the cap: 8 for a cap of 4 when scontrol took 4 s,
    trusting counts up to 15 minutes old. So exit 1 only when it takes no capacity: gpuhc holds
    the node already (its drain stood the recount; Slurm drains only nodes not drained), or
    the breaker is off. Otherwise the job runs, and the log names the harm chosen: one job on a
    suspect GPU, bounded by the next health check, which drains the node under the cap
    (docs/slurm.md, "No exit 1 without the breaker")."""
    d = out.decision
    # An observed drain is one enforce mode would have made: observe mode says what follows it.
    drained = out.acted or out.extra.get("observed") == Act.DRAIN.value
    if d is not None and (d.act is Act.KEEP or (d.act is Act.DRAIN and drained)):
        return True
    state = out.breaker if out.breaker is not None else flow.breaker_known
    if breaker_off(flow.slurm, state):
        return True
    why = state.message if state is not None else "the breaker's state is unknown (no count in this run nor a recent one)"
    job = _job(flow.env)
    flow.log(f"job {job}: not drained ({out.extra.get('run_lock') or out.slurm_error or (d.why if d else 'no decision')}); "
             f"{why}: letting the job run (a job on a suspect GPU) rather than have Slurm drain the node past the "
             "breaker (a node out past the cap); the next health check drains it under the cap", loud=True)
    return False


def _blocked(flow: Flow, out: Outcome, decision: Decision, reason: str | None) -> None:
    # Blocked with the breaker closed: too late in the run to verify a drain (the actuator's why).
    b = out.breaker
    why = b.message if b is not None and b.open else "; ".join(([b.message] if b else []) + [decision.why])
    flow.log(f"{why}; NOT draining {flow.node} ({reason})", loud=True)
    save_memory(flow, decision.memory, decision)


# ---------------------------------------------------------------------------- the three flows


def healthcheck(flow: Flow) -> Outcome:
    from gpuhc.slurm.flows.handover import adopt_external_resume

    held = adopt_external_resume(flow, load_memory(flow), flow.log)  # None unless gpuhc holds the node
    flow.opts.also = rejudge(held)  # the check that holds it, even one this stage does not run
    report = run_checks(flow)
    if report is None:
        return Outcome(EXIT_INTERNAL, flow.log.lines)
    from gpuhc.slurm.flows.wedged import update

    update(flow, report)  # NVML hanging run after run is a FAIL (gpuhc/slurm/flows/wedged.py)
    verdict = verdict_of(report.results)
    out = Outcome(report.exit_code, flow.log.lines, report, hard_exit=bool(report.timed_out))
    flow.log(summary_line(report, verdict), loud=verdict is Verdict.FAIL)
    from gpuhc.slurm.repair.lemon_panics import count_panics

    panic = count_panics(flow, report)  # a previous boot's hardware panic: one lemon fault (docs/repair.md)
    if panic is not None and verdict is not Verdict.FAIL:  # the panic that makes a lemon retires it
        judge_and_act(flow, report, Verdict.FAIL, out, allow_resume=False, node=held, panic=panic)
    else:
        if panic is not None:  # this run drains: its drain is judged with the panic counted
            panic.lemon.add([], keep=flow.slurm["mode"] != "observe")
        judge_and_act(flow, report, verdict, out, allow_resume=True, node=held)
    if flow.slurm["remediation"]["enabled"] and flow.slurm["mode"] != "observe":  # observe: no GPU reset either
        from gpuhc.slurm.repair.remediate import climb

        climb(flow, report, verdict, out)  # the ladder: docs/slurm.md, "Remediation ladder"
    if breaker_open(out):
        out.exit_code = EXIT_BREAKER
    elif out.slurm_error and verdict is not Verdict.FAIL:
        out.exit_code = EXIT_INTERNAL
    return out


def _no_gpus(report) -> bool:
    """Did gpu-count find a node with no GPUs, as expected (a CPU node: docs/slurm.md, "Mixed
    clusters")?"""
    return bool(report) and any(r.check == "gpu-count" and r.status.value == "pass" and r.value == 0
                                for r in report.results)


def _job(env: Mapping[str, str]) -> str:
    return env.get("SLURM_JOB_ID") or "?"


def _job_scope(flow: Flow) -> str:
    """Point the run at the job's GPUs as Slurm gave them (gpuhc/slurm/jobs/gpus.py: Slurm's
    indices and MIG slices mapped to the hardware). Who holds a GPU is judged only when the
    job's devices are known: on a shared node another job's process is no stray."""
    from gpuhc.node.gres_conf import GpuMapError
    from gpuhc.slurm.jobs.gpus import job_devices

    try:
        job, where = job_devices(flow.opts, flow.node, flow.env)
    except GpuMapError as e:  # gpuhc cannot tell; never the node's fault, never a drain
        flow.opts.gpus, flow.opts.job, flow.opts.occupancy = None, None, False
        flow.log(f"job {_job(flow.env)}: cannot map Slurm's GPUs to this node's: {e}; judging every GPU's "
                 "hardware, not who holds them", loud=True)
        return "job's GPUs not mapped; GPU occupancy not judged"
    flow.opts.job = job
    flow.opts.gpus = None if job is None else job.gpus
    flow.opts.occupancy = job is not None
    return where if job is not None else f"{where}: every GPU of the node is checked; GPU occupancy not judged " \
                                         "(another job may hold them)"


def _where(flow: Flow, where: str, report) -> str:
    """The log line's account of the job's GPUs, once the checks have seen the node: on a node
    without GPUs (docs/slurm.md, "Mixed clusters") there is nothing to check or map."""
    from gpuhc.node.gpumap import NO_GPU_GIVEN

    if flow.opts.job is None and where.startswith(NO_GPU_GIVEN) and _no_gpus(report):
        return "a node without GPUs; the job was given none"
    return where


def prolog(flow: Flow) -> Outcome:
    from gpuhc.slurm.flows.handover import adopt_external_resume

    where = _job_scope(flow)
    adopt_external_resume(flow, load_memory(flow), flow.log)  # an admin's resume, seen first here: handover.py
    gpus = flow.opts.gpus
    fail_open = bool(flow.slurm["prolog_fail_open"])
    report = run_checks(flow)
    if report is None:
        code = EXIT_OK if fail_open else EXIT_UNHEALTHY
        flow.log(f"job {_job(flow.env)}: gpuhc broke, {'letting the job run (fail open)' if fail_open else 'failing the prolog (prolog_fail_open: false)'}", loud=True)
        return Outcome(code, flow.log.lines)
    verdict = verdict_of(report.results)
    out = Outcome(EXIT_OK, flow.log.lines, report, hard_exit=bool(report.timed_out))
    flow.log(f"job {_job(flow.env)} " + summary_line(report, verdict, gpus) + f" [{_where(flow, where, report)}]",
             loud=verdict is Verdict.FAIL)
    if verdict is Verdict.ERROR:
        flow.log(f"job {_job(flow.env)}: gpuhc could not judge ({_errors(report)}): letting the job run", loud=True)
        return out
    if verdict is not Verdict.FAIL:
        return out  # the happy path: not a single Slurm call
    judge_and_act(flow, report, verdict, out, allow_resume=False)
    if breaker_open(out):
        flow.log(f"job {_job(flow.env)}: circuit breaker open: letting the job run rather than have Slurm "
                 "drain the node with 'Prolog error'", loud=True)
        return out
    if not may_fail_job(flow, out):
        return out
    out.exit_code = EXIT_UNHEALTHY  # Slurm requeues the job; the node is drained (ours, or "Prolog error")
    if flow.slurm["mode"] != "observe":  # observe mode: the CLI exits 0 and says so (docs/repair.md)
        flow.log(f"job {_job(flow.env)}: failing the prolog so that Slurm requeues the job", loud=True)
    return out


def epilog(flow: Flow) -> Outcome:
    from gpuhc.slurm.flows.handover import adopt_external_resume

    where = _job_scope(flow)
    adopt_external_resume(flow, load_memory(flow), flow.log)  # as in the prolog
    report = run_checks(flow)
    job_failed, how = job_exit(flow.env)
    out = Outcome(EXIT_OK, flow.log.lines, report, hard_exit=bool(report and report.timed_out))
    if job_failed and _no_gpus(report):
        # A bundle is the GPUs' evidence (NVML, Xids, clocks): a node without GPUs has none to keep.
        flow.log(f"job {_job(flow.env)} {how}: no post-mortem bundle (a node without GPUs)")
    elif job_failed:
        from gpuhc.postmortem.job import write_bundle

        # Raw kernel lines get a bounded share of what the scontrol calls do not need.
        tail_s = max(0.2, flow.deadline.cap(2.0, keep=SLURM_RESERVE_S))
        try:
            path = write_bundle(flow, report, tail_s)
            out.extra["postmortem"] = path
            flow.log(f"job {_job(flow.env)} {how}: post-mortem bundle {path}", loud=True)
        except Exception as e:  # a full disk or an unsafe directory must not turn into a drain
            flow.log(f"job {_job(flow.env)} {how}: post-mortem bundle not written: {e}", loud=True)
    if report is None:
        flow.log(f"job {_job(flow.env)}: gpuhc broke in the epilog: leaving the node alone (fail open)", loud=True)
        return out
    verdict = verdict_of(report.results)
    flow.log(f"job {_job(flow.env)} " + summary_line(report, verdict, flow.opts.gpus)
             + f" [{_where(flow, where, report)}]",
             loud=verdict is Verdict.FAIL)
    if verdict is not Verdict.FAIL:
        return out
    judge_and_act(flow, report, verdict, out, allow_resume=False)
    if breaker_open(out) or not may_fail_job(flow, out):
        return out
    # Drained with our reason (Slurm keeps it: it drains with "Epilog error" only nodes not
    # already drained), or our drain failed and Slurm's own drain is the fallback.
    out.exit_code = EXIT_UNHEALTHY
    return out


def job_exit(env: Mapping[str, str]) -> tuple[bool, str]:
    """Did the job fail, and how, from the epilog's SLURM_JOB_EXIT_CODE (a wait(2) status:
    256 is exit code 1, 9 is SIGKILL). Unreadable text counts as a failure: a bundle too many
    costs disk, a bundle too few costs the evidence."""
    raw = (env.get("SLURM_JOB_EXIT_CODE") or "0").strip()
    try:
        status = int(raw)
    except ValueError:
        return raw not in ("", "0", "0:0"), f"exit status {raw!r}"
    if status == 0:
        return False, "exited 0"
    if status & 0x7F:
        return True, f"killed by signal {status & 0x7F} (status {status})"
    return True, f"exited {status >> 8} (status {status})"


def _errors(report) -> str:
    from gpuhc.model.result import Status

    errs = [f"{r.check}: {r.message}" for r in report.results if r.status is Status.ERROR]
    return "; ".join(errs)[:200] or "no detail"
