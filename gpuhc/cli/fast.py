"""The runs a node makes every few minutes, without click: `gpuhc healthcheck`, `prolog`,
`epilog` (what Slurm's shims run, usually with no option at all) and `gpuhc check`.

A command line :func:`gpuhc.cli.options.fast_parse` reads (the options declared once in
gpuhc/cli/common.py and gpuhc/cli/check_run.py) goes straight to the command's body under
:func:`gpuhc.errors.run_plain`, which ends the process; any other (help, a typo, a value to
refuse) returns here and click reads it as always (gpuhc/cli/__init__.py ``main``).
"""

from __future__ import annotations

from typing import Sequence

# command -> the stage and flow it runs (None: `gpuhc check`, gpuhc/cli/check_run.py)
FAST = {"check": None, "healthcheck": ("passive", "healthcheck"), "prolog": ("prolog", "prolog"),
        "epilog": ("epilog", "epilog")}


def run_fast(command: str, argv: Sequence[str]) -> None:
    """Run ``command`` with ``argv`` and exit, or return where click must read them."""
    from gpuhc.cli.common import SOURCE_OPTIONS, source_args
    from gpuhc.cli.options import fast_parse
    from gpuhc.errors import run_plain

    if command not in FAST:
        return
    if command == "check":
        from gpuhc.cli.check_run import OPTIONS, run_check

        params = fast_parse((*OPTIONS, *SOURCE_OPTIONS), argv)
        if params is None:
            return
        src, rest = source_args(params)
        run_plain(lambda: run_check(src, **rest))
    params = fast_parse(SOURCE_OPTIONS, argv)
    if params is None:
        return
    from gpuhc.cli.slurm_run import run

    src, _ = source_args(params)
    stage, flow = FAST[command]
    run_plain(lambda: run(src, stage, flow))
