"""`gpuhc healthcheck`, `gpuhc prolog`, `gpuhc epilog`: what Slurm runs (through slurm/*.sh).

They take the same replay options as `gpuhc check`, so a test (or an admin) can run the real
flow against a scenario. Exit codes: 0 healthy (or gpuhc broke in a prolog/epilog: fail open),
1 unhealthy, 2 usage/config error (health check), 3 gpuhc could not judge or Slurm did not
answer, 4 circuit breaker open (health check).
"""

from __future__ import annotations

import os
import sys

import click

from gpuhc.cli.common import SourceArgs, source_options


def _run(src: SourceArgs, stage: str, flow_name: str) -> None:
    from gpuhc.errors import EXIT_OK, GpuhcError
    from gpuhc.slurm import entry

    node = src.hostname or os.environ.get("SLURMD_NODENAME") or None
    fail_open = flow_name in ("prolog", "epilog")
    try:
        from gpuhc.cli.common import run_options_from

        opts = run_options_from(src, stage)
    except GpuhcError as e:
        # A broken config: the health check says so (exit 2); a prolog/epilog must not turn a
        # typo in gpuhc.yaml into drained nodes or blocked jobs (unless told to fail closed,
        # which needs a readable config, so: fail open).
        from gpuhc.logtext import escape

        line = escape(f"gpuhc {flow_name} {node or '?'}: error: {e}")
        click.echo(line, err=True)
        _syslog(line)
        _exit(EXIT_OK if fail_open else e.exit_code)
        return
    slurm = opts.config.section("slurm")
    # Observe mode never fails a job, so Slurm never drains on its own account (docs/repair.md).
    never_fail = fail_open and slurm["mode"] == "observe"
    log = entry.Log(f"gpuhc {flow_name} {opts.hostname}", slurm.get("log_file"), bool(slurm.get("syslog", True)))
    flow = entry.Flow(stage=stage, opts=opts, log=log)
    from gpuhc.slurm import runlock

    try:
        out = getattr(entry, flow_name)(flow)
    except Exception as e:  # a bug: never a drain; a blocked job only for a node that failed
        log(f"internal error: {type(e).__name__}: {e}", loud=True)
        _exit(_crash_exit(flow, log, fail_open))
        return
    finally:
        runlock.release()  # the next run's turn with Slurm (gpuhc.slurm.runlock)
    if src.json_mode and out.report is not None:
        from gpuhc.output import render_report

        render_report(out.report, json_mode=True)
    if flow_name == "healthcheck" and out.report is not None:
        from gpuhc.slurm.jobs_act import after_healthcheck

        after_healthcheck(flow, out.report)  # the jobs check's record and opt-in requeue (docs/checks.md, "jobs")
    if out.report is not None:
        from gpuhc.output import publish

        for problem in publish(_WithSlurm(out), opts.config):
            log(f"warning: {problem}")
    problem = _breaker_metric(out, opts.config)
    if problem:
        log(f"warning: {problem}")
    from gpuhc.hooks import fire_outcome

    fire_outcome(out, opts.hostname, stage, opts.config, opts.state_dir, log, flow.deadline)
    if never_fail and out.exit_code != EXIT_OK:
        log(f"observe mode: exit 0 instead of {out.exit_code}")
    _exit(EXIT_OK if never_fail else out.exit_code, hard=out.hard_exit)


def _crash_exit(flow, log, fail_open: bool) -> int:
    """The exit code of a flow that raised. A bug is no reason to drain or to hold a job back,
    unless the node had already failed its checks: a certain local fault stays a FAIL whatever
    broke after it, so the prolog does not let the job run (docs/slurm.md, "Bookkeeping failures")."""
    from gpuhc.errors import EXIT_INTERNAL, EXIT_OK, EXIT_UNHEALTHY
    from gpuhc.slurm.policy import Verdict

    if flow.verdict is Verdict.FAIL:
        log(f"the node failed its {flow.stage} checks before gpuhc broke: exiting {EXIT_UNHEALTHY}", loud=True)
        return EXIT_UNHEALTHY
    return EXIT_OK if fail_open else EXIT_INTERNAL


class _WithSlurm:
    """The run's report plus what the Slurm side did, for the event log and the textfile
    (the breaker gauge and the drain/resume counters come from the ``slurm`` key)."""

    def __init__(self, out) -> None:
        self.out = out

    def to_dict(self) -> dict:
        doc = self.out.report.to_dict()
        d = self.out.decision
        doc["slurm"] = {
            "action": d.act.value if d else "none",
            "why": d.why if d else None,
            "reason": d.reason if d else None,
            "acted": self.out.acted,
            "breaker": self.out.breaker.to_dict() if self.out.breaker else None,
            "error": self.out.slurm_error,
            "postmortem": self.out.extra.get("postmortem"),
            "remediation": self.out.extra.get("remediation"),  # the ladder's step, if one was taken
            "observed": self.out.extra.get("observed"),  # observe mode: the act that was not sent
            "fault": self.out.extra.get("fault"),  # a drain's lemon record (gpuhc/slurm/lemons.py)
        }
        return doc


def _breaker_metric(out, config) -> str | None:
    """The breaker gauge, next to the stage textfile as ``gpuhc-breaker.prom``, whenever this
    run counted the drained nodes (a run that did not count leaves the last value standing)."""
    textfile = config.section("output").get("prometheus_textfile")
    b = out.breaker
    if not textfile or b is None or b.cap is None:
        return None
    path = os.path.join(os.path.dirname(textfile) or ".", "gpuhc-breaker.prom")
    try:
        from gpuhc.export.prometheus import write_breaker_metric

        write_breaker_metric(path, b.open, b.drained, b.cap)
    except Exception as e:  # metrics are best effort: never change the verdict
        return f"breaker metric {path}: {e}"
    return None


def _syslog(line: str) -> None:
    try:
        import syslog

        syslog.openlog("gpuhc", 0, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, line)
    except Exception:
        pass


def _exit(code: int, hard: bool = False) -> None:
    # After a source timed out a reader thread may be stuck in C code; do not wait for it.
    sys.stdout.flush()
    sys.stderr.flush()
    if hard:
        os._exit(code)
    sys.exit(code)


@click.command()
@source_options
def healthcheck(src: SourceArgs) -> None:
    """Slurm HealthCheckProgram: passive checks, then drain/resume this node.

    Drains on failure with a `gpuhc:` reason; resumes only nodes it drained, after
    slurm.resume_after clean runs and the cool-down; never touches a reason it did not set.
    Asks Slurm nothing when the node is healthy and not held by gpuhc.
    """
    _run(src, "passive", "healthcheck")


@click.command()
@source_options
def prolog(src: SourceArgs) -> None:
    """Slurm Prolog: fast checks of the job's GPUs (SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES).

    On a failure: drain with gpuhc's reason, then exit 1 so Slurm requeues the job. Healthy:
    exit 0 without a single Slurm call. gpuhc's own errors: exit 0 with a loud log line.
    """
    _run(src, "prolog", "prolog")


@click.command()
@source_options
def epilog(src: SourceArgs) -> None:
    """Slurm Epilog: checks after the job; a post-mortem bundle when the job failed
    (SLURM_JOB_EXIT_CODE non-zero); drains on failure."""
    _run(src, "epilog", "epilog")
