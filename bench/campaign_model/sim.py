"""The event loop: faults, noise, gpuhc's flows, Slurm's reboots, on a virtual clock
(docs/campaign.md, "Method"); jobs are jobs.py's, persons people.py's, the faults' own events
fault_events.py's.

What runs for real: every health check, prolog, epilog and boot-time retest of a node whose
inputs changed since its last run of that stage changed nothing, through gpuhc.slurm.flows.entry with
the real runner judging the node's scenario (noise laid over it) and the real active-check
judges reading active_gpu.py's worker answers. What is skipped, and why: a node in service that
gpuhc does not hold, whose scenario, kernel log and Slurm row are those of its last run of the
stage, and that run sent nothing to Slurm, would get the same verdict again: with the inputs
fixed, time only ages kernel lines out of windows, which can relax a verdict but never harden
it, except the rules that harden with time alone (settle.py: such a run leaves its node
pending, run at every slot until they have had their time); and a pass of a node gpuhc does not
hold sends nothing (policy.needs_slurm). A node is "settled" per stage after such a run; every
change of a fault, noise, its kernel log or Slurm row unsettles it. The healthy scenario is
settled from the start (checked by running it).
Health checks of busy nodes with nothing else to see are run at a sampled share
(noise.BUSY_SHARE), stated with the results.
"""

from __future__ import annotations

import heapq
import itertools
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from gpuhc.slurm.policy.reason import parse_reason

from . import faults as F
from . import log_shapes
from . import noise as N
from .active_gpu import stand_in
from .canary import Canary
from .hook_kill import HookKills
from .job_activity import hang_views
from .jobs import Jobs
from .fault_events import LEAF_NODES, FaultEvents  # noqa: F401 (LEAF_NODES: campaign_scale.py imports it here)
from .node import HC_INTERVAL_S, T0, Node  # noqa: F401 (T0, HC_INTERVAL_S: tests import them here)
from .noise_events import NoiseEvents
from .people import People
from .repairs import Repairs
from .settle import Settling, pending_s
from .slurm import ModelSlurm

@dataclass
class Stats:
    escapes: list = field(default_factory=list)  # (time, job, node, class, arose in a job)
    in_job: list = field(default_factory=list)  # (fault id, class, stopped before the next job: bool|None)
    human: list = field(default_factory=list)  # (time, node, kind, why)
    runs: dict = field(default_factory=lambda: Counter(real=0))
    jobs: dict = field(default_factory=lambda: {"started": 0, "requeued": 0, "killed": 0, "done": 0, "gave_up": 0,
                                                "hung": 0})
    retests: list = field(default_factory=list)
    lost_gpu_s: dict = field(default_factory=Counter)  # why -> GPU-seconds of work lost
    noise: dict = field(default_factory=Counter)  # kind -> episodes
    admin_undone: list = field(default_factory=list)  # (time, node): gpuhc resumed an admin's hold
    prolog_stops: list = field(default_factory=list)  # (time, node): its prolog failed, Slurm requeued the job
    hangs: list = field(default_factory=list)  # (time, fault id, job id, uid, nodes): a job hung (jobs.hang)
    hang_views: dict = field(default_factory=Counter)  # the jobs check's verdicts on a hang (job_activity)


