"""The IMEX daemon's status, from ``nvidia-imex-ctl`` (GB200 NVL72: multi-node NVLink memory export).

What is asked, and why (docs/facts.md "IMEX"):

- ``nvidia-imex-ctl -q`` prints the local daemon's state as one word (READY, INITIALIZING,
  WAITING_FOR_PEERS, ...): NVIDIA's DCGM asks the same (DcgmImexManager).
- Only when the daemon says READY, ``nvidia-imex-ctl -N`` prints the domain: a legend, the node
  table ``Node #<n> - <address> - <STATE>[ - Version: <v>]``, a connectivity matrix and
  ``Domain State: UP|DOWN|DEGRADED``. Its text form is read (not ``-j``): that is what real
  captures in public threads show (tests/data/imex/README.md).

The tool is looked for only in system directories and run only when root owns it and nobody
else can write it or its directory (this runs as root on every node): a node without IMEX pays
four ``stat`` calls. Each call is an argv list with a deadline; its output is read up to a bound
and parsed by a strict grammar -- a line that does not match is ignored, never guessed at -- and
every text kept is escaped (gpuhc/logtext.py). Nothing here raises: a failure is the reading's
``error``, in words.
"""

from __future__ import annotations

import os
import re
import selectors
import stat
import subprocess
import time

from gpuhc.logtext import escape
from gpuhc.model import ImexStatus

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
    """The first candidate that is a regular file root (``owner``: tests) owns, in a directory
    root owns, neither writable by anyone else; None."""
    for path in candidates:
        try:
            st = os.stat(path)
            parent = os.stat(os.path.dirname(path))
        except OSError:
            continue
        if _trusted(st, owner) and _trusted(parent, owner) and stat.S_ISREG(st.st_mode):
            return path
    return None


def _trusted(st: os.stat_result, owner: int) -> bool:
    return st.st_uid == owner and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class ImexLive:
    """Read the daemon's and the domain's state (see the module docstring)."""

    def __init__(self, candidates: tuple[str, ...] = SEARCH, timeout_s: float = TIMEOUT_S, owner: int = 0):
        self.candidates, self.timeout_s, self.owner = candidates, timeout_s, owner

    def read(self) -> ImexStatus:
        ctl = find_ctl(self.candidates, self.owner)
        if ctl is None:
            return ImexStatus(installed=False)
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
    deadline = time.monotonic() + timeout_s
    out = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while len(out) <= MAX_OUTPUT:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                proc.kill()
                proc.wait()
                proc.stdout.close()
                return "", f"no answer within {timeout_s:g}s"
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
    proc.stdout.close()
    if len(out) > MAX_OUTPUT:
        proc.kill()
        proc.wait()
        return "", f"more than {MAX_OUTPUT // 1024} KiB of output"
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
