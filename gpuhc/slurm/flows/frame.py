"""What every Slurm flow shares: its frame (:class:`Flow`, :class:`Outcome`), the stage run
inside the deadline, the actuator and the run lock, and the one step after a
decision (:func:`finish`: the event log and textfile, the breaker metric, the hooks).

The flows themselves are :mod:`gpuhc.slurm.flows.entry` (health check, prolog, epilog),
:mod:`gpuhc.slurm.repair.remediate` (the ladder, inside the health check) and
:mod:`gpuhc.slurm.repair.retest` (the admin's retest and release); the CLI only parses arguments and
calls :func:`run`. Hooks of the three Slurm-run flows fire from :func:`finish` alone: a step that
wants one (a remediation rung) adds it to :attr:`Outcome.events` (docs/repair.md, "Hooks").
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Mapping

from gpuhc.model.deadline import Deadline
from gpuhc.slurm.flows.log import Log
from gpuhc.slurm.policy.drain import Decision, Verdict

if TYPE_CHECKING:
    # subprocess, the scontrol parser, the actuator and the breaker load only when Slurm is
    # asked: the prolog's happy path (every job start) asks nothing.
    from gpuhc.slurm.act.actuator import Actuator
    from gpuhc.slurm.policy.breaker import BreakerState
    from gpuhc.slurm.act.scontrol import Scontrol

# Kept back from the stage deadline for the checks, so that the scontrol calls still fit.
SLURM_RESERVE_S = 4.0

MakeScontrol = Callable[[Deadline], "Scontrol"]  # the run's deadline -> wrapper
Event = tuple[str, dict[str, Any]]  # a hook event and its payload


@dataclass
class Outcome:
    exit_code: int
    lines: list[str] = field(default_factory=list)
    report: Any = None  # RunReport, when the stage ran
    decision: Decision | None = None
    breaker: BreakerState | None = None
    acted: bool = False  # a drain/resume was sent and verified
    slurm_error: str | None = None
    hard_exit: bool = False  # a reader thread may be stuck in C code: leave with os._exit
    extra: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)  # hooks a step asked for; fired by finish()


@dataclass
class Flow:
    """Everything a flow needs, injected so that unit tests can run it without Slurm."""

    stage: str  # passive / prolog / epilog / bootstrap
    opts: Any  # gpuhc.run.report.RunOptions
    log: Log
    make_scontrol: MakeScontrol | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    started: float = field(default_factory=time.monotonic)
    verdict: Verdict | None = None  # the stage's, once judged: a crash after it keeps a FAIL a FAIL
    breaker_known: Any = None  # BreakerState: this node's last count, read before the run lock (entry.py)

    @classmethod
    def for_command(cls, opts: Any, title: str, stage: str | None = None, **kw: Any) -> Flow:
        """A flow with the decision log ``slurm.log_file``/syslog name, prefixed ``title``."""
        s = opts.config.section("slurm")
        log = Log(f"{title} {opts.hostname}", s.get("log_file"), bool(s.get("syslog", True)))
        return cls(stage=stage or opts.stage, opts=opts, log=log, **kw)

    @property
    def slurm(self) -> dict[str, Any]:
        return self.opts.config.section("slurm")

    @property
    def node(self) -> str:
        return self.opts.hostname

    @cached_property
    def stage_s(self) -> float:
        """Slurm's timeout for the stage, as gpuhc may use it: ``slurm.deadline_s.<stage>``, or
        for the health check 5 s before slurm.conf's HealthCheckTimeout where the site set it."""
        if self.stage == "passive":
            from gpuhc.slurm.read.releases import passive_deadline_s

            return passive_deadline_s(float(self.slurm["deadline_s"]["passive"]), self.slurm.get("health_check_timeout_s"))
        return float(self.slurm["deadline_s"][self.stage])

    @cached_property
    def deadline(self) -> Deadline:
        """The run's one deadline (gpuhc/model/deadline.py), ``stage_s`` after ``started``. Every
        act and probe of the run gets this object, so each sees what the steps before it left,
        and the actuator sizes its time to verify a drain from the same ``stage_s``."""
        return Deadline(self.started + self.stage_s)

    def restart(self) -> None:
        """A new run on the same flow (the node watcher's rounds): a fresh start and deadline."""
        self.started = time.monotonic()
        self.__dict__.pop("deadline", None)

    @property
    def observe(self) -> bool:
        return self.slurm["mode"] == "observe"

    def scontrol(self) -> Scontrol:
        if self.make_scontrol is not None:
            sc = self.make_scontrol(self.deadline)
            sc.observe = sc.observe or self.observe  # the gate (gpuhc/slurm/act/command.py) whoever built it
            return sc
        from gpuhc.slurm.act.scontrol import Scontrol

        # warn: a node record that does not read goes to the flow's log (slurmd drops stderr)
        return Scontrol.from_section(self.slurm, deadline=self.deadline,
                                     warn=lambda line: self.log(f"Slurm output: {line}", loud=True))

    def now(self) -> float:
        return self.opts.now if self.opts.now is not None else time.time()


