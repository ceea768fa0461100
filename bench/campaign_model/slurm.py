"""A modelled slurmctld: the node table gpuhc reads and updates, answering the argv gpuhc sends.

It stands behind the same ``run=`` injection of :class:`gpuhc.slurm.act.command.SlurmCommand` that
the unit tests use (tests/slurm/flows/test_entry.py's MiniSlurm), so gpuhc's flows run unchanged; the
answers are rendered by tests/helpers/slurm_answers.py, the format tests/slurm_real/test_sinfo.py checks
against a real slurmctld. What Slurm does on its own (a reboot's notes and its DOWN state after
the boot, docs/slurm.md "Slurm releases") is modelled as 22.05 does it with ReturnToService=1.
Every argv counts as one RPC, per kind, for the campaign's "Slurm RPCs per hour".
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: tests.helpers
from tests.helpers import slurm_answers  # noqa: E402

PARTITION = ("gpu",)


@dataclass
class NodeRow:
    base: str = "IDLE"  # IDLE / ALLOCATED / DOWN
    flags: set = field(default_factory=set)  # DRAIN, REBOOT_REQUESTED, REBOOT_ISSUED
    reason: str | None = None
    reason_time: float | None = None
    jobs: int = 0

    @property
    def state(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])

    @property
    def in_service(self) -> bool:
        return self.base != "DOWN" and "DRAIN" not in self.flags and not self.reboot_pending


    @property
    def reboot_pending(self) -> bool:
        return bool({"REBOOT_REQUESTED", "REBOOT_ISSUED"} & self.flags)


class ModelSlurm:
    """The node table and the argv it answers. ``clock()`` is the campaign's virtual time."""

    def __init__(self, names: list[str], clock, timeouts=None):
        self.nodes = {n: NodeRow() for n in names}
        self.clock = clock
        # noise: slurmctld too busy to answer one RPC in noise.SLURM_TIMEOUT_SHARE (a Random, or None)
        self.timeouts = timeouts
        self.rpcs: Counter = Counter()
        self.events: list[tuple[float, str, str, str | None]] = []  # (time, node, what, reason)

    # ------------------------------------------------------------------ the wire

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        from .noise import SLURM_TIMEOUT, SLURM_TIMEOUT_SHARE

        if self.timeouts is not None and self.timeouts.random() < SLURM_TIMEOUT_SHARE:
            self.rpcs["timed out"] += 1
            return 1, "", SLURM_TIMEOUT
        if slurm_answers.is_sinfo(argv):
            self.rpcs["sinfo-node" if slurm_answers.one_node(argv) else "sinfo-scope"] += 1
            return 0, slurm_answers.render(self._rows(), argv), ""
        verb = argv[1]
        self.rpcs[f"scontrol-{verb}"] += 1
        if verb == "update":
            kv = dict(a.split("=", 1) for a in argv[2:])
            return self._update(kv["NodeName"], kv["State"], kv.get("Reason"))
        if verb == "reboot":
            kv = dict(a.split("=", 1) for a in argv[2:] if "=" in a)
            return self._reboot(argv[-1], kv.get("reason"))
        return 1, "", f"modelled Slurm does not answer {argv[:3]}"

    def _rows(self):
        stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t or self.clock()))  # noqa: E731
        return {n: (r.state, r.reason, stamp(r.reason_time), PARTITION) for n, r in self.nodes.items()}

    def _update(self, name: str, state: str, reason: str | None):
        r = self.nodes.get(name)
        if r is None:
            return 1, "", f"Invalid node name specified: {name}"
        now = self.clock()
        if state == "DRAIN":
            if not reason:
                return 1, "", "You must specify a reason when DOWNING or DRAINING a node"
            was = r.in_service
            r.flags.add("DRAIN")
            r.reason, r.reason_time = reason, now
            self.events.append((now, name, "drain" if was else "reason", reason))
            return 0, "", ""
        if state == "RESUME":
            if r.in_service and not r.reason:
                return 1, "", "Invalid node state specified"
            r.flags -= {"DRAIN", "REBOOT_REQUESTED", "REBOOT_ISSUED"}
            if r.base == "DOWN":
                r.base = "IDLE"
            r.reason = r.reason_time = None
            self.events.append((now, name, "resume", None))
            return 0, "", ""
        return 1, "", f"modelled Slurm takes no State={state}"

    def _reboot(self, name: str, reason: str | None):
        r = self.nodes[name]
        r.flags.add("REBOOT_REQUESTED")
        if reason:
            r.reason, r.reason_time = reason, self.clock()
        self.events.append((self.clock(), name, "reboot-asked", reason))
        return 0, "", ""

    # ------------------------------------------------------------------ Slurm's own acts

    def reboot_starts(self, name: str) -> None:
        r = self.nodes[name]
        r.flags = (r.flags - {"REBOOT_REQUESTED"}) | {"REBOOT_ISSUED"}
        r.reason = (r.reason or "") + " : reboot issued"

    def reboot_done(self, name: str) -> None:
        """nextstate=DOWN: the node registers DOWN, keeping its reason, until a RESUME."""
        r = self.nodes[name]
        r.flags -= {"REBOOT_ISSUED", "REBOOT_REQUESTED", "DRAIN"}
        r.base = "DOWN"
        r.reason = (r.reason or "") + " : reboot complete"
        self.events.append((self.clock(), name, "rebooted", r.reason))

    def admin_drain(self, name: str, reason: str) -> None:
        """An admin's `scontrol update State=DRAIN` (not counted as gpuhc's RPC)."""
        r = self.nodes[name]
        was = r.in_service
        r.flags.add("DRAIN")
        r.reason, r.reason_time = reason, self.clock()
        self.events.append((self.clock(), name, "admin-drain" if was else "admin-reason", reason))

    def slurm_drain(self, name: str, reason: str) -> bool:
        """slurmctld's own drain after a prolog or epilog failed ("Prolog error"): only of a node
        not drained or down already (src/slurmctld/node_mgr.c); whether it drained."""
        r = self.nodes[name]
        if not r.in_service:
            return False
        r.flags.add("DRAIN")
        r.reason, r.reason_time = reason, self.clock()
        self.events.append((self.clock(), name, "slurm-drain", reason))
        return True

    def set_down(self, name: str, reason: str) -> None:
        """slurmctld's own: a node that stopped answering is DOWN with Slurm's reason."""
        r = self.nodes[name]
        r.base = "DOWN"
        r.reason, r.reason_time = reason, self.clock()
        self.events.append((self.clock(), name, "down", reason))

    def admin_resume(self, name: str) -> None:
        """A person's `scontrol update State=RESUME` (not counted as gpuhc's RPC)."""
        r = self.nodes[name]
        r.flags -= {"DRAIN", "REBOOT_REQUESTED", "REBOOT_ISSUED"}
        r.base = "IDLE" if r.base == "DOWN" else r.base
        r.reason = r.reason_time = None
        self.events.append((self.clock(), name, "admin-resume", None))
