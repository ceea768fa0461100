"""Hooks: tell the site's own tools when gpuhc drains, resumes, retires, trips the breaker or
takes a remediation step.

A hook is an executable the admin configures (``hooks.commands``: a list of argv lists). gpuhc
starts it with that argv and no shell, gives it the event as one JSON document on stdin (and
its name in ``GPUHC_EVENT``), and waits at most ``hooks.timeout_s``. Then, and why:

- **A hook never changes a verdict.** It runs after the act it reports, every error is caught
  and logged, and :func:`fire` never raises: a pager that is down must not undrain a node or
  turn a health check into "gpuhc broke".
- **A hanging hook is killed at its timeout**, with its whole process group (it runs in a
  session of its own, so a ``curl`` it started dies with it), and the timeout is cut to what is
  left of the caller's deadline: slurmd kills the health check at 60 s.
- **stdin is a file, not a pipe**, so a hook that never reads it cannot block gpuhc on a full
  pipe; its output goes to a file as well and only the tail is logged, so a hook that prints
  gigabytes costs disk in /tmp, never gpuhc's memory.
- **As root, a hook must be root's**: an absolute path to a regular file owned by root and not
  writable by group or others. Otherwise whoever can write it runs code as root on every node.

Events and their payloads are listed in docs/repair.md ("Hooks").
"""

from __future__ import annotations

import os
import stat
import time
from typing import TYPE_CHECKING, Any, Callable

from gpuhc.text.schema import Key

if TYPE_CHECKING:  # subprocess and friends load only when a hook runs: config validation
    import subprocess  # imports this module on every health check for SCHEMA below

    from gpuhc.model.deadline import Deadline

# The events gpuhc fires; ``hooks.events`` picks which of them run the hooks.
EVENTS = ("drain", "resume", "retire", "breaker_trip", "remediation",
          "job_finding", "job_requeue")  # the job checks' (gpuhc/slurm/jobs/act.py)

OUTPUT_TAIL = 2000  # bytes of a hook's output kept for the log line
KILL_GRACE_S = 1.0

Logger = Callable[..., None]

# Config section ``hooks`` (assembled into gpuhc.yaml's schema by gpuhc.config.load).
SCHEMA = {
    "commands": Key(list, [], "hooks to run: a list of argv lists, e.g. [[/usr/local/sbin/gpuhc-notify, --to, ops]]; "
                    "each gets every event as JSON on stdin", item=list),
    "events": Key(list, list(EVENTS), "events that fire the hooks (default: all)", item=str),
    "timeout_s": Key(float, 10.0, "a hook still running after this long is killed (with its process group)",
                     min=0.1, max=300.0),
}


def _stderr_log(text: str, loud: bool = False) -> None:
    import sys

    print(f"gpuhc hook: {text}", file=sys.stderr, flush=True)


def _section(settings: Any) -> dict[str, Any]:
    """The ``hooks`` section from a Config, or the section itself."""
    if hasattr(settings, "section"):
        return settings.section("hooks")
    return dict(settings or {})


def commands(section: dict[str, Any]) -> list[list[str]]:
    """The configured argv lists, each a non-empty list of strings (the schema checked the
    outer list; a bad entry is a ValueError naming it)."""
    out = []
    for i, argv in enumerate(section.get("commands") or []):
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise ValueError(f"hooks.commands[{i}]: must be a non-empty list of strings (an argv), got {argv!r}")
        out.append(list(argv))
    return out


def unsafe(path: str) -> str | None:
    """Why ``path`` must not be run as a hook, or None. Relative paths are refused everywhere
    (the health check's PATH is whatever slurmd gives it); ownership only as root."""
    if not os.path.isabs(path):
        return "not an absolute path"
    try:
        st = os.stat(path)
    except OSError as e:
        return f"cannot stat: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not os.access(path, os.X_OK):
        return "not executable"
    if os.geteuid() == 0:
        # root runs it: the file and every directory above it must be root's alone (one rule
        # for everything root trusts, gpuhc/files/fsutil.py)
        from gpuhc.files.fsutil import UnsafePath, check_trusted_file

        try:
            check_trusted_file(path, "hook")
        except UnsafePath as e:
            return str(e).removeprefix("refusing hook: ")
    return None


