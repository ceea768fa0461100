"""Errors gpuhc raises on purpose, and the one place that turns them into exit codes.

Bad input (a broken config, an unreadable scenario, a Slurm that does not answer) must give a
clear one-line message naming what and where, never a traceback. Anything else that escapes is
a bug in gpuhc: it is reported as an internal error with exit code 3, which the Slurm entry
points treat as "do not touch the node".
"""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_BREAKER = 4


class GpuhcError(Exception):
    """A problem with input or environment that the user can fix; message says what and where."""

    exit_code = EXIT_USAGE


class ConfigError(GpuhcError):
    def __init__(self, message: str, file: str | None = None, line: int | None = None, key: str | None = None):
        self.file, self.line, self.key = file, line, key
        self.message = message  # the words alone, without file, line and key (config validate --json)
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        keypart = f"{key}: " if key else ""
        from gpuhc.text.logtext import escape  # keys and values quote the file: one printable line

        super().__init__(escape(f"{where}{keypart}{message}"))


class ConfigErrors(ConfigError):
    """Every error found in one file; the message is one line per error, in file order."""

    def __init__(self, errors: list[ConfigError]):
        self.errors = list(errors)
        first = self.errors[0]
        self.file, self.line, self.key = first.file, first.line, first.key
        GpuhcError.__init__(self, "\n".join(map(str, self.errors)))


class SourceError(GpuhcError):
    """A recording (scenario, kernel log file, sysfs tree) that cannot be read."""


class SlurmError(GpuhcError):
    """scontrol/sinfo/sbatch failed or timed out."""

    exit_code = EXIT_INTERNAL


class SlurmUnreachable(SlurmError):
    """Slurm did not answer at all (timeout, command missing): retrying another way won't help."""


class ObserveNotSent(SlurmError):
    """A call that would change Slurm, not sent because ``slurm.mode`` is observe
    (gpuhc/slurm/act/command.py, the one gate)."""


def run_cli(cli) -> None:
    """Run the click group; map our errors to messages and exit codes."""
    import click

    try:
        rc = cli.main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit as e:
        # click ends a command whose stdout was closed (`gpuhc explain xid | head`) with exit 1,
        # which here reads "unhealthy"; it marks that case by wrapping stdout. Treat it as the
        # BrokenPipeError below.
        from click.utils import PacifyFlushWrapper

        if e.code == 1 and isinstance(sys.stdout, PacifyFlushWrapper):
            sys.exit(0)
        raise
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_USAGE)
    except Exception as e:
        sys.exit(_failed(e))
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


def run_plain(body) -> None:
    """Run a command's body without click (gpuhc/cli/fast.py): the same messages and exit codes
    as :func:`run_cli`; a usage error the body raises in click's words (click is imported on
    that path only) is shown as click shows it."""
    try:
        body()
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        if type(e).__module__.startswith("click"):
            import click

            if isinstance(e, click.ClickException):
                e.show()
                sys.exit(EXIT_USAGE)
        sys.exit(_failed(e))
    sys.exit(0)


def _failed(e: Exception) -> int:
    """Say what went wrong (one printable line each: messages quote paths and text others wrote,
    gpuhc.text.logtext) and return the exit code."""
    from gpuhc.text.logtext import escape

    if isinstance(e, BrokenPipeError):
        return 0
    if isinstance(e, GpuhcError):
        for one in getattr(e, "errors", None) or [e]:
            say(f"gpuhc: error: {escape(one)}")
        return e.exit_code
    # a bug: say so plainly, keep the traceback for the bug report
    say(f"gpuhc: internal error: {type(e).__name__}: {escape(e, 2000)}")
    if _debug():
        import traceback

        traceback.print_exception(e)
    else:
        say("gpuhc: set GPUHC_DEBUG=1 for the traceback")
    return EXIT_INTERNAL


def say(line: str) -> None:
    """One line for the person on stderr, without click (the click-free commands share it); a
    closed stderr is no error."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _debug() -> bool:
    import os

    return os.environ.get("GPUHC_DEBUG", "") not in ("", "0")
