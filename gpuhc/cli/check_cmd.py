"""`gpuhc check` (judge this node, or a recording of one) and `gpuhc snapshot` (record it)."""

from __future__ import annotations

import os
import sys

import click

from gpuhc.checks.base import STAGES
from gpuhc.cli.common import (
    demo_scenario_path,
    node_name,
    parse_gpu_list,
    passthrough,
    run_options_from,
    source_options,
)


@click.command()
@click.option("--stage", type=click.Choice(STAGES), default="passive", show_default=True, help="Which checks to run.")
@click.option("--demo", is_flag=True, help="Judge the bundled demo node (8x H100) instead of this machine.")
@click.option("--gpus", "gpu_list", help="Only these GPU indices, e.g. 0,1 or 0-3 (default: all).")
@click.option("--only", multiple=True, help="Run only this check id (repeatable).")
@click.option("-v", "--verbose", is_flag=True, help="Show passing and n/a results too.")
@source_options
@passthrough
def check(kw: dict) -> None:
    """Run the checks of one stage on this node and report.

    Exit code 0 healthy, 1 unhealthy, 2 usage/config error, 3 gpuhc could not judge.
    `gpuhc check` only reports; `gpuhc healthcheck` is the Slurm entry point that also drains.
    """
    from gpuhc.output import publish, render_report
    from gpuhc.runner import run_stage

    demo_dir = None
    if kw["demo"]:
        kw["nvml_scenario"] = kw.get("nvml_scenario") or demo_scenario_path()
        if not kw.get("state_dir"):
            import tempfile

            demo_dir = tempfile.TemporaryDirectory(prefix="gpuhc-demo-")
            kw["state_dir"] = demo_dir.name
        click.echo(f"demo: judging the bundled demo node ({os.path.basename(kw['nvml_scenario'])}), not this machine", err=True)
    opts = run_options_from(kw, kw["stage"], gpus=parse_gpu_list(kw.get("gpu_list")))
    opts.only = tuple(kw.get("only") or ())
    if opts.only:
        _check_only(opts.only, kw["stage"])
    # Active checks say what runs: a spinner on a terminal, plain lines on stderr otherwise
    # (stdout stays clean for --json).
    opts.progress = True
    report = run_stage(opts)
    try:
        render_report(report, json_mode=kw["json_mode"], verbose=kw["verbose"])
    except BrokenPipeError:
        # `gpuhc check | head`: the reader left early. The verdict (exit code, event log,
        # metrics) still stands; click would otherwise turn this into exit 1, "unhealthy".
        _drop_stdout()
    for problem in publish(report, opts.config):
        click.echo(f"gpuhc: warning: {problem}", err=True)
    from gpuhc.phases import mark

    mark("written")
    if demo_dir is not None:
        demo_dir.cleanup()
    finish(report.exit_code, hard=bool(report.timed_out))


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


@click.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for the sources.")
@source_options
@passthrough
def snapshot(kw: dict) -> None:
    """Record this node's readings in the scenario format (replay it with --nvml-scenario)."""
    from gpuhc.cli.common import load, source_spec
    from gpuhc.runner import read_snapshot
    from gpuhc.sources.snapshot_io import dump_snapshot, dump_yaml

    config = load(kw)
    snap = read_snapshot(source_spec(kw, config), node_name(kw.get("hostname")), kw["timeout"], kw.get("step"))
    if kw["json_mode"]:
        import json

        text = json.dumps(dump_snapshot(snap), indent=2, default=str) + "\n"
    else:
        text = dump_yaml(snap)
    if kw.get("output"):
        from gpuhc.cli.common import write_output

        write_output(kw["output"], text)
        click.echo(f"wrote {kw['output']}", err=True)
    else:
        sys.stdout.write(text)
