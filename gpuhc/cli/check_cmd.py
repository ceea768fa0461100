"""`gpuhc check` (judge this node, or a recording of one) and `gpuhc snapshot` (record it)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import click

from gpuhc.checks.base import STAGES
from gpuhc.cli import CONTEXT
from gpuhc.cli.common import (
    MAX_GPU_INDEX,
    MAX_WAIT_S,
    Seconds,
    SourceArgs,
    demo_scenario_path,
    load,
    node_name,
    parse_gpu_list,
    recorded_host,
    replay_scope,
    run_options_from,
    source_options,
    source_spec,
    write_output,
)
from gpuhc.logtext import escape


@click.command(context_settings=CONTEXT)
@click.option("--stage", type=click.Choice(STAGES), default="passive", show_default=True, help="Which checks to run.")
@click.option("--demo", is_flag=True, help="Judge the bundled demo node (8x H100) instead of this machine.")
@click.option("--gpus", "gpu_list", help="Only these GPUs as Slurm numbers them (its SLURM_JOB_GPUS indices, MIG slices "
              f"included, e.g. 0,1 or 0-3; or MIG/GPU UUIDs), mapped through gres.conf; -v says what they map to "
              f"(default: all; at most {MAX_GPU_INDEX}).")
@click.option("--only", multiple=True, help="Run only this check id (repeatable).")
@click.option("-v", "--verbose", is_flag=True, help="Show passing and n/a results too.")
@click.option("--timings", is_flag=True, help="Also show what each source and each check cost, in wall-clock ms "
              "(with --json: the report's 'timings'); docs/checks.md lists typical costs.")
@click.option("--publish", "publish_replay", is_flag=True,
              help="Also write a replay to the configured event log and Prometheus textfile (a live run always does).")
@source_options
def check(src: SourceArgs, stage: str, demo: bool, gpu_list: str | None, only: tuple[str, ...], verbose: bool,
          timings: bool, publish_replay: bool) -> None:
    """Run the checks of one stage on this node and report.

    Exit code 0 healthy, 1 unhealthy, 2 usage/config error, 3 gpuhc could not judge.
    `gpuhc check` only reports; `gpuhc healthcheck` is the Slurm entry point that also drains.

    A replay (--demo, --nvml-scenario, --kernel-log FILE, --sysfs-root) is not this node: it is
    named after the recording's host, judged with a fresh temporary state (unless --state-dir),
    and not written to the event log or textfile (unless --publish).
    """
    from gpuhc.output import publish, render_report
    from gpuhc.runner import run_stage

    if demo:
        src = replace(src, nvml_scenario=src.nvml_scenario or demo_scenario_path())
        click.echo(f"demo: judging the bundled demo node ({os.path.basename(src.nvml_scenario)}), not this machine", err=True)
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
                from gpuhc.runtimings import timing_lines

                sys.stdout.write("".join(line + "\n" for line in timing_lines(report.timings)))
        except BrokenPipeError:
            # `gpuhc check | head`: the reader left early. The verdict (exit code, event log,
            # metrics) still stands; click would otherwise turn this into exit 1, "unhealthy".
            _drop_stdout()
        if not replay or publish_replay:
            for problem in publish(report, opts.config):
                click.echo(f"gpuhc: warning: {escape(problem)}", err=True)
    from gpuhc.phases import mark

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
    from gpuhc.gres_conf import GpuMapError
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
        raise click.BadParameter(escape(getattr(e, "reason", str(e))), param_hint="--gpus") from None
    opts.job, opts.gpus = job, job.gpus if job is not None else None
    if verbose and job is not None:
        click.echo(f"--gpus {escape(text)}: mapped through {escape(source)}", err=True)
        for m in job.devices:
            click.echo(f"  {escape(m.describe())}", err=True)


def _record_gres(snap, config, src) -> None:
    """Slurm's view of the GPUs into the recording (a replay is mapped as the node was); a
    recording of a recording keeps the one it had."""
    from gpuhc.gres_conf import GpuMapError
    from gpuhc.sources.gres import record

    if src.nvml_scenario:
        from gpuhc.sources.scenario import load_scenario

        snap.gres = load_scenario(src.nvml_scenario, src.step).gres
        return
    minors = {g.minor for g in snap.nvml.gpus if g.minor is not None} if snap.nvml else set()
    try:
        snap.gres = record(config.section("node").get("gres_conf"), os.environ, minors)
    except GpuMapError as e:
        click.echo(f"gpuhc: warning: gres.conf not recorded: {escape(str(e))}", err=True)


def _check_only(only: tuple[str, ...], stage: str) -> None:
    """A mistyped --only would run nothing and report a healthy node."""
    from gpuhc.checks import checks_for_stage

    known = [c.id for c in checks_for_stage(stage)]
    unknown = [c for c in only if c not in known]
    if unknown:
        raise click.BadParameter(f"no check {', '.join(map(repr, unknown))} in stage {stage} "
                                 f"(known: {', '.join(known)})", param_hint="--only")


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


@click.command(context_settings=CONTEXT)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@click.option("--timeout", type=Seconds(), default=30.0, show_default=True,
              help=f"Seconds to wait for the sources (0.1 to {MAX_WAIT_S:g}).")
@source_options
def snapshot(src: SourceArgs, output: str | None, timeout: float) -> None:
    """Record this node's readings in the scenario format (replay it with --nvml-scenario)."""
    from gpuhc.runner import read_snapshot
    from gpuhc.sources.snapshot_format import dump_snapshot, dump_yaml

    config = load(src)
    snap = read_snapshot(source_spec(src, config), node_name(recorded_host(src)), timeout, src.step)
    _record_gres(snap, config, src)
    if src.json_mode:
        import json

        text = json.dumps(dump_snapshot(snap), indent=2, default=str) + "\n"
    else:
        text = dump_yaml(snap)
    if output:
        write_output(output, text, "snapshot")
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(text)
