"""The site's other health check, run after gpuhc's in Slurm's one ``HealthCheckProgram`` slot.

slurm.conf takes one health-check program, and most sites already run one (LBNL NHC). With
``slurm.chain`` (an argv list, e.g. ``["/usr/sbin/nhc"]``) ``gpuhc healthcheck`` runs it once
its own run is over: verdict, drain or resume, event log and hooks done. Why it is this way
(docs/slurm.md, "Sharing the slot with NHC"):

- **gpuhc's verdict first, never lost.** The chained program starts after gpuhc has acted and
  written its records, so a program that is slow, missing or failing changes nothing gpuhc
  decided; only the exit status is combined (:func:`combine`), in gpuhc's own codes.
- **Inside Slurm's 60 s.** It gets what is left of the health check's deadline, less a moment
  to stop it: then its whole process group (and everything else still in its session, such
  as NHC's watchdog, which makes a group of its own) gets SIGTERM, a grace of
  :data:`GRACE_S`, then SIGKILL. SIGTERM first because that is how NHC's own watchdog stops it:
  NHC then says "Terminated by signal SIGTERM" and marks the node with its own reason, as it
  does at its own timeout.
- **The one rule for programs root runs** (:func:`gpuhc.files.fsutil.check_trusted_program`): an
  absolute path (the shim's PATH is not the admin's), root's file in root's directories all
  the way up, run by its real path resolved once; argv as given, no shell, stdin /dev/null,
  working directory ``/``.
- **Its output is a file, not a pipe**, so a program that prints without end costs disk in the
  temporary directory, never gpuhc's memory or a blocked pipe; the last :data:`OUTPUT_TAIL`
  bytes are logged as one escaped line.
- **No loop.** The program runs with ``GPUHC_CHAINED=1``; a ``gpuhc healthcheck`` started that
  way does not run a chain of its own (a chain that names gpuhc would otherwise start one run
  inside another until the deadline).

Reasons stay apart by prefix: gpuhc never overwrites nor resumes a reason that does not start
with ``gpuhc:`` (gpuhc/slurm/policy/reason.py, ``owned``), and NHC's helpers do the same for
``NHC:`` (they re-send another tool's reason rather than replace it, and resume only their own).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpuhc.errors import EXIT_INTERNAL, EXIT_UNHEALTHY, EXIT_USAGE

CHAIN_ENV = "GPUHC_CHAINED"
OUTPUT_TAIL = 2000  # bytes of the program's output kept for the log
GRACE_S = 1.0  # SIGTERM, then this long, then SIGKILL
REAP_S = 1.0  # after SIGKILL: how long to wait for the leader (a process in D state may never go)
MIN_START_S = 1.0  # less than this left before the cut: not started at all

# How a program that did not run to its end is logged, in a shell's numbers (timeout(1) and the
# shell's own "cannot execute" and "not found"); the health check's exit status is :func:`combine`'s.
STATUS_CUT = 124  # cut at the deadline (timeout(1)'s status)
STATUS_REFUSED = 126  # found, but not run: refused by the trust rule, or not executable
STATUS_MISSING = 127  # not there

Logger = Callable[..., None]


@dataclass(frozen=True)
class ChainResult:
    """How the chained program ended: ``status`` as a shell would report it (its exit code,
    128+N for signal N, or one of the STATUS_* above), ``why`` in words, its output's tail."""

    argv: tuple[str, ...]
    status: int
    why: str
    took_s: float = 0.0
    tail: str = ""
    exited: bool = False  # it ran to its end and exited by itself (status: its exit code)

    @property
    def ok(self) -> bool:
        return self.exited and self.status == 0

    def to_dict(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "status": self.status, "why": self.why, "took_s": round(self.took_s, 3),
                "tail": self.tail, "exited": self.exited}


class ChainConfigError(ValueError):
    """``slurm.chain`` cannot be run as written (not an argv whose first item is absolute)."""


def argv_of(section: Mapping[str, Any]) -> tuple[str, ...]:
    """The configured argv (empty: no chain). The schema checked it is a list of strings."""
    argv = tuple(section.get("chain") or ())
    if not argv:
        return ()
    if not all(isinstance(a, str) and a for a in argv):
        raise ChainConfigError(f"slurm.chain: every item must be a non-empty string, got {list(argv)!r}")
    if not os.path.isabs(argv[0]):
        raise ChainConfigError(f"slurm.chain: {argv[0]!r} is not an absolute path (the health check's PATH is "
                               "slurmd's, not yours)")
    return argv


def combine(own: int, chained: ChainResult | None) -> int:
    """The health check's exit status, always one of gpuhc's own (0-4: the shims and the
    shipped alerts read any other status as gpuhc dying, slurm/shim.sh). gpuhc's own status when
    it is not 0 (its codes mean something to an admin: 1 unhealthy, 2 config, 3 could not judge,
    4 breaker open); else the chained program's verdict in those words: 0 healthy, 1 when it
    exited non-zero (NHC's word for a failed check), 2 when ``slurm.chain`` is wrong, 3 when it
    gave no verdict (cut at the deadline, killed by a signal, missing, refused). Its own status
    is in the decision log line."""
    if own != 0 or chained is None or chained.ok:
        return own
    if not chained.argv:  # slurm.chain itself could not be read as an argv
        return EXIT_USAGE
    if chained.exited:
        return EXIT_UNHEALTHY
    return EXIT_INTERNAL


