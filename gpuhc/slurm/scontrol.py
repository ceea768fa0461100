"""The only code in gpuhc that runs ``scontrol``.

Every call is an argv list (never a shell), has its own timeout, and that timeout is further cut
to what is left of the caller's deadline: slurmd kills the health check at 60 s, and a slurmctld
that does not answer must cost a clear log line, not the whole run. Any failure — non-zero exit,
timeout, missing binary — becomes a :class:`~gpuhc.errors.SlurmError` naming the command.

The runner is injectable (``run=``) so that unit tests see exactly which argv would be sent,
and so that the prolog's happy path can be proven to send nothing.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

from gpuhc.errors import SlurmError, SlurmUnreachable
from gpuhc.slurm.nodes import Node, NodeParseError, parse_show_node_oneline

# (argv, timeout_s) -> (returncode, stdout, stderr); raises subprocess.TimeoutExpired / OSError
Runner = Callable[[list[str], float], tuple[int, str, str]]

# A node name Slurm accepts and that cannot smuggle a second argument or a hostlist.
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HOSTLIST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._,\[\]-]{0,4095}$")
# Keep a little time after a timed-out call to log and exit before the caller's hard deadline.
_MARGIN_S = 0.5


def subprocess_runner(argv: list[str], timeout_s: float) -> tuple[int, str, str]:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                       check=False)
    return p.returncode, p.stdout, p.stderr


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


@dataclass
class Scontrol:
    binary: str = "scontrol"
    timeout_s: float = 10.0
    deadline: float | None = None  # time.monotonic() value no call may run past
    run: Runner = subprocess_runner
    calls: list[list[str]] = field(default_factory=list)  # every argv sent, for logs and tests

    # ------------------------------------------------------------------ reading

    def show_node(self, name: str) -> Node:
        """``scontrol show node -o NAME``: the node as slurmctld sees it right now."""
        _check_name(name)
        out = self._call([self.binary, "show", "node", "-o", name])
        nodes = self._parse(out, f"scontrol show node -o {name}")
        match = [n for n in nodes if n.name == name]
        if not match:
            raise SlurmError(f"scontrol show node -o {name}: no record for {name} in the answer")
        return match[0]

    def show_nodes(self) -> list[Node]:
        """``scontrol show node -o``: every node (one query, for the circuit breaker)."""
        out = self._call([self.binary, "show", "node", "-o"])
        return self._parse(out, "scontrol show node -o")

    # ------------------------------------------------------------------ acting

    def drain(self, name: str, reason: str) -> None:
        _check_name(name)
        _check_reason(reason)
        self._call([self.binary, "update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, name: str) -> None:
        _check_name(name)
        self._call([self.binary, "update", f"NodeName={name}", "State=RESUME"])

    def reboot(self, nodes: str, reason: str, nextstate: str = "DOWN", asap: bool = True) -> None:
        """``scontrol reboot [ASAP] nextstate=.. reason=.. NODES`` (needs RebootProgram)."""
        if not _HOSTLIST.match(nodes) or nodes.upper() == "ALL":
            raise SlurmError(f"refusing to reboot {nodes!r}: not a plain node list")
        if nextstate not in ("DOWN", "DRAIN", "RESUME"):
            raise SlurmError(f"reboot nextstate must be DOWN, DRAIN or RESUME, got {nextstate!r}")
        _check_reason(reason)
        argv = [self.binary, "reboot"] + (["ASAP"] if asap else [])
        argv += [f"nextstate={nextstate}", f"reason={reason}", nodes]
        self._call(argv)

    # ------------------------------------------------------------------ internals

    def remaining(self) -> float:
        if self.deadline is None:
            return float("inf")
        return self.deadline - time.monotonic()

    def show_all_raw(self, fmt: str) -> str:
        """Every node, hidden ones too, as Slurm prints it: ``fmt`` is "json" or "oneliner".
        Read-only; for callers that parse the answer themselves (drain-report)."""
        if fmt not in ("json", "oneliner"):
            raise ValueError(fmt)
        return self._call([self.binary, "--all", f"--{fmt}", "show", "node"])

    def _call(self, argv: list[str]) -> str:
        # Name the command in errors, but not the (long) reason text.
        cmd = " ".join("reason=..." if a.lower().startswith("reason=") else a for a in argv[1:])
        timeout = min(self.timeout_s, self.remaining() - _MARGIN_S)
        if timeout <= 0.1:
            raise SlurmError(f"scontrol {cmd}: not sent, no time left before the deadline")
        self.calls.append(list(argv))
        try:
            rc, out, err = self.run(argv, timeout)
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"scontrol {cmd}: no answer within {timeout:.1f}s (slurmctld down or busy?)") from None
        except FileNotFoundError:
            raise SlurmUnreachable(f"scontrol not found: {self.binary!r} (set slurm.scontrol or PATH)") from None
        except OSError as e:
            raise SlurmError(f"scontrol {cmd}: cannot run {self.binary}: {e.strerror or e}") from None
        if rc != 0:
            msg = _one_line(err or out) or "no message"
            raise SlurmError(f"scontrol {cmd} failed (exit {rc}): {msg}")
        return out

    @staticmethod
    def _parse(out: str, what: str) -> list[Node]:
        try:
            return parse_show_node_oneline(out)
        except NodeParseError as e:
            raise SlurmError(f"{what}: unreadable answer: {e}") from None


def _check_name(name: str) -> None:
    if not _NODE_NAME.match(name or ""):
        raise SlurmError(f"refusing node name {name!r}: not a single Slurm node name")


def _check_reason(reason: str) -> None:
    # The reason is built by gpuhc.slurm.reason; this guards the boundary against any other path.
    if not reason or any(ord(c) < 32 or ord(c) == 127 for c in reason) or len(reason.encode()) > 255:
        raise SlurmError(f"refusing reason {reason[:60]!r}: must be one printable line of at most 255 bytes")
