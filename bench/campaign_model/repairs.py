"""The GPU reset's and the reboot's stand-ins: the model's dice for what a reset or a reboot
repairs, Slurm's reboot on the virtual clock, the boot-time retest. A mixin of sim.Campaign."""

from __future__ import annotations

from .node import retest


class Repairs:
    # ------------------------------------------------------------------ stand-ins: reset, reboot

    def _reset(self, remediation, targets, read_nvml, log, deadline, read_mig=None, state_dir=None, read_procs=None):
        """The reset procedure's stand-in: takes reset_s on the virtual clock, repairs a fault a
        reset can repair with its odds (a permanent lemon never)."""
        from gpuhc.slurm.repair.reset_run import Outcome

        node = self.current
        self.offset += self.reset_s
        healed = self.reset_outcomes.setdefault(node.name, [])
        healed.append([])  # the faults this node's k-th reset repaired (the real campaign plays them)
        for f in list(node.hardware()):
            if self.rng.random() < self.odds(node, f, f.cls.reset_fix):
                healed[-1].append(f.id)
                self._repair(node, f, "reset")
            else:
                self._stamp(f, self.now())  # it shows again after the reset
        node.version += 1
        node.write(self.now(), self.lines_cache, self._patch(node.name))
        return None, Outcome(True, False, f"campaign stand-in reset of gpu{','.join(map(str, targets))}")

    def _on_reboot_start(self, name: str) -> None:
        if name in self.running:
            return  # ASAP: after the running job ends (end_job asks again)
        row = self.slurm.nodes[name]
        if "REBOOT_REQUESTED" not in row.flags:
            return
        self.slurm.reboot_starts(name)
        self.at(self.now() + self.reboot_s, "reboot_done", name)

    def _on_reboot_done(self, name: str) -> None:
        node = self.nodes[name]
        survivors = []
        for f in list(node.hardware()):
            if self.rng.random() < self.odds(node, f, f.cls.reboot_fix):
                self._repair(node, f, "reboot", keep_lines=False)
            else:
                survivors.append(f)
        for f in [f for f in node.faults if f.cls.app]:
            self._repair(node, f, "reboot", keep_lines=False)
        node.rebooted(self.now())
        self.slurm.reboot_done(name)
        self.offset += 60.0 * self.ts  # the retest unit runs once the node is up
        for f in survivors:  # the driver logs it again when the retest touches the GPU, after its acknowledgement
            self._stamp(f, self.now() + 1.0)
        self.stats.retests.append((self.now(), name, retest(self._flow(name, "bootstrap"))))
        node.settled.clear()
        self._watch(name)
        self.schedule()