class Campaign(FaultEvents, Jobs, People, NoiseEvents, Repairs, Settling, Canary, HookKills):
    def __init__(self, config, workdir: Path, nodes: int = 64, gpus: int = 8, days: float = 30.0, seed: int = 1,
                 rate_scale: float = 1.0, reset_s: float = 60.0, reboot_s: float = 600.0, load: float = 0.8,
                 inject: list | None = None, jobs: list | None = None, time_scale: float = 1.0,
                 noise: bool = True, classes: tuple[str, ...] | None = None, odds: float = 1.0,
                 busy_share: float = N.BUSY_SHARE, pinned_share: float = 0.1, noise_inject: list | None = None,
                 placement: str = "random", log_shape: str | None = None, canary: bool = False):
        self.config, self.days, self.seed = config, days, seed
        # Every duration of the model times this: a real campaign's compression (docs/campaign.md,
        # "Trusting the model"); reset_s and reboot_s are given already scaled.
        self.ts = time_scale
        self.gpus, self.reset_s, self.reboot_s, self.load = gpus, reset_s, reboot_s, load
        self.rate_scale, self.noise_on, self.classes, self.odds_factor = rate_scale, noise, classes, odds
        self.busy_share, self.pinned_share = busy_share, pinned_share
        # "random": any free nodes; "lowest": the lowest-named free ones, as slurmctld picks whole
        # nodes of one partition (the real campaign, where Slurm places the jobs)
        self.placement = placement
        # [(seconds from the start, class name, node, permanent: True, False or "lemon")]: instead of the draw
        self.inject = inject
        self.noise_inject = noise_inject  # [(seconds from the start, noise kind, node)]: instead of the noise draw
        self.given_jobs = jobs  # [(seconds from the start, nodes, duration s, pinned[, uid])]: instead of the stream
        self.rng = random.Random(seed)
        self.noise_rng = random.Random(seed * 7919 + 1)  # noise apart, so the fault draw is the seed's
        self.names = [f"gpu{i:03d}" for i in range(1, nodes + 1)]
        self.t, self.offset = T0, 0.0
        self.slurm = ModelSlurm(self.names, self.now, random.Random(seed * 7919 + 2) if noise else None)
        self.nodes = {n: Node(n, workdir) for n in self.names}
        shapes = random.Random(seed * 7919 + 3)  # apart, so the fault and noise draws are the seed's
        if log_shape is None and time_scale < 1.0:
            # A compressed clock (the real campaign's) lives in fractions of a second, which the
            # whole-second stamps of syslog and dmesg -T would cut: ISO, as the real side writes.
            log_shape = "iso"
        for node in self.nodes.values():
            node.shape = log_shapes.draw(shapes) if log_shape is None else log_shape
        self.events: list = []
        self.seq = itertools.count()
        self.faults: list[F.Fault] = []
        self.stats = Stats()
        self.lines_cache: dict = {}
        self.spans: dict = {}  # scenario -> seconds from its first kernel line to its last
        self.reset_outcomes: dict[str, list[list[int]]] = {}  # node -> fault ids each of its resets repaired
        self.current: Node | None = None
        self.hc_due: dict[str, float] = {}  # node -> when its next health check is due
        self.samples: list = []
        self.observe = config.section("slurm")["mode"] == "observe"
        # The prolog's exit as slurmd sees it: in observe mode `gpuhc prolog` exits 0 whatever
        # it judged (gpuhc/cli/slurm_cmd.py, never_fail), so the job starts.
        self.never_fail = self.observe and bool(config.section("slurm")["prolog_fail_open"])
        self.ladder = bool(config.section("slurm")["remediation"]["enabled"])
        self.pending_s = pending_s(config)
        self.last_verdict = "pass"
        self.memo: dict = {}  # observe: the inputs of a node's last run of a stage -> (when, its RPCs, outcome)
        self.init_jobs()
        self.init_hook_kills()
        self.init_canary(canary)  # gpuhc's known-answer canary on idle nodes and in epilogs (canary.py)

    # ------------------------------------------------------------------ clock and events

    def now(self) -> float:
        return self.t + self.offset

    def at(self, t: float, kind: str, *args) -> int:
        n = next(self.seq)
        heapq.heappush(self.events, (t, n, kind, args))
        return n

    def run(self) -> "Campaign":
        import gpuhc.active.orchestrate as orchestrate_mod
        import gpuhc.run.runner as runner_mod
        import gpuhc.slurm.act.actuator as actuator_mod
        import gpuhc.slurm.repair.remediate as remediate_mod
        import gpuhc.slurm.repair.reset_run as reset_mod

        real_run_stage = runner_mod.run_stage
        saved = (actuator_mod.time, reset_mod.procedure, runner_mod.run_stage, orchestrate_mod.run_tasks,
                 remediate_mod.owner_of)
        # A recorded process's pid is not a process of this host: the model's GPU processes are
        # its strays, a user's (gpuhc/slurm/repair/remediate.py reads the owner from /proc).
        remediate_mod.owner_of = lambda pid, name, remediation: "stray"
        # The breaker's jitter and settle sleeps pass on the virtual clock; the reset procedure
        # (gpuhc/slurm/repair/reset_run.py) is the stand-in; the active checks' worker is active_gpu's;
        # the runner's runs are counted.
        actuator_mod.time = SimpleNamespace(sleep=self._sleep, monotonic=time.monotonic, time=self.now)
        reset_mod.procedure = self._reset
        runner_mod.run_stage = lambda opts: self._run_stage(real_run_stage, opts)
        orchestrate_mod.run_tasks = stand_in(self._active_kinds, self.noise_rng, random.Random(self.seed * 7919 + 6))
        # The nodes' state directories are the model's scratch: no durability to wait for.
        real_fsync, os.fsync = os.fsync, lambda fd: None
        try:
            self._check_healthy()
            horizon = T0 + self.days * 86400.0 * self.ts
            drawn = F.draw(self.rng, self.names, self.days, self.rate_scale, self.classes)
            if self.inject is not None:
                drawn = [(t, F.BY_NAME[cls], name, permanent) for t, cls, name, permanent in self.inject]
            for t, cls, name, permanent in drawn:
                self.at(T0 + t * self.ts, "fault", cls.name, name, permanent)
            if self.noise_inject is not None:
                for t, kind, name in self.noise_inject:
                    self.at(T0 + t * self.ts, "noise", kind, name)
            elif self.noise_on:
                self._draw_noise(horizon)
            if self.given_jobs is None:
                self.arrivals(horizon)
            for t, size, dur, pinned, *uid in self.given_jobs or ():  # uid: its user, where a test names one
                self.at(T0 + t * self.ts, "arrive", size, dur * self.ts, tuple(pinned), *uid)
            for h in range(int(self.days * 24) + 1):
                self.at(T0 + h * 3600.0 * self.ts, "sample")
            self.start_canary()
            while self.events and self.events[0][0] <= horizon:
                t, _, kind, args = heapq.heappop(self.events)
                self.t, self.offset = max(self.t, t), 0.0
                getattr(self, "_on_" + kind.replace("-", "_"))(*args)
            self.t = horizon
        finally:
            (actuator_mod.time, reset_mod.procedure, runner_mod.run_stage, orchestrate_mod.run_tasks,
             remediate_mod.owner_of) = saved
            os.fsync = real_fsync
        return self

    def _sleep(self, s: float) -> None:
        self.offset += s

    # ------------------------------------------------------------------ the runner

    def _run_stage(self, real, opts):
        from gpuhc.slurm.policy.drain import verdict_of

        self.stats.runs["real"] += 1
        report = real(opts)
        self.last_verdict = verdict_of(report.results).value
        self.stats.hang_views.update(hang_views(report.results))
        node = self.current
        for f in node.faults if node is not None else ():
            if f.runs_left:
                f.runs_left -= 1
                if not f.runs_left:  # its last growth was just there to read: the burst is over, a
                    # minute on (not within this flow, whose drain would then find no fault)
                    self.at(self.now() + 60.0, "clear", f.id)
        return report

    def _active_kinds(self) -> dict[str, dict]:
        node = self.current
        return {f.cls.active: f.strength for f in node.hardware() if f.cls.active} if node is not None else {}

    def _check_healthy(self) -> None:
        """The healthy scenario passes every stage: the ground for skipping its runs."""
        from gpuhc.run.runner import run_stage
        from gpuhc.slurm.policy.drain import Verdict, verdict_of

        probe = self.current = Node("probe", self.nodes[self.names[0]].dir.parent)
        for stage in ("passive", "prolog", "epilog"):
            probe.write(self.now(), self.lines_cache)
            flow = probe.flow(stage, self.config, self.slurm, self.now())
            v = verdict_of(run_stage(flow.opts).results)
            if v not in (Verdict.PASS, Verdict.WARN):
                raise RuntimeError(f"the healthy scenario does not pass the {stage} stage ({v.value}): "
                                   "the campaign's shortcut for healthy nodes would be wrong")
        for node in self.nodes.values():
            node.settled = {s: node.key() for s in ("passive", "prolog", "epilog")}

    # ------------------------------------------------------------------ events: gpuhc's flows

    def _after(self, mark: int) -> None:
        """What Slurm and people do next after gpuhc's acts since event ``mark``."""
        for t, name, what, _ in self.slurm.events[mark:]:
            mine = parse_reason(_)
            if what == "drain" or (what == "reason" and mine is not None and mine.retired):
                self.at(t + self.HUMAN_AFTER_S * self.ts, "human", name, t)
            elif what == "reboot-asked":
                self.at(t + 10.0 * self.ts, "reboot_start", name)  # REBOOT_REQUESTED ~10 s (docs/slurm.md)
            elif what == "resume" and self.nodes[name].admin_hold:
                self.stats.admin_undone.append((t, name))
            self.nodes[name].settled.clear()
            self._watch(name)

    def _on_hc(self, name: str, due: float) -> None:
        if self.hc_due.get(name) != due:
            return  # superseded by an earlier slot (_watch)
        del self.hc_due[name]
        row = self.slurm.nodes[name]
        if row.reboot_pending and "REBOOT_ISSUED" in row.flags:
            self._watch(name)  # rebooting: slurmd is not there to run it
            return
        if not self._attention(name):
            return
        mark = len(self.slurm.events)
        self._gpuhc(name, "passive")
        self._after(mark)
        self.hook_killed(name, "passive")
        self._watch(name)
        self.schedule()

    def _on_sample(self) -> None:
        counts = {"in service": 0, "drained": 0, "in repair": 0, "retired": 0}
        for name, row in self.slurm.nodes.items():
            mine = parse_reason(row.reason)
            if row.in_service:
                counts["in service"] += 1
            elif mine is not None and mine.retired:
                counts["retired"] += 1
            elif row.reboot_pending or row.base == "DOWN" or (mine is not None and mine.step):
                counts["in repair"] += 1
            else:
                counts["drained"] += 1
        self.samples.append((self.now(), counts))
