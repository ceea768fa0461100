"""gpuhc's known-answer canary in the campaign (docs/campaign.md, "The silent-corruption canary
in the campaign"; what it is: docs/canary.md). A mixin of sim.Campaign, on with
``Campaign(canary=True)`` (``bench/campaign.py --canary``).

What is gpuhc's own, unchanged: the ``canary`` section's defaults (cases, limits, cadence); which
idle nodes are due (:func:`gpuhc.canary.submit.plan` over the fleet state, whose cadence is
:mod:`gpuhc.canary.schedule`'s); a run's verdict on a GPU (:func:`gpuhc.canary.verdict.judge_gpu`
on the run's cases: a mismatch retested at once, ``fail`` when the retest shows it too);
the GPU's standing after it (:func:`gpuhc.canary.fleet.ingest`: ``suspect`` and the short cadence
after one unconfirmed mismatch, ``failed`` and a pending drain after a confirmed one); the drain
(:func:`gpuhc.canary.drain.apply_pending`: the actuator with the health check's drain policy,
against the modelled slurmctld, reason ``gpuhc: RETIRED canary gpu<N> ...``); the epilog slice's
question "is the node's last canary older than ``period_h``" (:func:`gpuhc.canary.schedule.next_due_h`).

What stands in, at the hardware and the cron boundary: the admin host's ``gpuhc canary submit
--apply`` runs every SUBMIT_S (docs/canary.md's cron line); a canary job starts at once on a node
``plan`` names, holds it for ``canary.max_seconds`` (the run's limit: an upper bound of its cost
until the GPU measurement is in), and is cancelled without a result when a real job is placed
there (Slurm's preemption; the real job starts at once; the cancelled job's epilog is not
played); the epilog slice runs the shorter ``canary.epilog.cases`` for ``canary.epilog.max_seconds`` after a real job's epilog when due; a
run's result is collected at the next submit step. The GPU's answer: a corrupting GPU (the sdc
fault's strength, faults.strength) shows in a run that computes one of its precisions with the
fault's trigger chance, per precision, and again on the retest with the same chance; the HBM
pattern pass meets no modelled fault (the sdc class corrupts arithmetic, not stored words).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

from gpuhc.canary import schedule
from gpuhc.canary.cases import parse
from gpuhc.model.deadline import Deadline

from .active_gpu import SICK_GPU

SUBMIT_S = 20 * 60.0  # docs/canary.md: `*/20 * * * * gpuhc gpuhc canary submit --apply`
JOB_ID0 = 10_000_000  # canary jobs' ids, apart from the users'
NO_BITS = {"count": None, "elements": [], "why": "no bits named (a modelled fault)"}


@dataclass
class CanaryStats:
    runs: int = 0  # canary jobs that ran to their end and left a result
    slices: int = 0  # epilog slices
    preempted: int = 0  # canary jobs a real job cancelled (no result)
    lost: int = 0  # canary jobs whose node went away under them (a person, a reboot, a dead host)
    gpu_s: float = 0.0  # GPU-seconds of canary work, preempted runs' share included
    verdicts: dict = field(default_factory=lambda: {"pass": 0, "warn": 0, "fail": 0})
    drains: list = field(default_factory=list)  # (time, node, act, reason): apply_pending's acts
    log: list = field(default_factory=list)  # (time, node, "job"|"slice", the sick GPU's verdict)


class Canary:
    def init_canary(self, on: bool) -> None:
        self.canary_on = on
        self.canary_stats = CanaryStats()
        self.canary_jobs: dict[str, tuple] = {}  # node -> (job id, start, node boot at start, end event)
        self.canary_last: dict[str, float] = {}  # node -> end of its last canary that left a result
        self.canary_inbox: list[dict] = []  # results not yet collected by the admin side
        self.canary_fleet: dict = {}  # the admin host's fleet state (gpuhc.canary.fleet's document)
        self.canary_rng = random.Random(self.seed * 7919 + 5)  # apart: the other draws stay the seed's
        self.in_canary_epilog = False
        self.canary_epilog_drains: set = set()  # (time, node) of drains in a canary job's epilog
        self.canary_ids = itertools.count(JOB_ID0)
        if not on:
            return
        if self.ts != 1.0:
            raise ValueError("the canary runs on the campaign's own clock only (time_scale 1): its cadence is in hours")
        s = self.canary_section = self.config.section("canary")
        self.cadence = schedule.Cadence.from_section(s)
        self.canary_precisions = {"job": tuple(dict.fromkeys(parse(n).precision for n in s["cases"])),
                                  "slice": tuple(dict.fromkeys(parse(n).precision for n in s["epilog"]["cases"]))}
        self.canary_cases = {"job": list(s["cases"]), "slice": list(s["epilog"]["cases"])}

    def start_canary(self) -> None:
        if self.canary_on:
            self.at(self.t + 60.0 * self.ts, "canary_submit")

    # ------------------------------------------------------------------ the admin host's cron step

    def _on_canary_submit(self) -> None:
        """``gpuhc canary submit --apply``: collect, drain what is confirmed, submit to due idle nodes."""
        from gpuhc.canary import fleet
        from gpuhc.canary.drain import apply_pending
        from gpuhc.canary.submit import plan
        from gpuhc.slurm.act.scontrol import Scontrol

        now, s, doc = self.now(), self.canary_section, self.canary_fleet
        inbox, self.canary_inbox = self.canary_inbox, []
        for rec in inbox:
            fleet.ingest(doc, rec, s, now)
        if doc.get("pending"):
            mark, lines = len(self.slurm.events), []
            sc = Scontrol(run=self.slurm, deadline=Deadline.after(60.0))
            for r in apply_pending(doc, self.config, sc, now, lines):
                self.canary_stats.drains.append((now, r["node"], r["act"], r["reason"]))
            self._after(mark)
        states = {n: self._canary_state(n) for n in self.names}
        room = int(s["job"]["max_jobs"]) - len(self.canary_jobs)
        for name in plan(doc, states, set(self.canary_jobs), s, now)[:max(0, room)]:
            self._canary_job(name)
        self.at(now + SUBMIT_S * self.ts, "canary_submit")

    def _canary_state(self, name: str) -> str:
        row = self.slurm.nodes[name]
        if not row.in_service or self.nodes[name].off:
            return "drained"
        if name in self.running or name in self.completing or name in self.canary_jobs:
            return "allocated"
        return "idle"

    def _canary_job(self, name: str) -> None:
        jid = next(self.canary_ids)
        ev = self.at(self.now() + float(self.canary_section["max_seconds"]) * self.ts, "canary_end", name, jid)
        self.canary_jobs[name] = (jid, self.now(), self.nodes[name].boot, ev)
        self.slurm.nodes[name].base = "ALLOCATED"

    def _on_canary_end(self, name: str, jid: int) -> None:
        job = self.canary_jobs.get(name)
        if job is None or job[0] != jid:
            return  # preempted: a real job has the node
        del self.canary_jobs[name]
        node, row = self.nodes[name], self.slurm.nodes[name]
        if row.base == "ALLOCATED" and name not in self.running:
            row.base = "IDLE"
        self.canary_stats.gpu_s += (self.now() - job[1]) / self.ts * self.gpus
        if node.off or node.boot != job[2]:
            self.canary_stats.lost += 1
            return
        self.canary_stats.runs += 1
        self._canary_run(name, "job")
        self.in_canary_epilog = True  # Slurm runs the Epilog after every job, a canary's too
        mark = len(self.slurm.events)
        try:
            self._epilog(name, jid, False)
        finally:
            self.in_canary_epilog = False
        # a drain by that epilog's burn-in: the canary job brought it (metrics.silent_corruption)
        self.canary_epilog_drains |= {(t, n) for t, n, what, _ in self.slurm.events[mark:] if what == "drain"}

    def preempt_canary(self, name: str) -> None:
        """A real job is placed on the node: Slurm cancels its canary job (no result)."""
        job = self.canary_jobs.pop(name, None)
        if job is None:
            return
        self.canary_stats.preempted += 1
        self.canary_stats.gpu_s += (self.now() - job[1]) / self.ts * self.gpus

    def canary_epilog_slice(self, name: str) -> None:
        """After a real job's epilog: ``gpuhc canary run --epilog --if-due``."""
        if not (self.canary_on and self.cadence.epilog_slice) or self.in_canary_epilog or self.nodes[name].off:
            return
        now_h = self.now() / 3600.0
        last = self.canary_last.get(name)
        if schedule.next_due_h(None if last is None else last / 3600.0, schedule.OK, None, now_h, self.cadence) > now_h:
            return
        self.canary_stats.slices += 1
        self.canary_stats.gpu_s += float(self.canary_section["epilog"]["max_seconds"]) * self.gpus
        self._canary_run(name, "slice")

    # ------------------------------------------------------------------ one run on one node

    def canary_shows(self, trigger: float) -> bool:
        """Does a corrupting GPU's fault show in this computation of one precision? (tests replace it)"""
        return self.canary_rng.random() < trigger

    def _canary_run(self, name: str, kind: str) -> None:
        """The node's GPUs compute the run's cases; the result (gpuhc's record shape) waits for
        the admin side's next step."""
        from gpuhc.canary import verdict

        node = self.nodes[name]
        sdc = [f.strength for f in node.hardware() if f.cls.active == "sdc"]
        off: dict[str, tuple[bool, bool]] = {}
        for p in self.canary_precisions[kind]:
            hit = [st["trigger"] for st in sdc if p in st["precisions"]]
            if hit:
                first = any(self.canary_shows(t) for t in hit)
                off[p] = (first, first and any(self.canary_shows(t) for t in hit))
        gpus = {}
        for i in range(self.gpus):
            subj = f"gpu{i}"
            g = {"cases": self._cases(kind, off if subj == SICK_GPU else {})}
            gpus[subj] = {"key": "model", "uuid": f"GPU-{name}-{subj}-{node.parts_epoch}", "name": "H100",
                          **verdict.gpu_summary(g)}
            st = gpus[subj]["status"]
            self.canary_stats.verdicts[st] = self.canary_stats.verdicts.get(st, 0) + 1
        self.canary_stats.log.append((self.now(), name, kind, gpus[SICK_GPU]["status"]))
        self.canary_last[name] = self.now()
        self.canary_inbox.append({"node": name, "ended": self.now(), "gpus": gpus, "error": None})

    def _cases(self, kind: str, off: dict[str, tuple[bool, bool]]) -> dict:
        repeats = int(self.canary_section["repeats"])
        out, seen = {}, set()
        for n in self.canary_cases[kind]:
            c = parse(n)
            case = {"precision": c.precision, "shape": c.shape, "iterations": repeats, "ref": "model",
                    "ref_from": "exact" if c.kind == "exact" else "siblings", "mismatch": None}
            first, retest = off.get(c.precision, (False, False))
            if first and c.precision not in seen:  # the precision's first case shows it
                seen.add(c.precision)
                case["mismatch"] = {"confirmed": retest, "first_run_off": 1, "retest_off": int(retest), "bits": NO_BITS}
            out[n] = case
        return out
