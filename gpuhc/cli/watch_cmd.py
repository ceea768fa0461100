"""``gpuhc watch``: the node watcher, the jobs check every few seconds (gpuhc/slurm/jobs/watch.py).

Run by ``examples/systemd/gpuhc-watch.service`` (installed, not enabled). Takes the same
replay options as ``gpuhc check``, so a test or an admin can run it against a scenario: each
round then reads the scenario's next step.
"""

from __future__ import annotations

import os
import sys

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.common import SourceArgs, source_options
from gpuhc.cli.params import Seconds


class _ReplayReader:
    """A scenario's activity, one step a round (or the pinned ``--step``)."""

    def __init__(self, spec, pinned: int | None):
        self.spec, self.pinned, self.step = spec, pinned, 0

    def read(self):
        from gpuhc.model.activity import Activity
        from gpuhc.sources import build_sources

        sources = build_sources(self.spec, self.pinned if self.pinned is not None else self.step)
        self.step += 1
        return sources.activity.read() if sources.activity is not None else Activity(available=False, error="no activity")


@click.command("watch", context_settings=CONTEXT)
@source_options
@click.option("--interval", type=Seconds(1.0, 600.0), default=12.0, show_default=True,
              help="Seconds between rounds (10-15 s names a hang within 30 s).")
@click.option("--rounds", type=click.IntRange(min=1), help="Stop after this many rounds (default: run until stopped).")
def watch(src: SourceArgs, interval: float, rounds: int | None) -> None:
    """Watch the GPUs that hold a job: name a hang's culprit or a straggler within seconds.

    Records what it finds as the health check does (state, AdminComment, hooks); never drains.
    Exit 2 for a bad config; otherwise runs until stopped (or --rounds).
    """
    from gpuhc.cli.common import run_options_from
    from gpuhc.errors import GpuhcError
    from gpuhc.text.logtext import escape
    from gpuhc.slurm.flows.frame import Flow
    from gpuhc.slurm.jobs.watch import Watcher, live_reader

    try:
        opts = run_options_from(src, "passive")
    except GpuhcError as e:
        click.echo(escape(f"gpuhc watch: error: {e}"), err=True)
        sys.exit(e.exit_code)
    flow = Flow.for_command(opts, "gpuhc watch", "passive")
    replayed = src.nvml_scenario or opts.sources.nvml_scenario or opts.sources.test_scenario
    if replayed:
        from gpuhc.sources import build_sources

        try:
            build_sources(opts.sources, 0)  # a scenario that does not load is a usage error, said once
        except GpuhcError as e:
            click.echo(escape(f"gpuhc watch: error: {e}"), err=True)
            sys.exit(e.exit_code)
    reader = _ReplayReader(opts.sources, src.step) if replayed else live_reader(opts.config)
    w = Watcher(flow, reader)
    if not w.enabled:
        click.echo("gpuhc watch: the jobs check is disabled in the config (checks.jobs.enabled): nothing to watch", err=True)
        sys.exit(0)
    flow.log(f"watch: every {interval:g} s (pid {os.getpid()})")
    w.run(interval, rounds)