def document(event: str, payload: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """What a hook reads on stdin: the event, when, where from, and the caller's payload."""
    import socket

    from gpuhc import __version__

    doc = {"event": event, "time": round(time.time() if now is None else now, 3),
           "host": socket.gethostname(), "gpuhc_version": __version__}
    doc.update(payload)
    return doc


def fire(event: str, payload: dict, settings, log: Logger | None = None, deadline: Deadline | None = None) -> None:
    """Run every configured hook for ``event``. Never raises, never blocks past the timeout
    (nor past the run's ``deadline``, when given)."""
    log = log if log is not None else _stderr_log
    try:
        if event not in EVENTS:
            raise ValueError(f"unknown hook event {event!r} (known: {', '.join(EVENTS)})")
        section = _section(settings)
        argvs = commands(section)
        wanted = section.get("events", EVENTS)
        unknown = sorted(set(wanted) - set(EVENTS))
        if unknown:  # a typo would silently mute the hooks for that event
            log(f"hooks.events: unknown event(s) {', '.join(unknown)} (known: {', '.join(EVENTS)})", loud=True)
        if not argvs or event not in wanted:
            return
        from gpuhc.export.eventlog import encode_line

        data = encode_line(document(event, payload))
        for argv in argvs:
            timeout = float(section.get("timeout_s", 10.0))
            if deadline is not None:
                timeout = deadline.cap(timeout)
            if timeout <= 0:
                log(f"{event}: no time left before the deadline: {argv[0]} not run", loud=True)
                continue
            _run_one(argv, event, data, timeout, log)
    except Exception as e:  # a hook is advice: it never changes what gpuhc decided
        log(f"{event}: hooks not run: {type(e).__name__}: {e}", loud=True)


def _run_one(argv: list[str], event: str, data: bytes, timeout: float, log: Logger) -> None:
    import subprocess
    import tempfile

    why = unsafe(argv[0])
    if why:
        log(f"{event}: refusing hook {argv[0]}: {why}", loud=True)
        return
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as output:
        stdin.write(data)
        stdin.seek(0)
        env = dict(os.environ, GPUHC_EVENT=event)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=output, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True, close_fds=True, cwd="/")
        except OSError as e:
            log(f"{event}: hook {argv[0]} did not start: {e.strerror or e}", loud=True)
            return
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            log(f"{event}: hook {argv[0]} killed after {timeout:g}s (timeout){_tail(output)}", loud=True)
            return
        took = time.monotonic() - started
        if rc != 0:
            log(f"{event}: hook {argv[0]} exited {rc} after {took:.1f}s{_tail(output)}", loud=True)
        else:
            log(f"{event}: hook {argv[0]} ok ({took:.1f}s)")


def _kill(proc: subprocess.Popen) -> None:
    """The hook and everything it started (its own session): TERM, a moment, then KILL."""
    import signal
    import subprocess

    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            if sig == signal.SIGKILL:
                return
        except subprocess.TimeoutExpired:
            continue
    # Anything left of the group after the leader exited gets the KILL too.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(f) -> str:
    """The end of a hook's output as one printable line (it is the hook's text, not ours: a
    newline in it must not forge a log line, an escape sequence must not reach a terminal)."""
    try:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - OUTPUT_TAIL))
        text = " ".join(f.read().decode("utf-8", "replace").split())
    except OSError:
        return ""
    from gpuhc.text.logtext import escape

    return f": {escape(text)}" if text else ""


# ---------------------------------------------------------------------------- from a Slurm flow


def outcome_events(out: Any) -> list[tuple[str, dict[str, Any]]]:
    """The events a finished health check, prolog or epilog produced (a ``slurm.flow.Outcome``):
    a verified drain or resume, and a drain the breaker withheld. Pure."""
    d = getattr(out, "decision", None)
    if d is None:
        return []
    act = getattr(d.act, "value", str(d.act))
    breaker = out.breaker.to_dict() if getattr(out, "breaker", None) is not None else None
    base = {"why": d.why, "reason": d.reason}
    if act == "drain" and out.acted:
        return [("drain", {**base, "breaker": breaker})]
    if act == "resume" and out.acted:
        return [("resume", base)]
    if act == "blocked":
        return [("breaker_trip", {**base, "breaker": breaker})]
    return []


def fire_outcome(out: Any, node: str, stage: str, config, state_dir: str, log: Logger | None = None,
                 deadline: Deadline | None = None) -> None:
    """Fire the hooks for a Slurm flow's outcome. ``breaker_trip`` fires once per node while the
    breaker stays open (remembered in the node's state), not on every run it withholds a drain."""
    try:
        if not commands(_section(config)):
            return  # no hooks: not even the breaker's memory is touched
        events = outcome_events(out)
        breaker = getattr(out, "breaker", None)
        if breaker is not None or events:
            events = [e for e in events if e[0] != "breaker_trip" or _newly_open(state_dir, node, True)]
            if breaker is not None and not breaker.open:
                _newly_open(state_dir, node, False)
        for event, payload in events:
            fire(event, {"node": node, "stage": stage, **payload}, config, log, deadline)
    except Exception as e:
        (log if log is not None else _stderr_log)(f"hooks not run: {type(e).__name__}: {e}", loud=True)


def _newly_open(state_dir: str, node: str, is_open: bool) -> bool:
    """Record whether this node last saw the breaker open; True on the closed->open edge."""
    from gpuhc.state.node import StateStore

    with StateStore(state_dir).transaction() as doc:
        mine = doc.setdefault("hooks", {}).setdefault(node, {})
        was = bool(mine.get("breaker_open"))
        mine["breaker_open"] = is_open
    return is_open and not was

