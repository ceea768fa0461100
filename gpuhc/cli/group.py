"""The click group of `gpuhc` (every command, its help, its errors in click's words), imported
only for a command line the fast path (gpuhc/cli/fast.py) leaves to click."""

from __future__ import annotations

import importlib

import click

from gpuhc.cli import COMMANDS, CONTEXT, version_text


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, help="Show the version and build, then exit.",
              callback=lambda ctx, _p, v: v and (click.echo(version_text()), ctx.exit()))
def cli() -> None:
    """GPU node health checks for Slurm clusters.

    Exit codes: 0 healthy, 1 unhealthy, 2 usage or config error, 3 gpuhc could not judge
    (a source timed out, or gpuhc itself broke: never a reason to drain), 4 circuit breaker
    open (a drain was withheld).
    """

