"""What `gpuhc healthcheck`, `gpuhc prolog` and `gpuhc epilog` do, without click: run by click
(gpuhc/cli/slurm_cmd.py, their help and options) or straight from the plain command line Slurm's
shims give (gpuhc/cli/fast.py), as every node's runs are. Exit codes: gpuhc/cli/slurm_cmd.py.
"""

from __future__ import annotations

import os
import sys

from gpuhc.cli.common import SourceArgs
from gpuhc.errors import say


def run(src: SourceArgs, stage: str, flow_name: str) -> None:
    """Run the Slurm entry point ``flow_name`` (the stage ``stage``) and exit with its code."""
    from gpuhc.errors import EXIT_OK, GpuhcError
    from gpuhc.slurm.flows import entry
    from gpuhc.slurm.flows.frame import Flow, run

    node = src.hostname or os.environ.get("SLURMD_NODENAME") or None
    fail_open = flow_name in ("prolog", "epilog")
    try:
        opts = _options(src, stage, flow_name, node)
    except GpuhcError as e:
        # A bad command line (--now, a replay path): the health check says so (exit 2); a
        # prolog/epilog fails open. (A config that does not load never comes here: _options.)
        from gpuhc.text.logtext import escape

        line = escape(f"gpuhc {flow_name} {node or '?'}: error: {e}")
        say(line)
        _syslog(line)
        _exit(EXIT_OK if fail_open else e.exit_code)
        return
    def render(out) -> None:  # inside the flow's guard (gpuhc.slurm.flows.frame.run)
        if src.json_mode and out.report is not None:
            from gpuhc.export.output import render_report

            render_report(out.report, json_mode=True)

    out, code = run(Flow.for_command(opts, f"gpuhc {flow_name}", stage), getattr(entry, flow_name), fail_open,
                    render)
    _exit(code, hard=out is not None and out.hard_exit)


def _options(src: SourceArgs, stage: str, flow_name: str, node: str | None):
    """The run's options. A config that does not load is not the node's fault and must not turn
    checking off: the run goes on with the last good config or the defaults, and says so in
    syslog here, then in its report, event log and metrics (gpuhc/state/config_guard.py)."""
    from gpuhc.cli.common import node_name, run_options_from
    from gpuhc.state.config_guard import fallback_options, remember
    from gpuhc.errors import ConfigError
    from gpuhc.text.logtext import escape

    try:
        opts = run_options_from(src, stage)
    except ConfigError as e:
        opts = fallback_options(src, node_name(src.hostname), e,
                                lambda s, config: run_options_from(s, stage, config=config))
        line = escape(f"gpuhc {flow_name} {node or '?'}: error: {opts.config_problem.sentence()}")
        say(line)
        _syslog(line)
        return opts
    why = remember(opts.config, opts.state_dir)
    if why:
        _syslog(escape(f"gpuhc {flow_name} {node or '?'}: {why}"))
    return opts


def _syslog(line: str) -> None:
    try:
        import syslog

        syslog.openlog("gpuhc", 0, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, line)
    except Exception:
        pass


def _exit(code: int, hard: bool = False) -> None:
    # After a source timed out a reader thread may be stuck in C code; do not wait for it.
    sys.stdout.flush()
    sys.stderr.flush()
    if hard:
        os._exit(code)
    sys.exit(code)
