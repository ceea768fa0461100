"""Hooks slurmd kills at its timeout (docs/campaign.md, "Hooks killed at Slurm's timeout"): a
gpuhc process that cannot end because a thread of it sleeps uninterruptibly in the driver (an
NVML call that never returns). gpuhc's own deadlines end every run it can end (its runner
ERRORs by the stage's deadline and leaves with os._exit), but a process with a thread in the
driver's uninterruptible sleep is not reaped until that call returns, so the shim's wait blocks
and slurmd kills the hook at PrologEpilogTimeout. slurmctld then drains the node with its own
reason, "Prolog error" or "Epilog error", unless the node is drained already (Slurm's
src/slurmctld/node_mgr.c), and a prolog's job is requeued. A killed health check is only logged
by slurmd. A mixin of sim.Campaign.

What makes a hook stuck: the wedged driver's fault (nvml-hang) drawn uninterruptible
(faults.strength), or a noise NVML stall, drawn uninterruptible once per episode from a stream
of its own, that outlasts the hook's timeout. The share is ours (faults.UNINTERRUPTIBLE)."""

from __future__ import annotations

import random

from . import faults as F

REASON = {"prolog": "Prolog error", "epilog": "Epilog error"}
# The hook's timeouts: docs/slurm.md's slurm.conf (PrologEpilogTimeout=90); a health check,
# slurmd's 60 s.
TIMEOUT_S = {"prolog": F.HOOK_TIMEOUT_S, "epilog": F.HOOK_TIMEOUT_S, "passive": 60.0}


class HookKills:
    def init_hook_kills(self) -> None:
        self.hook_rng = random.Random(self.seed * 7919 + 8)  # apart: the other draws stay the seed's
        self.stuck_eps: dict[int, bool] = {}  # noise episode -> uninterruptible (drawn once)
        self.slurm_drains: list = []  # (time, node, reason, fault class or None)

    def stuck(self, name: str, stage: str) -> str | None:
        """What keeps gpuhc's ``stage`` run on ``name`` from ending by slurmd's timeout, if anything:
        a fault's class name, or the noise kind's."""
        node = self.nodes[name]
        for f in node.hardware():
            if f.strength.get("uninterruptible"):
                return f.cls.name
        left = TIMEOUT_S[stage] * self.ts
        for ep_id, kind, end, _ in node.noise:
            if (kind.patch.get("nvml") or {}).get("error") != "Timeout" or end - self.now() <= left:
                continue
            if ep_id not in self.stuck_eps:
                self.stuck_eps[ep_id] = self.hook_rng.random() < F.UNINTERRUPTIBLE
            if self.stuck_eps[ep_id]:
                return kind.name
        return None

    def hook_killed(self, name: str, stage: str) -> bool:
        """After gpuhc's ``stage`` hook on ``name``: whether slurmd killed it at its timeout.
        A prolog or epilog killed drains the node with Slurm's reason (unless drained already),
        and a person looks at it a working day later (People._on_human)."""
        if self.nodes[name].off:
            return False
        why = self.stuck(name, stage)
        if why is None:
            return False
        self.stats.runs[f"killed by slurmd ({stage})"] += 1
        if stage == "passive":
            return True
        self.offset += TIMEOUT_S[stage] * self.ts
        if self.slurm.slurm_drain(name, REASON[stage]):
            fault = next((f.cls.name for f in self.nodes[name].hardware()), None)
            self.slurm_drains.append((self.now(), name, REASON[stage], fault))
            self.nodes[name].settled.clear()
            self.at(self.now() + self.HUMAN_AFTER_S * self.ts, "human", name, self.now())
        return True
