"""The one wrapper through which gpuhc runs a Slurm client command (scontrol, sinfo, squeue, sbatch,
sacct, sacctmgr): the flows, the sweep, the fleet commands and drain-report alike.

Every call is an argv list (never a shell), has its own timeout, and that timeout is further cut
to what is left of the caller's deadline: slurmd kills the health check at 60 s, and a slurmctld
that does not answer must cost a clear log line, not the whole run. Every failure is mapped the
same way, naming the command (never the reason text, which may carry evidence):

- no answer within the timeout, or the program missing: :class:`~gpuhc.errors.SlurmUnreachable`;
- any other OS error, or a non-zero exit: :class:`~gpuhc.errors.SlurmError` with Slurm's message.

Which program runs is the site's choice: ``slurm.<program>`` names it (a name looked up on PATH,
or a full path; docs/slurm.md, "Slurm's programs"). Callers write the bare program name first in
their argv, and :meth:`SlurmCommand.call` puts the configured path in its place, so no caller can
forget the setting and the argv a test or a dry run shows stays readable.

**Observe mode** (``slurm.mode: observe``, docs/repair.md "Observe mode") is enforced here, once,
for every caller: a command object built from the config carries ``observe``, and :meth:`call`
refuses every argv that :func:`changes` calls a change (a drain, a resume, a reboot, an
AdminComment, a requeue, a release, a ledger stamp, an ``sbatch``, a ``scancel``) with
:class:`~gpuhc.errors.ObserveNotSent`, a SlurmError its callers already handle, and says once what
was not sent. The rule is a list of what reads, so a new verb is a change until it is listed
(docs/security.md, "Observe mode"). Callers that know better say "would ..." themselves first.

The runner is injectable (``run=``, ``run_stdin=``) so that unit tests see exactly which argv
would be sent, and so that the prolog's happy path can be proven to send nothing.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from gpuhc.errors import ObserveNotSent, SlurmError, SlurmUnreachable
from gpuhc.model.deadline import Deadline
from gpuhc.text.logtext import escape

# (argv, timeout_s) -> (returncode, stdout, stderr); raises subprocess.TimeoutExpired / OSError
Runner = Callable[[list[str], float], tuple[int, str, str]]
StdinRunner = Callable[[list[str], float, str], tuple[int, str, str]]

# The Slurm client programs gpuhc runs, each configurable as ``slurm.<name>`` (the config keys of
# the same names in gpuhc/slurm/settings.py).
PROGRAMS = ("scontrol", "sinfo", "squeue", "sbatch", "sacct", "sacctmgr")

# What only reads, per program: the first argument that is not an option names the verb. A
# program or verb not listed here changes something (default deny): a new feature that sends a
# new verb is refused in observe mode until someone lists it as a reader.
READERS: dict[str, frozenset[str] | None] = {
    "scontrol": frozenset({"show", "ping", "version", "listpids", "-V", "--version"}),
    "sacctmgr": frozenset({"show", "list", "-V", "--version"}),
    "sinfo": None, "squeue": None, "sacct": None, "sdiag": None, "sprio": None, "sshare": None,  # None: every call reads
}


def changes(argv: list[str]) -> bool:
    """Does this Slurm client argv change anything in Slurm? True unless it is a known reader."""
    if not argv:
        return True
    prog = os.path.basename(argv[0])
    if prog not in READERS:
        return True
    verbs = READERS[prog]
    if verbs is None:
        return False
    first = next((a for a in argv[1:] if not a.startswith("-")), None)
    if first is None:  # options alone: only a version query reads
        return not any(a in verbs for a in argv[1:])
    return first.lower() not in verbs


# Keep a little time after a timed-out call to log and exit before the caller's hard deadline.
MARGIN_S = 0.5


# Slurm prints reasons, comments and job names byte for byte as someone typed them: an admin's
# Latin-1 "\xfc" is not UTF-8, and a strict decode would turn one odd reason anywhere in the
# partition into a crash of every health check there (docs/security.md, "Slurm output"). So
# every answer is decoded as UTF-8 whatever the locale, a bad byte becoming U+FFFD.
ENCODING = "utf-8"
ERRORS = "replace"


def decode(data: bytes | str | None) -> str:
    """Bytes a Slurm command printed, as text: never a UnicodeDecodeError."""
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(ENCODING, ERRORS)


def subprocess_runner(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    p = subprocess.run(_trusted(argv), capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
    return p.returncode, decode(p.stdout), decode(p.stderr)


def stdin_runner(argv: list[str], timeout_s: float, stdin: str) -> tuple[int, str, str]:
    p = subprocess.run(_trusted(argv), input=stdin.encode(ENCODING, ERRORS), capture_output=True,
                       timeout=timeout_s, check=False)
    return p.returncode, decode(p.stdout), decode(p.stderr)


def _trusted(argv: list[str]) -> list[str]:
    """The argv with its program as root may run it: found once (PATH or the configured path),
    under the program rule, its real path (gpuhc/files/fsutil.py, docs/security.md "Acting safely").
    A program that must not run is an OSError naming why; one not found stays as written."""
    from gpuhc.files.fsutil import UnsafePath, trusted_which

    try:
        real = trusted_which(argv[0], os.path.basename(argv[0]))
    except UnsafePath as e:
        raise OSError(errno.EPERM, str(e)) from None
    return [real or argv[0], *argv[1:]]


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def describe(argv: list[str]) -> str:
    """The command as errors name it: program name and arguments, a reason's text left out."""
    prog = os.path.basename(argv[0]) if argv else "?"
    args = ["reason=..." if a.lower().startswith("reason=") else a for a in argv[1:]]
    return " ".join([prog, *args])[:200]