# ---------------------------------------------------------------------------- the stage


def run_checks(flow: Flow):
    """Run the stage inside its share of the deadline; None (logged) when gpuhc itself broke."""
    from gpuhc.errors import GpuhcError
    from gpuhc.run.runner import run_stage

    budget = float(flow.opts.config.section("budget_s")[flow.stage])
    flow.opts.budget_s = max(0.5, flow.deadline.cap(budget, keep=SLURM_RESERVE_S))
    flow.opts.progress = True  # the active checks' start/end lines, on stderr, for the job's log
    try:
        return run_stage(flow.opts)
    except GpuhcError as e:
        flow.log(f"gpuhc could not run the {flow.stage} checks: {e}", loud=True)
    except Exception as e:  # a bug: never a reason to drain
        flow.log(f"internal error running the {flow.stage} checks: {type(e).__name__}: {e}", loud=True)
    return None


def summary_line(report, verdict: Verdict, gpus: list[int] | None = None) -> str:
    fails = report.failing()
    which = "" if gpus is None else f" gpus={','.join(map(str, gpus)) or 'none'}"
    text = f"{report.stage}{which}: {verdict.value.upper()} ({len(report.results)} results, {len(fails)} failing"
    text += f", {report.duration_s:.2f}s)"
    if report.timed_out:
        text += f" timed out: {','.join(report.timed_out)}"
    return text


# ---------------------------------------------------------------------------- acting


def actuator(flow: Flow) -> Actuator:
    """The flow's actuator: its scontrol (inside the stage's deadline), breaker and log."""
    from gpuhc.slurm.act.actuator import Actuator
    from gpuhc.slurm.policy.breaker import BreakerSettings

    return Actuator(flow.scontrol(), BreakerSettings.from_section(flow.slurm["breaker"]), flow.log,
                    observe=flow.observe, stage_s=flow.stage_s)


def take_turn(flow: Flow, out: Outcome | None = None):
    """This node's turn with Slurm (:mod:`gpuhc.slurm.flows.runlock`): one run at a time, so that
    overlapping runs neither drain twice nor read the breaker before another's drain."""
    from gpuhc.slurm.flows.runlock import take

    turn = take(flow.opts.state_dir, flow.deadline, flow.log)
    if not turn.ok and out is not None:
        out.extra["run_lock"] = "busy: another run is acting on this node"
    return turn


# ---------------------------------------------------------------------------- after the decision


def run(flow: Flow, body: Callable[[Flow], Outcome], fail_open: bool,
        render: Callable[[Outcome], None] | None = None) -> tuple[Outcome | None, int]:
    """Run a Slurm-run flow (``entry.healthcheck``/``prolog``/``epilog``), then :func:`finish`
    and ``render`` (the CLI's printing of the report); the outcome (None when the flow broke)
    and the exit code. A bug in the flow is never a drain, and blocks a job only on a node that
    had already failed (:func:`crash_exit`); a bug after the decision (the event log, a
    report that does not render) is said and changes nothing: the decision's exit code stands,
    so a healthy node never gets "Prolog error" from gpuhc's bookkeeping."""
    from gpuhc.errors import EXIT_OK
    from gpuhc.slurm.flows import runlock

    try:
        _replay_undo(flow)  # before anything else: a reset killed half-way left the node unwhole
        out = body(flow)
    except Exception as e:
        flow.log(f"internal error: {type(e).__name__}: {e}", loud=True)
        return None, _chained(flow, None, crash_exit(flow, fail_open))
    finally:
        runlock.release()  # the next run's turn with Slurm (gpuhc.slurm.flows.runlock)
    for step in (finish, lambda _f, o: render(o) if render is not None else None):
        try:
            step(flow, out)
        except Exception as e:
            flow.log(f"internal error after the decision ({type(e).__name__}: {e}): the decision stands", loud=True)
    # Observe mode never fails a job, so Slurm never drains on its own account (docs/repair.md).
    if fail_open and flow.observe and out.exit_code != EXIT_OK:
        flow.log(f"observe mode: exit 0 instead of {out.exit_code}")
        return out, EXIT_OK
    return out, _chained(flow, out, out.exit_code)


def _chained(flow: Flow, out: Outcome | None, code: int) -> int:
    """The health check's last step: the site's other health check (``slurm.chain``, gpuhc/slurm/chain.py)
    once gpuhc's run, records and hooks are done, its status combined with gpuhc's."""
    if flow.stage != "passive":
        return code
    from gpuhc.slurm.chain import after_healthcheck

    return after_healthcheck(flow, out, code)


def _replay_undo(flow: Flow) -> None:
    """Carry out what a killed GPU reset left undone (gpuhc/slurm/repair/undo_journal.py); the
    node stays held until it has run (drain.decide's ``undo_pending``)."""
    from gpuhc.slurm.repair.undo_journal import replay

    replay(flow.opts.state_dir, flow.slurm["remediation"]["reset"], flow.log, flow.deadline.less(SLURM_RESERVE_S))


