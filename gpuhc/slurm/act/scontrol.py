"""Slurm's node commands: read nodes (``sinfo``, ``scontrol show node``), drain, resume, reboot.

Runs through :mod:`gpuhc.slurm.act.command` (argv only, timeouts cut to the caller's deadline, one
error mapping for every Slurm command). Only the actuator (:mod:`gpuhc.slurm.act.actuator`) calls
the updating methods; everything else reads. The flows read through :meth:`Scontrol.node` and
:meth:`Scontrol.scope` (sinfo: see :mod:`gpuhc.slurm.read.sinfo` for why); ``show_node``/``show_nodes``
(every field, every node) serve the admin's listings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuhc.errors import SlurmError
from gpuhc.slurm.act.command import Runner, SlurmCommand, subprocess_runner  # noqa: F401 - re-exported
from gpuhc.slurm.read.nodes import Node, NodeParseError, parse_show_node_oneline
from gpuhc.slurm.read.releases import REBOOT_NEXTSTATES

# A node name Slurm accepts and that cannot smuggle a second argument or a hostlist.
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_HOSTLIST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._,\[\]-]{0,4095}$")


@dataclass
class Scontrol(SlurmCommand):
    """Build it from the config with ``Scontrol.from_section(config.section("slurm"), deadline=...)``
    (:meth:`SlurmCommand.from_section`): the configured ``slurm.scontrol``, ``slurm.sinfo`` and
    ``timeout_s``. ``binary`` and ``sinfo`` are the program names written into the argv, which
    the configured paths replace when the command runs."""

    binary: str = "scontrol"
    sinfo: str = "sinfo"

    # ------------------------------------------------------------------ reading

    def node(self, name: str) -> Node:
        """The node as slurmctld sees it right now, asked of it alone (``sinfo -n NAME``). A node
        in no partition is not listed by sinfo: then ``scontrol show node`` (every node)."""
        from gpuhc.slurm.read import sinfo

        _check_name(name)
        argv = sinfo.one_node_argv(self.sinfo, name)
        match = [n for n in self._parse_sinfo(self._call(argv), argv) if n.name == name]
        return match[0] if match else self.show_node(name)

    def scope(self, partitions: list[str] | None) -> list[Node]:
        """Every node of ``partitions`` (every partition when None), for the circuit breaker:
        one ``sinfo`` query, its answer one line per distinct (partition, state, reason)."""
        from gpuhc.slurm.read import sinfo

        for p in partitions or ():
            if not sinfo.PARTITION_NAME.match(p):
                raise SlurmError(f"refusing partition name {p!r}: not a plain Slurm partition name")
        argv = sinfo.scope_argv(self.sinfo, partitions)
        return self._parse_sinfo(self._call(argv), argv)

    def controller_boot_time(self) -> float | None:
        """When slurmctld last started (``BOOT_TIME`` of ``scontrol show config``: the same key on
        22.05, 24.11 and 26.05, src/api/config_info.c); None when the answer does not say."""
        from gpuhc.slurm.read.nodes import parse_slurm_time

        for line in self._call([self.binary, "show", "config"]).splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "BOOT_TIME":
                return parse_slurm_time(value.strip())
        return None

    def ledger(self, name: str) -> tuple[str, str, float | None, str]:
        """The breaker ledger's record, asked of it alone: (its Comment, its Extra, its reason
        stamp, its state as sinfo prints it)."""
        from gpuhc.slurm.read import sinfo

        _check_name(name)
        found = sinfo.parse_ledger(self._call(sinfo.ledger_argv(self.sinfo, name)), name)
        if found is None:
            raise SlurmError(f"sinfo does not list node {name}: put it in a (hidden) partition")
        return found

    def _parse_sinfo(self, out: str, argv: list[str]) -> list[Node]:
        from gpuhc.slurm.read import sinfo

        try:
            return sinfo.parse(out, self.note)  # an unreadable record is skipped, said once
        except NodeParseError as e:
            raise SlurmError(f"{' '.join(argv[:6])}: unreadable answer: {e}") from None

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

    def set_comment(self, name: str, text: str, field: str = "Comment") -> None:
        """Set a node's free-text ``Comment`` or ``Extra`` (the breaker ledger's two fields)."""
        _check_name(name)
        if field not in ("Comment", "Extra"):
            raise ValueError(field)
        if any(ord(c) < 32 or ord(c) == 127 for c in text) or len(text.encode()) > 4096:
            raise SlurmError(f"refusing node {field.lower()}: must be one printable line of at most 4096 bytes")
        self._call([self.binary, "update", f"NodeName={name}", f"{field}={text}"])

    def stamp(self, name: str, reason: str) -> None:
        """Drain ``name`` with ``reason``: slurmctld stamps the reason with its own clock when the
        text changes (the breaker ledger's clock tick). The same update as :meth:`drain`."""
        self.drain(name, reason)

    def reboot(self, nodes: str, reason: str, nextstate: str = "DOWN", asap: bool = True) -> None:
        """``scontrol reboot [ASAP] nextstate=.. reason=.. NODES`` (needs RebootProgram)."""
        if not _HOSTLIST.match(nodes) or nodes.upper() == "ALL":
            raise SlurmError(f"refusing to reboot {nodes!r}: not a plain node list")
        if nextstate not in REBOOT_NEXTSTATES:
            raise SlurmError(f"reboot nextstate must be {' or '.join(REBOOT_NEXTSTATES)}, got {nextstate!r}")
        _check_reason(reason)
        argv = [self.binary, "reboot"] + (["ASAP"] if asap else [])
        argv += [f"nextstate={nextstate}", f"reason={reason}", nodes]
        self._call(argv)

    # ------------------------------------------------------------------ internals

    def show_all_raw(self, fmt: str) -> str:
        """Every node, hidden ones too, as Slurm prints it: ``fmt`` is "json" or "oneliner".
        Read-only; for callers that parse the answer themselves (drain-report)."""
        if fmt not in ("json", "oneliner"):
            raise ValueError(fmt)
        return self._call([self.binary, "--all", f"--{fmt}", "show", "node"])

    def show_topology(self) -> str:
        """``scontrol show topology``: the switches Slurm knows, as it prints them (read-only)."""
        return self._call([self.binary, "show", "topology"])

    def _call(self, argv: list[str]) -> str:
        return self.call(argv)

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
    # The reason is built by gpuhc.slurm.policy.reason; this guards the boundary against any other path.
    if not reason or any(ord(c) < 32 or ord(c) == 127 for c in reason) or len(reason.encode()) > 255:
        raise SlurmError(f"refusing reason {reason[:60]!r}: must be one printable line of at most 255 bytes")