@dataclass
class SlurmCommand:
    timeout_s: float = 10.0
    # The run's deadline (gpuhc/model/deadline.py), shared with every other act and probe of the
    # run: no call runs past it.
    deadline: Deadline | None = None
    run: Runner = subprocess_runner
    run_stdin: StdinRunner = stdin_runner
    calls: list[list[str]] = field(default_factory=list)  # every argv sent, for logs and tests
    # Where a reader says what it skipped (an unreadable node record): the flow's log when it
    # passes one, else stderr. Every line is escaped: it quotes what Slurm printed.
    warn: Callable[[str], None] | None = None
    warned: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)  # program name -> the configured path to run
    observe: bool = False  # slurm.mode: observe: no call that changes Slurm is sent (see changes())
    # The longest any call of this run took (a time-out counts its whole wait, a program not found
    # next to nothing): how slow slurmctld
    # answers now, which the actuator's time to verify a drain scales with.
    slowest_s: float = 0.0

    @classmethod
    def from_section(cls, section: dict, **overrides):
        """A command object as the ``slurm`` config section says: the configured programs and
        ``timeout_s``; ``overrides`` (a deadline, a warn sink, another timeout) win."""
        kwargs: dict = {"paths": {p: str(section[p]) for p in PROGRAMS if section.get(p)},
                        "observe": section.get("mode") == "observe"}
        if section.get("timeout_s") is not None:
            kwargs["timeout_s"] = float(section["timeout_s"])
        kwargs.update(overrides)
        return cls(**kwargs)

    def note(self, text: str) -> None:
        """Say ``text`` once per command object (a record skipped by two reads is one line)."""
        line = escape(text)
        if line in self.warned:
            return
        self.warned.append(line)
        if self.warn is not None:
            self.warn(line)
        else:
            import sys

            print(f"gpuhc: warning: {line}", file=sys.stderr, flush=True)

    def remaining(self) -> float:
        return float("inf") if self.deadline is None else self.deadline.left()

    def call(self, argv: list[str], stdin: str | None = None) -> str:
        """Run one Slurm command; its stdout, or a SlurmError that names it. A bare program name
        first in ``argv`` runs the configured path of that program."""
        if self.observe and changes(argv):  # judged on the name the caller wrote, before the path
            cmd = describe(argv)
            self.note(f"observe mode (slurm.mode: observe): not sent: {cmd}")
            raise ObserveNotSent(f"observe mode: not sent: {cmd}")
        if argv and argv[0] in self.paths:
            argv = [self.paths[argv[0]], *argv[1:]]
        cmd = describe(argv)
        prog = cmd.split(" ", 1)[0]
        timeout = self.timeout_s if self.deadline is None else self.deadline.cap(self.timeout_s, keep=MARGIN_S)
        if timeout <= 0.1:
            raise SlurmError(f"{cmd}: not sent, no time left before the deadline")
        self.calls.append(list(argv))
        started = time.monotonic()
        try:
            if stdin is None:
                rc, out, err = self.run(argv, timeout)
            else:
                rc, out, err = self.run_stdin(argv, timeout, stdin)
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"{cmd}: no answer within {timeout:.1f}s (slurmctld down or busy?)") from None
        except FileNotFoundError:
            key = prog if prog in PROGRAMS else "<program>"
            raise SlurmUnreachable(f"{prog} not found: {argv[0]!r} (put Slurm's client on PATH, or name it in "
                                   f"slurm.{key})") from None
        except OSError as e:
            raise SlurmError(f"{cmd}: cannot run {argv[0]}: {e.strerror or e}") from None
        finally:
            self.slowest_s = max(self.slowest_s, time.monotonic() - started)
        if rc != 0:
            raise SlurmError(f"{cmd} failed (exit {rc}): {one_line(err or out) or 'no message'}")
        return out
