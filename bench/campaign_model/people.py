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


# Users' reports (ours): once jobs of this many distinct users hung on one node within a day, a
# person drains it a working day later (HUMAN_AFTER_S) and looks for the cause.
REPORTS_K, REPORTS_WINDOW_S = 3, 24 * 3600.0


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

    def users_report(self, job) -> None:
        """A hung job's user tells the admins its nodes. Of the job's nodes, the one in the most
        hung jobs within REPORTS_WINDOW_S (all of them, tied) is looked at a working day later
        once it is in REPORTS_K distinct users' hung jobs: the node the reports share, not every
        partner of a large job (users do not know which hang was a bad link's: every hang counts)."""
        since = self.now() - REPORTS_WINDOW_S * self.ts
        recent = [(uid, nodes) for t, _, _, uid, nodes in self.stats.hangs if t >= since]
        hung = {name: [uid for uid, nodes in recent if name in nodes] for name in job.nodes}
        most = max(len(v) for v in hung.values())
        for name, uids in hung.items():
            if len(uids) == most and len(set(uids)) >= REPORTS_K and name not in self.reported:
                self.reported.add(name)
                self.at(self.now() + self.HUMAN_AFTER_S * self.ts, "users_report", name, len(set(uids)))

    def _on_users_report(self, name: str, users: int) -> None:
        """A person drains the node the users named and repairs the fault found there; with none
        found (the hangs were the users' own), the node stays in service. A node already out (gpuhc's
        drain, a person's, a dead host) is the other person's to triage."""
        self.reported.discard(name)
        node, row = self.nodes[name], self.slurm.nodes[name]
        if node.off or node.admin_hold or not row.in_service:
            return
        found = node.hardware()
        why = f"jobs of {users} users hung within a day: " + (found[0].cls.name if found else "nothing found")
        self.stats.human.append((self.now(), name, "hang reported by users", why))
        if found:
            self._person_takes(name, found[0].cls.person, F.PERSON_S[found[0].cls.person])

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
            if n == name and what in ("drain", "reboot-asked", "slurm-drain"):
                return t
        return 0.0
