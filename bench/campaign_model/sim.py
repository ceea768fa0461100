"""The event loop: faults, jobs, gpuhc's flows, Slurm's reboots and a person's repairs, on a
virtual clock (docs/campaign.md, "Method").

What runs for real: every health check, prolog, epilog and boot-time retest of a node that has a
fault, a recent fault's kernel-log lines, or a gpuhc reason, through gpuhc.slurm.entry with the
real runner judging the node's scenario. What is skipped, and why it is exact: a node with none
of those replays the healthy scenario, whose verdict (checked by running it at the start) is a
pass, and a passing run of a node gpuhc does not hold sends nothing and changes nothing
(policy.needs_slurm; the prolog's happy path); a RETIRED node's health check only keeps it
(policy and ladder leave RETIRED alone), so it is not run either.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from gpuhc.slurm import entry
from gpuhc.slurm.reason import parse_reason

from . import faults as F
from .node import Node, _epoch, retest
from .slurm import ModelSlurm

T0 = 1741082400.0  # 2025-03-04T10:00:00Z, the example scenarios' time
HC_INTERVAL_S = 300.0  # slurm/slurm.conf.example HealthCheckInterval
HUMAN_AFTER_S = 24 * 3600.0  # a node out this long, not retired, gets a person
OLD_LINES_WATCH_S = 3600.0
# Observe mode: a run with the inputs of the node's last run of its stage is re-run this often,
# so that what changes with time alone (the xid check's 24 h window) still shows, within 6 h.
OBSERVE_RERUN_S = 6 * 3600.0


@dataclass
class Job:
    id: int
    size: int
    duration: float
    submit: float
    pinned: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    start: float | None = None
    end_event: int | None = None


@dataclass
class Stats:
    escapes: list = field(default_factory=list)  # (time, job, node, class, arose in a job)
    in_job: list = field(default_factory=list)  # (fault id, class, stopped before the next job: bool|None)
    human: list = field(default_factory=list)  # (time, node, why)
    runs: dict = field(default_factory=lambda: {"real": 0})
    jobs: dict = field(default_factory=lambda: {"started": 0, "requeued": 0, "killed": 0, "done": 0, "gave_up": 0})
    retests: list = field(default_factory=list)


class Campaign:
    def __init__(self, config, workdir: Path, nodes: int = 64, gpus: int = 8, days: float = 30.0, seed: int = 1,
                 rate_scale: float = 1.0, reset_s: float = 60.0, reboot_s: float = 600.0, load: float = 0.8,
                 inject: list | None = None, jobs: list | None = None, time_scale: float = 1.0):
        self.config, self.days, self.seed = config, days, seed
        # Every duration of the model (the schedule's times, job lengths, fault lifetimes, the
        # health check's interval, reboots, a person's day) times this: a real campaign's
        # compression (docs/campaign.md, "Trusting the model"); reset_s and reboot_s are given
        # already scaled; gpuhc's own settings are the config's.
        self.ts = time_scale
        self.gpus, self.reset_s, self.reboot_s, self.load = gpus, reset_s, reboot_s, load
        self.rate_scale = rate_scale
        self.inject = inject  # [(seconds from the start, class name, node, permanent)]: instead of the draw
        self.given_jobs = jobs  # [(seconds from the start, nodes, duration s, pinned)]: instead of the stream
        self.rng = random.Random(seed)
        self.names = [f"gpu{i:03d}" for i in range(1, nodes + 1)]
        self.t, self.offset = T0, 0.0
        self.slurm = ModelSlurm(self.names, self.now)
        self.nodes = {n: Node(n, workdir) for n in self.names}
        self.queue: list[Job] = []
        self.jobs: dict[int, Job] = {}
        self.running: dict[str, int] = {}  # node -> job id
        self.events: list = []
        self.seq = itertools.count()
        self.faults: list[F.Fault] = []
        self.stats = Stats()
        self.lines_cache: dict = {}
        self.current: Node | None = None
        self.hc_due: set[str] = set()
        self.next_job = itertools.count(1)
        self.samples: list = []
        self.pending_next_prolog: dict[str, list[int]] = {}  # node -> in-job fault indices awaiting the next job
        self.observe = config.section("slurm")["mode"] == "observe"
        # The prolog's exit as slurmd sees it: in observe mode `gpuhc prolog` exits 0 whatever
        # it judged (gpuhc/cli/slurm_cmd.py, never_fail), so the job starts.
        self.never_fail = self.observe and bool(config.section("slurm")["prolog_fail_open"])
        self.memo: dict = {}  # observe: the inputs of a node's last run of a stage -> (when, its RPCs, outcome)

    # ------------------------------------------------------------------ clock and events

    def now(self) -> float:
        return self.t + self.offset

    def at(self, t: float, kind: str, *args) -> int:
        n = next(self.seq)
        heapq.heappush(self.events, (t, n, kind, args))
        return n

    def run(self) -> "Campaign":
        import gpuhc.slurm.actuator as actuator_mod
        import gpuhc.runner as runner_mod
        import gpuhc.slurm.remediate as remediate_mod
        import gpuhc.slurm.reset_run as reset_mod

        real_run_stage = runner_mod.run_stage
        saved = (actuator_mod.time, reset_mod.procedure, runner_mod.run_stage, remediate_mod.owner_of)
        # A recorded process's pid is not a process of this host: the model's GPU processes are
        # its strays, a user's (gpuhc/slurm/remediate.py reads the owner from /proc).
        remediate_mod.owner_of = lambda pid, name, remediation: "stray"
        # The breaker's jitter and settle sleeps pass on the virtual clock; the reset procedure
        # (quiesce, reset, restore, verify: gpuhc/slurm/reset_run.py) is the stand-in; the
        # runner's runs are counted.
        actuator_mod.time = SimpleNamespace(sleep=self._sleep, monotonic=time.monotonic, time=self.now)
        reset_mod.procedure = self._reset
        runner_mod.run_stage = lambda opts: self._run_stage(real_run_stage, opts)
        try:
            self._check_healthy()
            horizon = T0 + self.days * 86400.0 * self.ts
            drawn = F.draw(self.rng, self.names, self.days, self.rate_scale)
            if self.inject is not None:
                drawn = [(t, F.BY_NAME[cls], name, permanent) for t, cls, name, permanent in self.inject]
            for t, cls, name, permanent in drawn:
                self.at(T0 + t * self.ts, "fault", cls.name, name, permanent)
            if self.given_jobs is None:
                self._arrivals(horizon)
            for t, size, dur, pinned in self.given_jobs or ():
                self.at(T0 + t * self.ts, "arrive", size, dur * self.ts, tuple(pinned))
            for h in range(int(self.days * 24) + 1):
                self.at(T0 + h * 3600.0 * self.ts, "sample")
            while self.events and self.events[0][0] <= horizon:
                t, _, kind, args = heapq.heappop(self.events)
                self.t, self.offset = max(self.t, t), 0.0
                getattr(self, "_on_" + kind.replace("-", "_"))(*args)
            self.t = horizon
        finally:
            actuator_mod.time, reset_mod.procedure, runner_mod.run_stage, remediate_mod.owner_of = saved
        return self

    def _sleep(self, s: float) -> None:
        self.offset += s

    # ------------------------------------------------------------------ the runner

    def _run_stage(self, real, opts):
        self.stats.runs["real"] += 1
        report = real(opts)
        node = self.current
        for f in node.faults if node is not None else ():
            if f.runs_left:
                f.runs_left -= 1
                if not f.runs_left:  # its last growth was just there to read: the burst is over, a
                    # minute on (not within this flow, whose drain would then find no fault)
                    self.at(self.now() + 60.0, "clear", f.id)
        return report

    def _check_healthy(self) -> None:
        """The healthy scenario passes every stage: the ground for skipping its runs."""
        from gpuhc.runner import run_stage
        from gpuhc.slurm.policy import Verdict, verdict_of

        probe = self.current = Node("probe", self.nodes[self.names[0]].dir.parent)
        for stage in ("passive", "prolog", "epilog"):
            probe.write(self.now(), self.lines_cache)
            flow = probe.flow(stage, self.config, self.slurm, self.now())
            v = verdict_of(run_stage(flow.opts).results)
            if v not in (Verdict.PASS, Verdict.WARN):
                raise RuntimeError(f"the healthy scenario does not pass the {stage} stage ({v.value}): "
                                   "the campaign's shortcut for healthy nodes would be wrong")

    # ------------------------------------------------------------------ attention

    def _attention(self, name: str) -> bool:
        node, row = self.nodes[name], self.slurm.nodes[name]
        mine = parse_reason(row.reason)
        if mine is not None and mine.retired:
            return False
        # A repaired fault's lines stay in the kernel log (acknowledged by the reset or a
        # retest, handover.acknowledge_kernel_log); the node is watched for an hour after them,
        # not for the xid window's 24 h: docs/campaign.md, "Compressed".
        node.old_lines = [ln for ln in node.old_lines if self.now() - _epoch(ln[:19]) < OLD_LINES_WATCH_S * self.ts]
        return bool(node.faults or node.old_lines or mine is not None or not row.in_service)

    def _watch(self, name: str) -> None:
        if name in self.hc_due or not self._attention(name):
            return
        self.hc_due.add(name)
        every = HC_INTERVAL_S * self.ts
        phase = (self.names.index(name) / len(self.names)) * every  # CYCLE spreads the nodes
        k = (self.now() - T0 - phase) // every + 1
        self.at(T0 + phase + k * every, "hc", name)

    def _gpuhc(self, name: str, stage: str, env: dict | None = None):
        """gpuhc's flow for ``stage`` on the node. In observe mode gpuhc changes nothing (no
        drain, resume, reset or reboot; the prolog exits 0: tests/bench/test_campaign.py), so a run
        only costs Slurm reads: one whose inputs (the node's faults, its old kernel lines, its
        Slurm row) are those of its last run of the stage, less than 6 h ago, is not run
        again, and its reads are counted as that run's. Without this a month of observe did not
        finish (every sick node is judged at every interval and every job start, all month).
        A growing recording advances per run, so its node is always run."""
        flows = {"passive": entry.healthcheck, "prolog": entry.prolog, "epilog": entry.epilog}
        node, row = self.nodes[name], self.slurm.nodes[name]
        if not self.observe or any(f.runs_left for f in node.faults):
            return flows[stage](self._flow(name, stage, env))
        key = (name, stage, tuple(f.id for f in node.faults), tuple(node.old_lines), row.base, row.reason,
               tuple(sorted(row.flags)))
        memo = self.memo.get(key)
        if memo is not None and self.now() - memo[0] < OBSERVE_RERUN_S:
            self.slurm.rpcs.update(memo[1])
            self.stats.runs["observe: repeated"] = self.stats.runs.get("observe: repeated", 0) + 1
            return memo[2]
        before = Counter(self.slurm.rpcs)
        out = flows[stage](self._flow(name, stage, env))
        self.memo[key] = (self.now(), self.slurm.rpcs - before, out)
        return out

    def _flow(self, name: str, stage: str, env: dict | None = None):
        node = self.nodes[name]
        self.current = node
        node.write(self.now(), self.lines_cache)
        return node.flow(stage, self.config, self.slurm, self.now(), env)

    # ------------------------------------------------------------------ events: faults

    def _on_fault(self, cls_name: str, name: str, permanent: bool) -> None:
        cls = F.BY_NAME[cls_name]
        if cls.app:  # an application's fault happens inside a job: pick a node that runs one
            busy = sorted(self.running)
            if not busy:
                return
            name = self.rng.choice(busy)
        f = F.Fault(len(self.faults), cls, name, self.now(), permanent, stamp=self.now())
        f.in_job = str(self.running[name]) if name in self.running else None
        if cls.clears_after_s and not permanent:
            f.clears_at = self.now() + self.rng.uniform(*cls.clears_after_s) * self.ts
            self.at(f.clears_at, "clear", f.id)
        f.runs_left = cls.grows_for_runs  # a growing recording: over after these runs of the node
        self.faults.append(f)
        self.nodes[name].faults.append(f)
        if f.in_job is not None and not cls.app:
            self.stats.in_job.append([f.id, cls.name, None])
            self.pending_next_prolog.setdefault(name, []).append(len(self.stats.in_job) - 1)
        if f.in_job is not None and (cls.kills_job or cls.app):
            self._end_job(int(f.in_job), failed=True)
        self._watch(name)

    def _on_clear(self, fid: int) -> None:
        f = self.faults[fid]
        if f.active:
            self._repair(self.nodes[f.node], f, "cleared by itself")

    def _repair(self, node: Node, f: F.Fault, how: str, keep_lines: bool = True) -> None:
        f.end, f.how = self.now(), how
        node.faults.remove(f)
        if keep_lines and f.cls.scenario not in ():
            from .node import kernel_lines, restamp

            lines = self.lines_cache.setdefault(f.cls.scenario, kernel_lines(f.cls.scenario))
            node.old_lines += restamp(lines, f.stamp)

    # ------------------------------------------------------------------ stand-ins: reset, reboot, a person

    def _reset(self, remediation, gpus, read_nvml, log, deadline, read_mig=None):
        """The reset procedure's stand-in: takes reset_s on the virtual clock, repairs a fault a
        reset can repair with its class's odds (a lemon never)."""
        from gpuhc.slurm.reset_run import Outcome

        node = self.current
        self.offset += self.reset_s
        for f in list(node.hardware()):
            if not f.permanent and self.rng.random() < f.cls.reset_fix:
                self._repair(node, f, "reset")
            else:
                f.stamp = self.now()  # it shows again after the reset
        node.write(self.now(), self.lines_cache)
        return None, Outcome(True, False, f"campaign stand-in reset of gpu{','.join(map(str, gpus))}")

    def _on_reboot_start(self, name: str) -> None:
        if name in self.running:
            return  # ASAP: after the running job ends (_end_job asks again)
        row = self.slurm.nodes[name]
        if "REBOOT_REQUESTED" not in row.flags:
            return
        self.slurm.reboot_starts(name)
        self.at(self.now() + self.reboot_s, "reboot_done", name)

    def _on_reboot_done(self, name: str) -> None:
        node = self.nodes[name]
        survivors = []
        for f in list(node.hardware()):
            if not f.permanent and self.rng.random() < f.cls.reboot_fix:
                self._repair(node, f, "reboot", keep_lines=False)
            else:
                survivors.append(f)
        for f in [f for f in node.faults if f.cls.app]:
            self._repair(node, f, "reboot", keep_lines=False)
        node.old_lines, node.boot = [], self.now()
        self.slurm.reboot_done(name)
        self.offset += 60.0 * self.ts  # the retest unit runs once the node is up
        for f in survivors:  # the driver logs it again when the retest touches the GPU, after its acknowledgement
            f.stamp = self.now() + 1.0
        self.stats.retests.append((self.now(), name, retest(self._flow(name, "bootstrap"))))
        self._watch(name)
        self._schedule()

    def _on_human(self, name: str, since: float) -> None:
        """A day after gpuhc drained the node: a person steps in when the node is still out for
        it (and not retired), or when the fault it drained for is still there (a node that
        flaps between drain and resume needs a person as much as one that stays out)."""
        row = self.slurm.nodes[name]
        mine = parse_reason(row.reason)
        if mine is not None and mine.retired:
            return
        node = self.nodes[name]
        still_out = (not row.in_service or mine is not None) and self._out_since(name) <= since
        lasting = [f for f in node.hardware() if f.start <= since]
        if not still_out and not lasting:
            return
        self.stats.human.append((self.now(), name, row.reason or f"{lasting[0].cls.name} still there after a day"))
        for f in list(node.faults):
            self._repair(node, f, "a person", keep_lines=False)
        node.old_lines, node.boot = [], self.now()
        if not row.in_service:
            self.slurm.admin_resume(name)
        self._schedule()

    def _out_since(self, name: str) -> float:
        for t, n, what, _ in reversed(self.slurm.events):
            if n == name and what in ("drain", "reboot-asked"):
                return t
        return 0.0

    # ------------------------------------------------------------------ events: gpuhc's flows

    def _after(self, mark: int) -> None:
        """What Slurm does next after gpuhc's acts since event ``mark``."""
        for t, name, what, _ in self.slurm.events[mark:]:
            if what == "drain":
                self.at(t + HUMAN_AFTER_S * self.ts, "human", name, t)
            elif what == "reboot-asked":
                self.at(t + 10.0 * self.ts, "reboot_start", name)  # REBOOT_REQUESTED ~10 s (docs/slurm.md)
            self._watch(name)

    def _on_hc(self, name: str) -> None:
        self.hc_due.discard(name)
        row = self.slurm.nodes[name]
        if row.reboot_pending and "REBOOT_ISSUED" in row.flags:
            self._watch(name)  # rebooting: slurmd is not there to run it
            return
        mark = len(self.slurm.events)
        self._gpuhc(name, "passive")
        self._after(mark)
        self._watch(name)
        self._schedule()

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

    # ------------------------------------------------------------------ events: jobs

    def _arrivals(self, horizon: float) -> None:
        """Poisson job arrivals sized so the cluster would be ``load`` busy: sizes 1-16 nodes,
        lengths log-normal around 2 h (capped at 48 h), one job in ten pinned to its nodes."""
        sizes, weights = (1, 2, 4, 8, 16), (0.45, 0.25, 0.15, 0.10, 0.05)
        sizes = tuple(s for s in sizes if s <= len(self.names)) or (1,)
        mean_nodes = sum(s * w for s, w in zip(sizes, weights)) / sum(weights[:len(sizes)])
        mean_s = 2 * 3600.0 * 1.6487  # exp(sigma^2/2), sigma 1
        rate = self.load * len(self.names) / (mean_nodes * mean_s)
        if rate <= 0:
            return
        t = T0
        while True:
            t += self.rng.expovariate(rate)
            if T0 + (t - T0) * self.ts >= horizon:
                return
            size = self.rng.choices(sizes, weights[:len(sizes)])[0]
            dur = min(48 * 3600.0, self.rng.lognormvariate(0.0, 1.0) * 7200.0)
            pinned = tuple(self.rng.sample(self.names, size)) if self.rng.random() < 0.1 else ()
            self.at(T0 + (t - T0) * self.ts, "arrive", size, dur * self.ts, pinned)

    def _on_arrive(self, size: int, dur: float, pinned: tuple) -> None:
        j = Job(next(self.next_job), size, dur, self.now(), pinned)
        self.jobs[j.id] = j
        self.queue.append(j)
        self._schedule()

    def _free(self) -> list[str]:
        return [n for n in self.names if n not in self.running and self.slurm.nodes[n].in_service]

    def _schedule(self) -> None:
        """First fit in queue order (Slurm's backfill, without reservations); a pinned job that
        waited a day is given up by its user."""
        for j in list(self.queue):
            if j.pinned and self.now() - j.submit > 86400.0 * self.ts:
                self.queue.remove(j)
                self.stats.jobs["gave_up"] += 1
                continue
            free = self._free()
            if j.pinned:
                if not all(n in free for n in j.pinned):
                    continue
                chosen = list(j.pinned)
            elif len(free) >= j.size:
                chosen = self.rng.sample(free, j.size)
            else:
                continue
            self.queue.remove(j)
            self._start(j, chosen)

    def _start(self, j: Job, chosen: list[str]) -> None:
        env = {"SLURM_JOB_ID": str(j.id), "SLURM_JOB_GPUS": ",".join(map(str, range(self.gpus)))}
        failed = False
        for name in chosen:
            self._next_prolog(name, stopped=None)
            if not self._attention(name):
                continue
            mark = len(self.slurm.events)
            out = self._gpuhc(name, "prolog", env)
            self._after(mark)
            if out.exit_code != 0 and not self.never_fail:
                failed = True
                self._next_prolog(name, stopped=True)
        if failed:  # Slurm requeues the job; nodes whose prolog failed are drained
            self.stats.jobs["requeued"] += 1
            self.queue.insert(0, j)
            return
        j.nodes, j.start = tuple(chosen), self.now()
        self.stats.jobs["started"] += 1
        for name in chosen:
            self.running[name] = j.id
            self.slurm.nodes[name].base = "ALLOCATED"
            for f in self.nodes[name].hardware():
                self.stats.escapes.append((self.now(), j.id, name, f.cls.name, f.in_job is not None))
            self._next_prolog(name, stopped=False)
        j.end_event = self.at(self.now() + j.duration, "end", j.id)

    def _next_prolog(self, name: str, stopped: bool | None) -> None:
        """Settle the in-job faults of ``name`` waiting for the node's next job: stopped when its
        prolog failed or the node left service first; not stopped when a job started on it
        with the fault still there."""
        pend = self.pending_next_prolog.get(name)
        if not pend:
            return
        keep = []
        for i in pend:
            fid = self.stats.in_job[i][0]
            f = self.faults[fid]
            if not f.active:
                self.stats.in_job[i][2] = "repaired before the next job"
            elif stopped is True:
                self.stats.in_job[i][2] = "stopped"
            elif stopped is False:
                self.stats.in_job[i][2] = "escaped"
            else:
                keep.append(i)
                continue
        self.pending_next_prolog[name] = keep

    def _on_end(self, jid: int) -> None:
        self._end_job(jid, failed=False)

    def _end_job(self, jid: int, failed: bool) -> None:
        j = self.jobs[jid]
        if j.start is None or all(self.running.get(n) != jid for n in j.nodes):
            return
        self.stats.jobs["killed" if failed else "done"] += 1
        env = {"SLURM_JOB_ID": str(jid), "SLURM_JOB_GPUS": ",".join(map(str, range(self.gpus))),
               "SLURM_JOB_EXIT_CODE": "256" if failed else "0"}
        for name in j.nodes:
            self.running.pop(name, None)
            row = self.slurm.nodes[name]
            row.base = "IDLE" if row.base == "ALLOCATED" else row.base
            app = [f for f in self.nodes[name].faults if f.cls.app]
            if self._attention(name):
                mark = len(self.slurm.events)
                self._gpuhc(name, "epilog", env)
                self._after(mark)
            for f in app:  # the job that made it is gone; its Xid lines stay in the kernel log
                self._repair(self.nodes[name], f, "job ended")
            if "REBOOT_REQUESTED" in row.flags:
                self.at(self.now() + 10.0 * self.ts, "reboot_start", name)
            self._watch(name)
        self._schedule()
