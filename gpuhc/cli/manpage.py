"""gpuhc(1), written from the command line's own help: every command and subcommand, its usage,
its help text and its options, as `-h` prints them. install.sh writes it at install time
(``python -m gpuhc.cli.manpage > /usr/local/share/man/man1/gpuhc.1``), so the page is always the
installed release's; a test holds it to the commands.
"""

from __future__ import annotations

import sys

import click


def _roff(text: str) -> str:
    """Text as troff reads it literally: backslashes doubled, a leading dot or quote escaped."""
    out = []
    for line in text.replace("\\", "\\e").splitlines():
        out.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(out)


def _paragraphs(text: str) -> list[str]:
    """A docstring-like help as troff paragraphs (click's no-rewrap marker dropped)."""
    import inspect

    text = inspect.cleandoc(click.unstyle(text or ""))
    out = []
    for para in text.split("\n\n"):
        lines = [line for line in para.splitlines() if line.strip() != "\b"]
        if lines:
            out += [".PP", _roff(" ".join(line.strip() for line in lines))]
    return out


def _section(path: list[str], cmd: click.Command, ctx: click.Context) -> list[str]:
    name = " ".join(path)
    lines = [f".SS {_roff(name)}"]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    lines += [".PP", f"\\fB{_roff(name)}\\fR {_roff(usage)}"]
    lines += _paragraphs(cmd.help or "")
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        opts, help_text = record
        lines += [".TP", "\\fB" + _roff(opts).replace("-", "\\-") + "\\fR", _roff(help_text or "")]
    return lines


def _walk(path: list[str], cmd: click.Command, parent: click.Context) -> list[str]:
    ctx = click.Context(cmd, info_name=path[-1], parent=parent, **(cmd.context_settings or {}))
    out = _section(path, cmd, ctx)
    if isinstance(cmd, click.Group):
        for sub in cmd.list_commands(ctx):
            child = cmd.get_command(ctx, sub)
            if child is not None and not child.hidden:
                out += _walk([*path, sub], child, ctx)
    return out


def page() -> str:
    from gpuhc import __version__
    from gpuhc.cli import cli

    ctx = click.Context(cli, info_name="gpuhc", **(cli.context_settings or {}))
    head = [
        f'.TH GPUHC 1 "" "gpuhc {__version__}" "gpuhc manual"',
        ".SH NAME",
        "gpuhc \\- GPU node health checks for Slurm clusters",
        ".SH SYNOPSIS",
        "\\fBgpuhc\\fR [\\fB\\-h\\fR] [\\fB\\-\\-version\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        *_paragraphs(cli.help or ""),
        ".SH COMMANDS",
        "Written from each command's own \\fB\\-h\\fR.",
    ]
    tail = [".SH FILES", ".TP", "/etc/gpuhc/gpuhc.yaml", "the configuration (\\fBgpuhc config validate\\fR)",
            ".TP", "/var/lib/gpuhc", "the node's state, post-mortem and retire bundles",
            ".TP", "/usr/local/share/gpuhc/slurm", "the Slurm shims (HealthCheckProgram, Prolog, Epilog)",
            ".SH SEE ALSO", "\\fBslurm.conf\\fR(5), \\fBscontrol\\fR(1), \\fBsinfo\\fR(1)"]
    body = [line for sub in cli.list_commands(ctx) for line in _walk(["gpuhc", sub], cli.get_command(ctx, sub), ctx)]
    return "\n".join([*head, *body, *tail]) + "\n"


if __name__ == "__main__":
    sys.stdout.write(page())
