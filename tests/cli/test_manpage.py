"""gpuhc(1) is written from the command line's own help (gpuhc/cli/manpage.py; issue 50, point 7):
every command and subcommand has its section, every option its entry, and man renders it
without a warning."""

from __future__ import annotations

import os
import subprocess

import click

from gpuhc.cli import cli
from gpuhc.cli.manpage import page


def _commands(group: click.Group, ctx: click.Context, path: str) -> list[tuple[str, click.Command]]:
    out = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        out.append((f"{path} {name}", cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, click.Context(cmd, parent=ctx, info_name=name), f"{path} {name}")
    return out


def test_every_command_and_option_is_in_the_page():
    text = page()
    ctx = click.Context(cli, info_name="gpuhc")
    found = _commands(cli, ctx, "gpuhc")
    assert len(found) > 30
    for name, cmd in found:
        assert f".SS {name}\n" in text, name
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0].replace("-", "\\-") in text, (name, param.opts[0])


def test_man_renders_it_without_a_warning(tmp_path):
    path = tmp_path / "gpuhc.1"
    path.write_text(page())
    cp = subprocess.run(["man", "--warnings", "-l", str(path)], capture_output=True, text=True, timeout=60,
                        env={**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "PAGER": "cat"})
    assert cp.returncode == 0 and cp.stderr == "", cp.stderr
    assert "gpuhc config validate" in cp.stdout
