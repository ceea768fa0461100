"""What `gpuhc check` does, without click: the command's body, run by click (gpuhc/cli/check_cmd.py,
which declares its options) or straight from a plain command line (gpuhc/cli/fast.py), as
every node's runs are. Output to the person goes to stderr through :func:`gpuhc.errors.say`; a usage error
raises click's own exception, click imported only then (:func:`gpuhc.cli.common.bad_parameter`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from gpuhc.checks.base import STAGES
from gpuhc.cli.common import (
    MAX_GPU_INDEX,
    SourceArgs,
    bad_parameter,
    demo_scenario_path,
    parse_gpu_list,
    replay_scope,
    run_options_from,
)
from gpuhc.cli.options import Opt
from gpuhc.errors import say
from gpuhc.text.logtext import escape

OPTIONS = (
    Opt(["--stage"], "stage", "choice", "Which checks to run.", default="passive", choices=STAGES, show_default=True),
    Opt(["--demo"], "demo", "flag", "Judge the bundled demo node (8x H100) instead of this machine."),
    Opt(["--gpus"], "gpu_list", "str", "Only these GPUs as Slurm numbers them (its SLURM_JOB_GPUS indices, MIG slices "
        f"included, e.g. 0,1 or 0-3; or MIG/GPU UUIDs), mapped through gres.conf; -v says what they map to "
        f"(default: all; at most {MAX_GPU_INDEX})."),
    Opt(["--only"], "only", "str", "Run only this check id (repeatable).", multiple=True),
    Opt(["-v", "--verbose"], "verbose", "flag", "Show passing and n/a results too."),
    Opt(["--timings"], "timings", "flag", "Also show what each source and each check cost, in wall-clock ms "
        "(with --json: the report's 'timings'); docs/checks.md lists typical costs."),
    Opt(["--publish"], "publish_replay", "flag",
        "Also write a replay to the configured event log and Prometheus textfile (a live run always does)."),
)


def run_check(src: SourceArgs, stage: str, demo: bool, gpu_list: str | None, only: tuple[str, ...], verbose: bool,
              timings: bool, publish_replay: bool) -> None:
    """`gpuhc check`'s body (its help is in gpuhc/cli/check_cmd.py)."""
    from gpuhc.export.output import publish, render_report
    from gpuhc.run.runner import run_stage

    if demo:
        src = replace(src, nvml_scenario=src.nvml_scenario or demo_scenario_path())
        say(f"demo: judging the bundled demo node ({os.path.basename(src.nvml_scenario)}), not this machine")
    with _read_once(src), replay_scope(src) as (src, replay):
        opts = run_options_from(src, stage)
        if gpu_list:
            _slurm_gpus(opts, gpu_list, verbose)
        opts.only = tuple(only)
        if opts.only:
            _check_only(opts.only, stage)
        # Active checks say what runs: a spinner on a terminal, plain lines on stderr otherwise
        # (stdout stays clean for --json).
        opts.progress = True
        opts.timings = timings
        report = run_stage(opts)
        report.replay = replay
        try:
            render_report(report, json_mode=src.json_mode, verbose=verbose, config=opts.config)
            if report.timings is not None and not src.json_mode:
                from gpuhc.run.timings import timing_lines

                sys.stdout.write("".join(line + "\n" for line in timing_lines(report.timings)))
        except BrokenPipeError:
            # `gpuhc check | head`: the reader left early. The verdict (exit code, event log,
            # metrics) still stands; click would otherwise turn this into exit 1, "unhealthy".
            _drop_stdout()
        if not replay or publish_replay:
            for problem in publish(report, opts.config):
                say(f"gpuhc: warning: {escape(problem)}")
    from gpuhc.run.phases import mark

    mark("written")
    finish(report.exit_code, hard=bool(report.timed_out))



def _read_once(src: SourceArgs):
    """A replayed recording is read once for its node's name and its readings
    (gpuhc/sources/scenario.py ``loaded_once``); a live run imports nothing for it."""
    if not src.nvml_scenario:
        from contextlib import nullcontext

        return nullcontext()
    from gpuhc.sources.scenario import loaded_once

    return loaded_once()


def _slurm_gpus(opts, text: str, verbose: bool) -> None:
    """Point the run at the GPUs Slurm would give by these names (gpuhc/slurm/jobs/gpus.py)."""
    from gpuhc.node.gres_conf import GpuMapError
    from gpuhc.slurm.jobs.gpus import job_devices, node_devices

    ids = [t.strip() for t in text.split(",") if t.strip()]
    if ids and all(t.startswith(("MIG-", "GPU-")) for t in ids):
        env = {"CUDA_VISIBLE_DEVICES": ",".join(ids)}
    else:
        env = {"SLURM_JOB_GPUS": ",".join(map(str, parse_gpu_list(text) or []))}
    env.update({k: v for k, v in os.environ.items() if k == "SLURM_CONF"})
    try:
        job, where = job_devices(opts, opts.hostname or "", env)
        _, source = node_devices(opts, opts.hostname or "", env)
    except GpuMapError as e:  # said for the person who typed --gpus, not as the prolog's environment
        raise bad_parameter(escape(getattr(e, "reason", str(e))), "--gpus") from None
    opts.job, opts.gpus = job, job.gpus if job is not None else None
    if verbose and job is not None:
        say(f"--gpus {escape(text)}: mapped through {escape(source)}")
        for m in job.devices:
            say(f"  {escape(m.describe())}")


def _check_only(only: tuple[str, ...], stage: str) -> None:
    """A mistyped --only would run nothing and report a healthy node."""
    from gpuhc.checks import checks_for_stage

    known = [c.id for c in checks_for_stage(stage)]
    unknown = [c for c in only if c not in known]
    if unknown:
        raise bad_parameter(f"no check {', '.join(map(repr, unknown))} in stage {stage} "
                            f"(known: {', '.join(known)})", "--only")


def _drop_stdout() -> None:
    """Point stdout at /dev/null so nothing later (the exit flush) writes to the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def finish(code: int, hard: bool = False) -> None:
    """Exit; after a timeout a reader thread may be stuck in C code, so do not wait for it."""
    if hard:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


