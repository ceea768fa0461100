"""The `gpuhc` command line.

Subcommands are imported only when invoked: `gpuhc healthcheck` runs on every node every few
minutes, and must not pay for importing the sweep planner, rich tables or CuPy.
"""

from __future__ import annotations

import importlib

import click

from gpuhc import __version__

# command name -> "module:attribute"; each module owns its commands.
COMMANDS = {
    "check": "gpuhc.cli.check_cmd:check",
    "snapshot": "gpuhc.cli.check_cmd:snapshot",
    "explain": "gpuhc.cli.explain_cmd:explain",
    "baseline": "gpuhc.cli.baseline_cmd:baseline",
    "config": "gpuhc.cli.config_cmd:config",
    "healthcheck": "gpuhc.cli.slurm_cmd:healthcheck",
    "prolog": "gpuhc.cli.slurm_cmd:prolog",
    "epilog": "gpuhc.cli.slurm_cmd:epilog",
    "quarantine": "gpuhc.cli.quarantine_cmd:quarantine",
    "drain-report": "gpuhc.cli.report_cmd:drain_report",
    "sweep": "gpuhc.cli.sweep_cmd:sweep",
    "fleet": "gpuhc.cli.fleet_cmd:fleet",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuhc")
def cli() -> None:
    """GPU node health checks for Slurm clusters.

    Exit codes: 0 healthy, 1 unhealthy, 2 usage or config error, 3 internal error
    (gpuhc itself broke: never a reason to drain), 4 circuit breaker open.
    """


def main() -> None:
    from gpuhc.errors import run_cli

    run_cli(cli)
