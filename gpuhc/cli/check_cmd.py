"""`gpuhc check` (judge this node, or a recording of one) and `gpuhc snapshot` (record it).

`check`'s body is gpuhc/cli/check_run.py, which the node's own runs reach without click.
"""

from __future__ import annotations

import os
import sys

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.check_run import OPTIONS, run_check
from gpuhc.cli.common import (
    SourceArgs,
    load,
    node_name,
    recorded_host,
    source_options,
    source_spec,
    write_output,
)
from gpuhc.cli.options import click_options
from gpuhc.cli.params import Seconds
from gpuhc.text.limits import MAX_WAIT_S
from gpuhc.text.logtext import escape


@click.command(context_settings=CONTEXT)
@click_options(OPTIONS)
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
    run_check(src, stage, demo, gpu_list, only, verbose, timings, publish_replay)


def _record_gres(snap, config, src) -> None:
    """Slurm's view of the GPUs into the recording (a replay is mapped as the node was); a
    recording of a recording keeps the one it had."""
    from gpuhc.node.gres_conf import GpuMapError
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


@click.command(context_settings=CONTEXT)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of stdout.")
@click.option("--timeout", type=Seconds(), default=30.0, show_default=True,
              help=f"Seconds to wait for the sources (0.1 to {MAX_WAIT_S:g}).")
@source_options
def snapshot(src: SourceArgs, output: str | None, timeout: float) -> None:
    """Record this node's readings in the scenario format (replay it with --nvml-scenario)."""
    from gpuhc.run.runner import read_snapshot
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
