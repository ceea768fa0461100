"""The campaign's jobs (docs/campaign.md, "Job stream"): arrivals, first-fit placement, the
prolog and epilog around each job, and what a fault costs the job it hits (a kill, a hang until
NCCL's watchdog, the work since its last checkpoint). A mixin of sim.Campaign."""

from __future__ import annotations

import random
from dataclasses import dataclass

from . import faults as F
from . import noise as N

CHECKPOINT_S = 3600.0  # a job killed by a fault loses the work since its last checkpoint (ours: hourly)
# The cluster's users (ours): each job is one user's, drawn Zipf-like (weight 1/k^USERS_ZIPF for
# the k-th user), from a stream of its own so that no other draw moves.
USERS, USERS_ZIPF = 40, 1.1


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
    end: float | None = None
    hung: bool = False
    uid: int = 0  # its user (USERS)


class Jobs:
    def init_jobs(self) -> None:
        import itertools

        self.queue: list[Job] = []
        self.jobs: dict[int, Job] = {}
        self.running: dict[str, int] = {}  # node -> job id
        self.completing: set[str] = set()  # nodes whose last job's processes are still exiting
        self.next_job = itertools.count(1)
        self.pending_next_prolog: dict[str, list[int]] = {}  # node -> in-job fault indices awaiting the next job
        self.user_rng = random.Random(self.seed * 7919 + 7)
        self.reported: set[str] = set()  # nodes users reported, a person not yet there (people.users_report)
        self.user_weights = [1.0 / k ** USERS_ZIPF for k in range(1, USERS + 1)]

    def arrivals(self, horizon: float) -> None:
        """Poisson job arrivals sized so the cluster would be ``load`` busy: sizes 1-16 nodes,
        lengths log-normal around 2 h (capped at 48 h), a share pinned to their nodes."""
        sizes, weights = (1, 2, 4, 8, 16), (0.45, 0.25, 0.15, 0.10, 0.05)
        sizes = tuple(s for s in sizes if s <= len(self.names)) or (1,)
        mean_nodes = sum(s * w for s, w in zip(sizes, weights)) / sum(weights[:len(sizes)])
        mean_s = 2 * 3600.0 * 1.6487  # exp(sigma^2/2), sigma 1
        rate = self.load * len(self.names) / (mean_nodes * mean_s)
        if rate <= 0:
            return
        t0 = t = self.t
        while True:
            t += self.rng.expovariate(rate)
            if t0 + (t - t0) * self.ts >= horizon:
                return
            size = self.rng.choices(sizes, weights[:len(sizes)])[0]
            dur = min(48 * 3600.0, self.rng.lognormvariate(0.0, 1.0) * 7200.0)
            pinned = tuple(self.rng.sample(self.names, size)) if self.rng.random() < self.pinned_share else ()
            self.at(t0 + (t - t0) * self.ts, "arrive", size, dur * self.ts, pinned)

    def _on_arrive(self, size: int, dur: float, pinned: tuple, uid: int | None = None) -> None:
        if uid is None:
            uid = 1000 + self.user_rng.choices(range(USERS), self.user_weights)[0]
        j = Job(next(self.next_job), size, dur, self.now(), pinned, uid=uid)
        self.jobs[j.id] = j
        self.queue.append(j)
        self.schedule()

    def schedule(self) -> None:
        """First fit in queue order (Slurm's backfill, without reservations); a pinned job that
        waited a day is given up by its user."""
        if not self.queue:
            return
        free = [n for n in self.names
                if n not in self.running and n not in self.completing and self.slurm.nodes[n].in_service]
        for j in list(self.queue):
            if j.pinned and self.now() - j.submit > 86400.0 * self.ts:
                self.queue.remove(j)
                self.stats.jobs["gave_up"] += 1
                continue
            if j.pinned:
                if not all(n in free for n in j.pinned):
                    continue
                chosen = list(j.pinned)
            elif len(free) >= j.size:
                chosen = free[:j.size] if self.placement == "lowest" else self.rng.sample(free, j.size)
            else:
                continue
            self.queue.remove(j)
            if self._start(j, chosen):
                free = [n for n in free if n not in chosen]
            else:
                free = [n for n in free if self.slurm.nodes[n].in_service and n not in self.running]

    def _start(self, j: Job, chosen: list[str]) -> bool:
        env = {"SLURM_JOB_ID": str(j.id), "SLURM_JOB_GPUS": ",".join(map(str, range(self.gpus)))}
        failed = False
        for name in chosen:
            self.preempt_canary(name)  # a canary job gives way at once (docs/canary.md, preemption)
            self._next_prolog(name, stopped=None)
            bad = False
            if self._attention(name, "prolog"):  # skipped: the same verdict (sim.py), the hook runs all the same
                mark = len(self.slurm.events)
                out = self._gpuhc(name, "prolog", env)
                self._after(mark)
                bad = out.exit_code != 0 and not self.never_fail
            if self.hook_killed(name, "prolog") or bad:  # slurmd killed it: a failure, whatever gpuhc judged
                failed = True
                self.stats.prolog_stops.append((self.now(), name))
                self._next_prolog(name, stopped=True)
        if failed:  # Slurm requeues the job; nodes whose prolog failed are drained
            self.stats.jobs["requeued"] += 1
            self.queue.insert(0, j)
            return False
        j.nodes, j.start = tuple(chosen), self.now()
        self.stats.jobs["started"] += 1
        for name in chosen:
            self.running[name] = j.id
            self.slurm.nodes[name].base = "ALLOCATED"
            for f in self.nodes[name].hardware():
                if f.hurts(j.size):
                    self.stats.escapes.append((self.now(), j.id, name, f.cls.name, f.in_job is not None))
            self._next_prolog(name, stopped=False)
        # a bad link on one of its nodes: the job's first collective over it stalls
        link = next((f for name in chosen for f in self.nodes[name].hardware()
                     if f.cls.hangs_jobs and f.hurts(j.size)), None)
        if link is not None:
            self.at(self.now() + link.strength["stall_at_s"] * self.ts, "stall", j.id, link.id)
        j.end_event = self.at(self.now() + j.duration, "end", j.id)
        return True

    def _next_prolog(self, name: str, stopped: bool | None) -> None:
        """Settle the in-job faults of ``name`` waiting for the node's next job: stopped when its
        prolog failed or the node left service first; not stopped when a job started on it
        with the fault still there."""
        pend = self.pending_next_prolog.get(name)
        if not pend:
            return
        keep = []
        for i in pend:
            f = self.faults[self.stats.in_job[i][0]]
            if not f.active:
                self.stats.in_job[i][2] = "repaired before the next job"
            elif stopped is True:
                self.stats.in_job[i][2] = "stopped"
            elif stopped is False:
                self.stats.in_job[i][2] = "escaped"
            else:
                keep.append(i)
        self.pending_next_prolog[name] = keep

    def _on_stall(self, jid: int, fid: int) -> None:
        """A job on a bad link reaches its first collective over it, if both are still there."""
        j, f = self.jobs[jid], self.faults[fid]
        if f.active and j.end is None and self.running.get(f.node) == jid:
            self.hang(jid, f)

    def hang(self, jid: int, f: F.Fault) -> None:
        """A collective hangs with no Xid: every rank waits until NCCL's watchdog ends the job.
        A bad link's every hang after its first is its repeat: what finding it sooner saves."""
        j = self.jobs[jid]
        if j.hung or j.start is None or not f.hurts(j.size):
            return
        j.hung = True
        self.stats.jobs["hung"] += 1
        repeat = f.cls.hangs_jobs and any(h[1] == f.id for h in self.stats.hangs)
        self.stats.hangs.append((self.now(), f.id, jid, j.uid, j.nodes))
        why = f"hang (repeat, {f.cls.name})" if repeat else "hang (NCCL timeout)"
        self.stats.lost_gpu_s[why] += F.NCCL_TIMEOUT_S * self.ts * j.size * self.gpus
        self.at(self.now() + F.NCCL_TIMEOUT_S * self.ts, "watchdog", jid, f.id, repeat)
        self.users_report(j)
        for name in j.nodes:  # what its GPUs do changed: the health check reads it at its next slot
            self.nodes[name].version += 1
            self._watch(name)

    def _on_watchdog(self, jid: int, fid: int, repeat: bool = False) -> None:
        f = self.faults[fid]
        if f.active and not f.cls.hangs_jobs:  # a one-off hang ends with its job; a bad link stays
            f.end, f.how = self.now(), "the job ended"
            self.nodes[f.node].faults.remove(f)
            self.nodes[f.node].version += 1
        self.end_job(jid, failed=True, why=f.cls.name, lost_as=f"hang (repeat, {f.cls.name})" if repeat else None)

    def _on_end(self, jid: int) -> None:
        self.end_job(jid, failed=False)

    def end_job(self, jid: int, failed: bool, why: str = "", lost_as: str | None = None) -> None:
        """``lost_as``: the lost GPU-seconds' key of a killed job's work since its checkpoint
        (default: by ``why``)."""
        j = self.jobs[jid]
        if j.start is None or all(self.running.get(n) != jid for n in j.nodes):
            return
        self.stats.jobs["killed" if failed else "done"] += 1
        j.end = self.now()
        if failed:
            ran = (self.now() - j.start) - (F.NCCL_TIMEOUT_S * self.ts if j.hung else 0.0)
            self.stats.lost_gpu_s[lost_as or f"work since checkpoint ({why})"] += (
                min(max(ran, 0.0), CHECKPOINT_S * self.ts) * j.size * self.gpus)
        for name in j.nodes:
            self.running.pop(name, None)
            if j.hung:
                self.nodes[name].version += 1  # its GPUs no longer wait in the hang
            row = self.slurm.nodes[name]
            row.base = "IDLE" if row.base == "ALLOCATED" else row.base
            node = self.nodes[name]
            if self.noise_on and not node.off:
                for kind in N.KINDS:
                    trig = kind.trigger == "job-end" or (kind.trigger == "job-kill" and failed)
                    if trig and self.noise_rng.random() < kind.share:
                        self._on_noise(kind.name, name)
            gone_at = max((ep[2] for ep in node.noise if ep[1].trigger == "job-end"), default=None)
            if gone_at is not None:
                # The job's processes are still exiting (the noise's teardown lag): Slurm keeps
                # the node COMPLETING and runs the epilog only once they are gone
                # (docs/campaign.md, "Noise").
                self.completing.add(name)
                row.flags.add("COMPLETING")
                self.at(gone_at, "teardown_done", name, jid, failed)
                continue
            self._epilog(name, jid, failed)
        self.schedule()

    def _on_teardown_done(self, name: str, jid: int, failed: bool) -> None:
        for ep in [ep for ep in self.nodes[name].noise if ep[1].trigger == "job-end"]:
            self._on_noise_end(name, ep[0])
        self.completing.discard(name)
        self.slurm.nodes[name].flags.discard("COMPLETING")
        self._epilog(name, jid, failed)
        self.schedule()

    def _epilog(self, name: str, jid: int, failed: bool) -> None:
        """The job's epilog on ``name``, once Slurm has seen its processes gone."""
        env = {"SLURM_JOB_ID": str(jid), "SLURM_JOB_GPUS": ",".join(map(str, range(self.gpus))),
               "SLURM_JOB_EXIT_CODE": "256" if failed else "0"}
        node, row = self.nodes[name], self.slurm.nodes[name]
        app = [f for f in node.faults if f.cls.app]
        if self._attention(name, "epilog"):
            mark = len(self.slurm.events)
            self._gpuhc(name, "epilog", env)
            self._after(mark)
        self.hook_killed(name, "epilog")
        for f in app:  # the job that made it is gone; its Xid lines stay in the kernel log
            self._repair(node, f, "job ended")
        self.canary_epilog_slice(name)  # the site's epilog: `gpuhc canary run --epilog --if-due`
        if "REBOOT_REQUESTED" in row.flags:
            self.at(self.now() + 10.0 * self.ts, "reboot_start", name)
        self._watch(name)
