"""`-h` is the help in every gpuhc command and subcommand (docs/slurm.md, "gpuhc drain-report"),
and no option takes `-h` for itself: `gpuhc jobs -h` once meant --noheader and asked Slurm."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from gpuhc.cli import COMMANDS, cli


def every_command():
    ctx = click.Context(cli)
    out = []

    def walk(path, cmd):
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                walk(path + [name], cmd.get_command(ctx, name))

    for name in COMMANDS:
        walk([name], cli.get_command(ctx, name))
    return out


@pytest.mark.parametrize("path", [p for p, _ in every_command()], ids=" ".join)
def test_dash_h_is_the_help(path):
    res = CliRunner().invoke(cli, [*path, "-h"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: cli {' '.join(path)}") or res.output.startswith("Usage: "), res.output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_dash_h_is_the_help_of_each_command_run_on_its_own(name):
    """A command first run without ``cli`` above it (a test, a script that embeds gpuhc) keeps
    its help option from that first use (click caches it): each says ``-h`` itself."""
    import importlib

    module, attr = COMMANDS[name].split(":")
    cmd = getattr(importlib.import_module(module), attr)
    res = CliRunner().invoke(cmd, ["-h"])
    assert res.exit_code == 0 and res.output.startswith("Usage: "), res.output


def test_no_option_claims_dash_h():
    for path, cmd in every_command():
        for p in cmd.params:
            if isinstance(p, click.Option) and "-h" in p.opts:
                pytest.fail(f"gpuhc {' '.join(path)}: {p.name} takes -h")
