"""The IMEX daemon's status, from ``nvidia-imex-ctl`` (GB200 NVL72: multi-node NVLink memory export).

What is asked, and why (docs/facts.md "IMEX"):

- ``nvidia-imex-ctl -q`` prints the local daemon's state as one word (READY, INITIALIZING,
  WAITING_FOR_PEERS, ...): NVIDIA's DCGM asks the same (DcgmImexManager).
- Only when the daemon says READY, ``nvidia-imex-ctl -N`` prints the domain: a legend, the node
  table ``Node #<n> - <address> - <STATE>[ - Version: <v>]``, a connectivity matrix and
  ``Domain State: UP|DOWN|DEGRADED``. Its text form is read (not ``-j``): that is what real
  captures in public threads show (tests/data/imex/README.md).

The tool is looked for only in system directories and run only under the one rule for programs
root runs (:func:`gpuhc.files.fsutil.check_trusted_program`): root owns it, every link on the way and
every directory up to ``/`` of the file it resolves to, nobody else can write any of them, and
the real path is run, resolved once (a root-owned link into a user-writable directory, whose
file a user could swap between the check and the exec, is refused, and the refusal is said in
the reading's ``error``). A node without IMEX pays four ``lstat`` calls. Each call is an argv list with a deadline; its output is read up to a bound
and parsed by a strict grammar -- a line that does not match is ignored, never guessed at -- and
every text kept is escaped (gpuhc/text/logtext.py). Nothing here raises: a failure is the reading's
``error``, in words.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time

from gpuhc.text.logtext import escape
from gpuhc.model.host import ImexStatus

# Where the packages install it (NVIDIA's nvidia-imex package: /usr/bin), and the other places
# NVIDIA's DCGM looks. Never PATH: the health check must not run what a PATH entry offers.
SEARCH = ("/usr/bin/nvidia-imex-ctl", "/usr/sbin/nvidia-imex-ctl", "/usr/local/bin/nvidia-imex-ctl",
          "/opt/nvidia/imex/bin/nvidia-imex-ctl")
TIMEOUT_S = 3.0
MAX_OUTPUT = 256 * 1024  # an 18-node table is about 3 KiB; an NVL576 domain would be ~100 KiB
MAX_NODES = 1024
DAEMON_STATES = ("INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY",
                 "INIT_GPU", "READY", "SHUTTING_DOWN", "UNAVAILABLE")
DOMAIN_STATES = ("UP", "DOWN", "DEGRADED")
_NODE = re.compile(r"Node #(\d+)\s+-\s+(\S+)\s+-\s+([A-Z_]+)(?:\s+-\s+Version:\s+\S+)?\s*")
_DOMAIN = re.compile(r"Domain State:\s+([A-Z_]+)\s*")


def find_ctl(candidates: tuple[str, ...] = SEARCH, owner: int = 0) -> str | None:
    """The real path of the first candidate that may run (:func:`locate`); None."""
    return locate(candidates, owner)[0]


def locate(candidates: tuple[str, ...] = SEARCH, owner: int = 0) -> tuple[str | None, str | None]:
    """(the real path to run, None) for the first candidate present that is a regular file
    ``owner`` (root; tests: their own uid) owns in a directory ``owner`` owns, neither writable
    by anyone else, and that passes the program rule as root; (None, why) when the first one
    present is refused; (None, None) when none is there."""
    from gpuhc.files.fsutil import UnsafePath, check_trusted_program

    for path in candidates:
        if not os.path.lexists(path):
            continue
        try:
            real = check_trusted_program(path, "nvidia-imex-ctl")
            real = os.path.realpath(real)
            st = os.stat(real)
            parent = os.stat(os.path.dirname(real))
        except UnsafePath as e:
            return None, str(e)
        except OSError:
            continue
        if _trusted(st, owner) and _trusted(parent, owner) and stat.S_ISREG(st.st_mode):
            return real, None
        return None, f"refusing nvidia-imex-ctl: {path} is not a regular file only its owner can write"
    return None, None


def _trusted(st: os.stat_result, owner: int) -> bool:
    return st.st_uid == owner and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class ImexLive:
    """Read the daemon's and the domain's state (see the module docstring)."""

    def __init__(self, candidates: tuple[str, ...] = SEARCH, timeout_s: float = TIMEOUT_S, owner: int = 0):
        self.candidates, self.timeout_s, self.owner = candidates, timeout_s, owner

    def read(self) -> ImexStatus:
        ctl, refused = locate(self.candidates, self.owner)
        if ctl is None:
            return ImexStatus(installed=False, error=refused)
        text, error = _run([ctl, "-q"], self.timeout_s)
        if error is not None:
            return ImexStatus(installed=True, error=f"nvidia-imex-ctl -q: {error}")
        daemon = parse_daemon(text)
        if daemon is None:
            return ImexStatus(installed=True, error=f"nvidia-imex-ctl -q said {_quote(text)}")
        if daemon != "READY":
            return ImexStatus(installed=True, daemon=daemon)
        text, error = _run([ctl, "-N"], self.timeout_s)
        if error is not None:
            return ImexStatus(installed=True, daemon=daemon, error=f"nvidia-imex-ctl -N: {error}")
        domain, nodes = parse_domain(text)
        return ImexStatus(installed=True, daemon=daemon, domain=domain, nodes=nodes,
                          error=None if domain else f"nvidia-imex-ctl -N printed no domain state: {_quote(text)}")


def parse_daemon(text: str) -> str | None:
    """``-q``'s one word, when it is one of the daemon's documented states; None otherwise."""
    word = text.strip().upper()
    return word if word in DAEMON_STATES else None


def parse_domain(text: str) -> tuple[str | None, dict[str, str]]:
    """``-N``'s domain state (None when absent) and node table (address -> state, at most
    MAX_NODES entries); lines outside the grammar are skipped."""
    domain, nodes = None, {}
    for line in text.splitlines():
        line = line.strip()
        m = _NODE.fullmatch(line)
        if m and len(nodes) < MAX_NODES:
            nodes[escape(m.group(2))[:64]] = m.group(3)
            continue
        m = _DOMAIN.fullmatch(line)
        if m and m.group(1) in DOMAIN_STATES:
            domain = m.group(1)
    return domain, nodes


def _run(argv: list[str], timeout_s: float) -> tuple[str, str | None]:
    """(output, None) or ("", why it failed). At most MAX_OUTPUT bytes (and one read) are ever
    held: more is a failure, not a truncated table. The tool is killed at its deadline whatever
    it does. stderr joins stdout, so a failure is named by its exit status and its words."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        return "", f"cannot run: {e.strerror or e}"
    from gpuhc.files.untrusted import read_output

    deadline = time.monotonic() + timeout_s
    out, ended = read_output(proc.stdout, MAX_OUTPUT, deadline)
    proc.stdout.close()
    if ended != "eof":
        proc.kill()
        proc.wait()
        return "", (f"no answer within {timeout_s:g}s" if ended == "timeout"
                    else f"more than {MAX_OUTPUT // 1024} KiB of output")
    try:
        rc = proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return "", f"no answer within {timeout_s:g}s"
    text = bytes(out).decode(errors="replace")
    if rc != 0:
        return "", f"exit {rc}: {_quote(text)}"
    return text, None


def _quote(text: str) -> str:
    return repr(escape(" ".join(text.split()))[:160])