def run(argv: tuple[str, ...], cut: float, env: Mapping[str, str]) -> ChainResult:
    """Run ``argv`` until ``cut`` (a ``time.monotonic()`` value). Never raises for what the
    program does; the result says how it ended."""
    from gpuhc.files.fsutil import UnsafePath, check_trusted_program

    started = time.monotonic()
    left = cut - started
    if left < MIN_START_S:
        return ChainResult(argv, STATUS_CUT, f"not started: {max(0.0, left):.1f}s left before the deadline")
    if not os.path.lexists(argv[0]):
        return ChainResult(argv, STATUS_MISSING, f"{argv[0]}: not found")
    try:
        real = check_trusted_program(argv[0], "slurm.chain program")
    except UnsafePath as e:
        return ChainResult(argv, STATUS_REFUSED, str(e))
    if not os.access(real, os.X_OK):
        return ChainResult(argv, STATUS_REFUSED, f"{argv[0]}: not executable")
    return _wait(argv, real, cut, dict(env, **{CHAIN_ENV: "1"}), started)


def _wait(argv: tuple[str, ...], real: str, cut: float, env: dict[str, str], started: float) -> ChainResult:
    import subprocess
    import tempfile

    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen(list(argv), executable=real, stdin=subprocess.DEVNULL, stdout=output,
                                    stderr=subprocess.STDOUT, env=env, cwd="/", close_fds=True,
                                    start_new_session=True)
        except OSError as e:
            return ChainResult(argv, STATUS_REFUSED, f"{argv[0]}: did not start: {e.strerror or e}")
        try:
            rc = proc.wait(timeout=max(0.0, cut - time.monotonic()))
            cut_off = False
        except subprocess.TimeoutExpired:
            rc, cut_off = _stop(proc), True
        took = time.monotonic() - started
        tail = _tail(output)
    if cut_off:
        ended = "" if rc is not None else "; it did not die (D state?), left behind"
        return ChainResult(argv, STATUS_CUT, f"cut at the deadline after {took:.1f}s{ended}", took, tail)
    if rc < 0:
        return ChainResult(argv, 128 - rc, f"killed by signal {-rc}", took, tail)
    return ChainResult(argv, rc, f"exited {rc}", took, tail, exited=True)


def _stop(proc) -> int | None:
    """SIGTERM to the program's group and session, up to :data:`GRACE_S` for it to end, then
    SIGKILL to whatever is left of it; its status, None when it would not die."""
    import subprocess

    _signal_session(proc.pid, signal.SIGTERM)
    try:
        rc = proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        rc = None
    _signal_session(proc.pid, signal.SIGKILL)  # the leader, or what it started and left running
    until = time.monotonic() + REAP_S
    if rc is None:
        try:
            rc = proc.wait(timeout=REAP_S)
        except subprocess.TimeoutExpired:
            return None
    while _session_members(proc.pid) and time.monotonic() < until:  # a KILL lands when the target runs next
        time.sleep(0.01)
    return rc


def _signal_session(sid: int, sig: int) -> None:
    """``sig`` to the process group ``sid`` leads and to every other process of its session
    (a group made inside it with ``set -m``, as NHC's watchdog is)."""
    try:
        os.killpg(sid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _session_members(sid):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _session_members(sid: int) -> list[int]:
    """Processes whose session is ``sid`` (/proc/<pid>/stat's sixth field), the leader aside."""
    members = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return members
    for name in names:
        if not name.isdigit() or int(name) == sid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read(4096)
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold anything
        if len(fields) > 3 and fields[3] == str(sid).encode() and fields[0] != b"Z":  # a zombie is dead already
            members.append(int(name))
    return members


def _tail(f) -> str:
    """The end of the program's output as one printable line (its text, not gpuhc's)."""
    from gpuhc.text.logtext import escape

    try:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - OUTPUT_TAIL))
        return escape(" ".join(f.read().decode("utf-8", "replace").split()))
    except OSError:
        return ""


# ---------------------------------------------------------------------------- the health check's part


def after_healthcheck(flow: Any, out: Any, own: int) -> int:
    """Run ``slurm.chain`` after gpuhc's health check (``own``: its exit status, already final),
    log how it ended, and return the combined status. Never raises."""
    try:
        argv = argv_of(flow.slurm)
    except ChainConfigError as e:
        flow.log(f"{e}: the chained health check was not run", loud=True)
        return combine(own, ChainResult((), EXIT_USAGE, str(e)))
    except Exception as e:  # a config gpuhc cannot read here is no reason to change its verdict
        flow.log(f"slurm.chain not read ({type(e).__name__}: {e}): the chained health check was not run", loud=True)
        return own
    if not argv:
        return own
    if flow.env.get(CHAIN_ENV):
        flow.log(f"slurm.chain: this health check was started by a chain ({CHAIN_ENV} is set): not starting "
                 f"{argv[0]} again", loud=True)
        return own
    try:
        result = run(argv, flow.deadline.less(GRACE_S + REAP_S).at, flow.env)
    except Exception as e:  # gpuhc broke around the program: said, and gpuhc's own status stands
        flow.log(f"chained {argv[0]}: internal error: {type(e).__name__}: {e}", loud=True)
        return own
    if out is not None:
        out.extra["chain"] = result.to_dict()
    tail = f": {result.tail}" if result.tail else ""
    flow.log(f"chained {argv[0]}: {result.why} (status {result.status}){tail}", loud=not result.ok)
    code = combine(own, result)
    if code != own:
        flow.log(f"exit {code}: gpuhc's own status was {own}, the chained program's {result.status}")
    return code
