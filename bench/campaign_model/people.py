"""The persons of the campaign (docs/campaign.md, "People"): the admin who triages a node gpuhc
drained a working day later and repairs it (an RMA or a cable, days), swaps the part of a node
gpuhc retired, repairs a host that went down, and drains and reboots nodes for maintenance
(sometimes a new driver). Every one of these is a human action, counted by kind. A mixin of
sim.Campaign."""

from __future__ import annotations

from gpuhc.slurm.policy.reason import parse_reason

from . import faults as F
from . import noise as N

ADMIN_REASON = {"rma": "hardware repair: GPU/board RMA", "cable": "hardware repair: IB cable or port",
                "retired": "hardware repair: RMA of a retired node", "maintenance": "maintenance: firmware and driver"}


class People:
    HUMAN_AFTER_S = 24 * 3600.0  # a working day after gpuhc's drain, a person looks at the node

    def _person_takes(self, name: str, kind: str, delay: tuple[float, float]) -> None:
        node = self.nodes[name]
        node.off, node.admin_hold = True, True
        self.slurm.admin_drain(name, ADMIN_REASON.get(kind, kind))  # first: the job's end frees no slot here
        if name in self.running:
            self.end_job(self.running[name], failed=True, why=f"a person's {kind}")
        self.at(self.now() + self.rng.uniform(*delay) * self.ts, "person_done", name, kind)

    def _on_human(self, name: str, since: float) -> None:
        """A day after gpuhc drained (or retired) the node: the person swaps a retired node's
        part; repairs a node still out for a fault, or whose fault is still there (a node that
        flaps between gpuhc's resume and the next drain); resumes one with nothing to find."""
        row, node = self.slurm.nodes[name], self.nodes[name]
        if node.off or node.admin_hold:
            return
        mine = parse_reason(row.reason)
        if mine is not None and mine.retired:
            self.stats.human.append((self.now(), name, "rma", row.reason))
            self._person_takes(name, "retired", F.PERSON_S["rma"])
            return
        still_out = (not row.in_service or mine is not None) and self._out_since(name) <= since
        lasting = [f for f in node.hardware() if f.start <= since]
        if not still_out and not lasting:
            return
        if lasting:
            kind = lasting[0].cls.person
            self.stats.human.append((self.now(), name, kind, f"{lasting[0].cls.name}: {row.reason or 'in service'}"))
            self._person_takes(name, kind, F.PERSON_S[kind])
            return
        self.stats.human.append((self.now(), name, "resume (nothing found)", row.reason))
        node.version += 1
        self.slurm.admin_resume(name)
        self._watch(name)
        self.schedule()

    def _on_person_done(self, name: str, kind: str) -> None:
        node = self.nodes[name]
        for f in list(node.faults):
            self._repair(node, f, f"a person: {kind}", keep_lines=False)
        if kind in ("rma", "retired", "host repair", "host"):
            node.parts_epoch += 1  # a new part: a lemon's returns stop, its history starts again
            node.history = []
        node.rebooted(self.now())
        node.off = node.admin_hold = False
        node.settled.clear()
        self.slurm.admin_resume(name)
        self._watch(name)
        self.schedule()

    def maintenance(self, name: str) -> None:
        """Host maintenance (Llama 3's "unplanned maintenance"): an admin drains the node, kills
        its job, reboots it (half the time onto a new driver), works on it, resumes it. gpuhc's
        health checks keep running meanwhile and must leave the admin's drain alone."""
        node = self.nodes[name]
        if node.off or node.admin_hold:
            return
        self.stats.human.append((self.now(), name, "maintenance", ADMIN_REASON["maintenance"]))
        node.admin_hold = True
        self.slurm.admin_drain(name, ADMIN_REASON["maintenance"])  # first: the job's end frees no slot here
        if name in self.running:
            self.end_job(self.running[name], failed=True, why="host maintenance")
        if self.noise_on and self.noise_rng.random() < N.DRIVER_UPGRADE_SHARE:
            node.driver = N.NEW_DRIVER
        node.rebooted(self.now() + self.reboot_s)
        self.at(self.now() + self.rng.uniform(*F.PERSON_S["admin"]) * self.ts, "maintenance_done", name)
        self._watch(name)

    def _on_maintenance_done(self, name: str) -> None:
        node = self.nodes[name]
        node.admin_hold = False
        node.settled.clear()
        self.slurm.admin_resume(name)
        self._watch(name)
        self.schedule()

    def host_down(self, f: F.Fault) -> None:
        """A host part failed (SSD, DIMM, CPU, chassis, IO board): slurmd stops answering and
        Slurm marks the node DOWN (the caller, before the node's job ends: Slurm places no job on
        a node that does not answer, docs/campaign.md "host-down"); nothing of gpuhc runs; a
        person repairs it in days."""
        name = f.node
        self.stats.human.append((self.now(), name, "host repair", f.cls.row))
        self.at(self.now() + self.rng.uniform(*F.HOST_DOWN_S) * self.ts, "person_done", name, "host repair")

    def _on_die(self, fid: int) -> None:
        """A host part that degraded (FaultClass.dies_after_s) stops the host, unless a person
        repaired it first: from here it is a host-down."""
        f = self.faults[fid]
        node = self.nodes[f.node]
        if f.end is not None or node.off:
            return
        self._repair(node, f, "the host died", keep_lines=False)
        node.off = True
        self.slurm.set_down(f.node, "Not responding")
        self.host_down(self._arise(F.BY_NAME["host-down"], f.node, False))

    def _out_since(self, name: str) -> float:
        for t, n, what, _ in reversed(self.slurm.events):
            if n == name and what in ("drain", "reboot-asked"):
                return t
        return 0.0