def crash_exit(flow: Flow, fail_open: bool) -> int:
    """The exit code of a flow that raised. A bug is no reason to drain or to hold a job back,
    unless the node had already failed its checks: a certain local fault stays a FAIL whatever
    broke after it, so the prolog does not let the job run (docs/slurm.md, "Bookkeeping failures")."""
    from gpuhc.errors import EXIT_INTERNAL, EXIT_OK, EXIT_UNHEALTHY

    if flow.verdict is Verdict.FAIL:
        state = flow.breaker_known
        if fail_open and flow.stage != "passive" and not breaker_off(getattr(flow, "slurm", {}), state):
            # exit 1 would let Slurm drain around the breaker (gpuhc/slurm/flows/entry.py, may_fail_job)
            flow.log(f"the node failed its {flow.stage} checks before gpuhc broke, and Slurm's own drain would "
                     "go around the breaker: letting the job run", loud=True)
            return EXIT_OK
        flow.log(f"the node failed its {flow.stage} checks before gpuhc broke: exiting {EXIT_UNHEALTHY}", loud=True)
        return EXIT_UNHEALTHY
    return EXIT_OK if fail_open else EXIT_INTERNAL


def breaker_off(slurm: Mapping, state: Any = None) -> bool:
    """No cap to pass: the breaker disabled, or no cap configured (``state``: a count, if any)."""
    from gpuhc.slurm.policy.breaker import BreakerSettings

    if state is not None and state.cap is None:
        return True
    s = BreakerSettings.from_section((slurm or {}).get("breaker") or {})
    return not s.enabled or (s.max_drained is None and s.max_drained_percent is None)


def finish(flow: Flow, out: Outcome) -> None:
    """The one step after a Slurm-run flow's decision: the jobs check's records (health check),
    the run's event-log line and textfile, the breaker gauge, then every hook the run produced.
    Each part is best effort: none changes the verdict or the exit code."""
    config = flow.opts.config
    if out.report is not None:
        if flow.stage == "passive":
            from gpuhc.slurm.jobs.act import after_healthcheck

            after_healthcheck(flow, out.report)  # the jobs check's record and opt-in requeue (docs/checks.md, "jobs")
        from gpuhc.export.output import publish

        for problem in publish(RunRecord(out), config):
            flow.log(f"warning: {problem}")
    problem = breaker_metric(out, config)
    if problem:
        flow.log(f"warning: {problem}")
    from gpuhc.export.hooks import fire_outcome

    fire_outcome(out, flow.node, flow.stage, config, flow.opts.state_dir, flow.log, flow.deadline)
    for event, payload in out.events:
        announce(flow, event, payload)


def announce(flow: Flow, event: str, payload: dict[str, Any]) -> None:
    """Say an event in the decision log and fire its hooks (gpuhc/export/hooks.py); a hook never
    changes a verdict, so every error stops here."""
    from gpuhc.export.hooks import fire

    flow.log(f"event {event}: {payload.get('why') or ''}")
    try:
        fire(event, payload, flow.opts.config, log=flow.log, deadline=flow.deadline)
    except Exception as e:  # never let a hook change what happened
        flow.log(f"hook {event} failed: {type(e).__name__}: {e}", loud=True)


class RunRecord:
    """The run's report plus what the Slurm side did: the event-log line
    (:func:`gpuhc.export.eventlog.run_record`) and the textfile's breaker gauge and counters."""

    def __init__(self, out: Outcome) -> None:
        self.out = out

    def to_dict(self) -> dict:
        from gpuhc.export.eventlog import SlurmPart, run_record

        out, d = self.out, self.out.decision
        return run_record(out.report.to_dict(), SlurmPart(
            action=d.act.value if d else "none", why=d.why if d else None, reason=d.reason if d else None,
            acted=out.acted, breaker=out.breaker.to_dict() if out.breaker else None, error=out.slurm_error,
            postmortem=out.extra.get("postmortem"),
            remediation=out.extra.get("remediation"),  # the ladder's step, if one was taken
            observed=out.extra.get("observed"),  # observe mode: the act that was not sent
            fault=out.extra.get("fault")))  # a drain's lemon record (gpuhc/slurm/repair/lemons.py)


def breaker_metric(out: Outcome, config) -> str | None:
    """The breaker gauge, next to the stage textfile as ``gpuhc-breaker.prom``, whenever this
    run counted the drained nodes (a run that did not count leaves the last value standing)."""
    textfile = config.section("output").get("prometheus_textfile")
    b = out.breaker
    if not textfile or b is None or b.cap is None:
        return None
    path = os.path.join(os.path.dirname(textfile) or ".", "gpuhc-breaker.prom")
    try:
        from gpuhc.export.prometheus import write_breaker_metric

        write_breaker_metric(path, b.open, b.drained, b.cap, retired=b.retired, retired_cap=b.retired_cap)
    except Exception as e:  # metrics are best effort: never change the verdict
        return f"breaker metric {path}: {e}"
    return None
