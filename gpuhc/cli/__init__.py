"""The `gpuhc` command line.

Subcommands are imported only when invoked: `gpuhc healthcheck` runs on every node every few
minutes, and must not pay for importing the sweep planner, rich tables or CuPy. Its plain command
lines (and the prolog's, the epilog's, `gpuhc check`'s) do not import click either
(gpuhc/cli/fast.py); the click group is gpuhc/cli/group.py, ``cli`` here.
"""

from __future__ import annotations

from gpuhc import __version__

# Every command's context: ``-h`` is the help. Said on each command of COMMANDS rather than only
# inherited from ``cli``: click keeps a command's help option from its first use, and a command
# first run on its own (a test, an embedding script) would refuse ``-h`` for the rest of the process.
CONTEXT = {"help_option_names": ["-h", "--help"]}

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
    "jobs": "gpuhc.cli.jobs_cmd:jobs",
    "watch": "gpuhc.cli.watch_cmd:watch",
    "doctor": "gpuhc.cli.doctor_cmd:doctor",
    "canary": "gpuhc.cli.canary_cmd:canary",
}


def version_text() -> str:
    """``gpuhc --version``: the release and the build (the commit it was built from)."""
    from gpuhc import build

    return f"gpuhc {__version__} ({build()})"


def click_group():
    """The click group (gpuhc/cli/group.py)."""
    from gpuhc.cli.group import cli

    return cli


def __getattr__(name: str):
    if name == "cli":  # `from gpuhc.cli import cli`: the group, click imported then
        return click_group()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Commands that run every few minutes or before every job, and leave nothing for the
# interpreter's own shutdown to do: they end with os._exit (see main).
QUICK_EXIT = ("check", "healthcheck", "prolog", "epilog")


def main() -> None:
    import sys

    from gpuhc.run.nvml_early import start
    from gpuhc.run.phases import mark

    mark("cli")
    start(sys.argv[1:])  # the live NVML read runs beside the rest of the start-up (see that module)
    from gpuhc.cli.fast import run_fast
    from gpuhc.errors import run_cli

    if not (sys.argv[1:2] and sys.argv[1] in QUICK_EXIT):
        run_cli(click_group())
        return
    try:
        run_fast(sys.argv[1], sys.argv[2:])  # returns only where click must read the command line
        run_cli(click_group())  # always ends in SystemExit
    except SystemExit as e:
        quick_exit(e.code)
    quick_exit(0)


def quick_exit(code: object) -> None:
    """Leave without the interpreter's teardown (about 10 ms of freeing modules the process is
    done with): flush what was written, record the phase marks, exit with ``code`` as sys.exit
    would. Only for the commands above, whose files are closed (state and metrics are written
    whole and renamed) and which register nothing to run at exit; the sweep's MPI ranks, for
    one, must finalize MPI and never come here."""
    import os
    import sys

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        sys.stderr.write(f"{code}\n")
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a reader that left (`| head`) or a closed stream: nothing more to say
    from gpuhc.run.phases import flush

    flush()
    os._exit(status)
