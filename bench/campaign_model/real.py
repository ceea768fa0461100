"""The real campaign (docs/campaign.md, "Trusting the model"): the model's schedule of faults and
jobs, played on a real slurmctld with one slurmd per node, gpuhc deployed as README says.

What is real: Slurm (drain, reason, resume, reboot through RebootProgram, the prolog and epilog
slurmd runs before and after every job, job start, requeue on a failed prolog), `sbatch` jobs (a
`sleep` of the job's compressed length, pinned ones with `-w`), `scancel` of a job its node's
fault ends, and every gpuhc run (the installed shims and wrappers, tests/helpers/slurm_cluster.py, the
boot unit's retest). What stands in: each node's GPUs replay the model's scenario file for that
node (per-host `sources: nvml_scenario`, written the same way, bench/campaign_model/node.py); the
GPU reset command is a script that asks this harness, which waits the compressed reset time and
repairs the node's fault with the model's own dice; a rebooting machine's time off, likewise
(real_boot.py); the health check is started by this harness (through the same wrapper slurmd
would run) on the model's cadence, compressed, because slurmd's HealthCheckInterval cannot be
phased per node and at 16 nodes would run all of them every interval on a busy 2-core box.

The dice: faults, clear times and job arrivals are the model's draw on the same seed (`faults.
draw` and the model's job stream, through the model run itself); whether a reset repaired a fault
is the model's outcome for that fault (its first reset while the fault is active). Each job is
pinned to the nodes the model ran it on (Slurm decides when it starts, and its prolog may stop
it), so a fault lands in the same job; an application fault lands on the model's node when that
node runs a job here, else on another busy node.

Times are wall seconds from the start; the model runs with ``time_scale = 1/compression`` so its
schedule is the same in the same seconds (sim.Campaign's ``time_scale``).
"""

from __future__ import annotations

import heapq
import os
import random
import re
import time
from pathlib import Path

from gpuhc.slurm.policy.reason import parse_reason

from . import faults as F
from .node import Node, _epoch
from .real_boot import Reboots, ask_script
from .real_record import Record
from .sim import T0, Campaign

COMPRESSION = 60.0  # one wall second stands for a minute of the month
# The harness runs a node's health check while it has a fault, gpuhc's reason, or a repaired
# fault's lines less than an hour old (compressed): the model runs every check whose inputs
# changed, which tests/bench/campaign_model/test_faults.py holds equal to running every check; a
# node with none of these has nothing gpuhc could act on.
OLD_LINES_WATCH_S = 3600.0
# slurmctld's RPCs by message type (sdiag), counted over the campaign: the ones gpuhc sends.
GPUHC_RPCS = ("REQUEST_UPDATE_NODE", "REQUEST_REBOOT_NODES", "REQUEST_NODE_INFO", "REQUEST_NODE_INFO_SINGLE")
POLL_S = 0.25  # how often Slurm's node table and queue are read


def compressed(ts: float) -> dict:
    """gpuhc's settings in seconds, times ``ts``, for both sides; everything else of gpuhc counts
    runs (resume_after, reset attempts) and stays as shipped. The breaker's jitter and settle
    sleeps are 0 (the model passes them on its clock, a real run sleeps them: both 0 keeps the
    sides equal) and its cap is the whole cluster (16 nodes under the shipped 10 % would cap at
    one drained node; the breaker has its own real-Slurm tests). reboot_timeout_s has a floor of
    60 s in the schema, longer than a compressed reboot and its retest take on both sides."""
    return {"active": {"enabled": False},  # the real side's nodes have no GPU for the worker
            "slurm": {"cooldown_s": 600.0 * ts, "max_cooldown_s": 21600.0 * ts, "flap_window_s": 21600.0 * ts,
                      "breaker": {"jitter_s": 0.0, "settle_s": 0.0, "max_drained": 1 << 20,
                                  "max_drained_percent": None},
                      "remediation": {"reboot_timeout_s": max(60.0, 1800.0 * ts)}}}


class RealCampaign:
    """Plays ``model``'s schedule on ``cluster`` (a started tests/slurm_cluster.SlurmCluster whose
    nodes are the model's names and whose per-host scenarios are ``scenario_of(name)``)."""

    def __init__(self, model: Campaign, cluster, workdir: Path, seconds: float, reset_s: float, boots: Path):
        self.model, self.c, self.seconds, self.reset_s = model, cluster, seconds, reset_s
        self.boots = Reboots(self, boots, model.reboot_s)  # real_boot.py: the machines' reboots
        self.names = list(model.names)
        self.nodes = {n: Node(n, workdir / "nodes") for n in self.names}
        self.lines_cache: dict = {}
        self.rng = random.Random(model.seed)  # only where Slurm's placement leaves the model's choice open
        self.rec = Record()
        self.t0 = 0.0
        self.events: list = []
        self.jobs: dict[int, dict] = {}  # model job id -> {"real": Slurm's id, "started", "killed", "nodes"}
        self.running: dict[str, int] = {}  # node -> model job id
        self.slurm_nodes: dict = {}
        self.hc: dict[str, tuple] = {}  # node -> (Popen, launched) of the health check running
        self.hc_next: dict[str, float] = {}
        self.hc_log: list = []  # (launched, node)
        self.resets_dir = workdir / "resets"
        self.decisions = workdir / "gpuhc-decisions.log"  # real_run.deployment's slurm.log_file
        self.resets: dict[str, float] = {}  # request file -> when it came
        self.reset_count: dict[str, int] = {}  # node -> resets answered (the k-th plays the model's k-th)
        self.reset_log: list = []  # (node, start, end)
        self.fault_of: dict[int, F.Fault] = {}  # model fault id -> this side's fault
        # Under the cluster's directory: a release in a chroot sees only that (tests/helpers/slurm_release.py).
        self.started_log = cluster.workdir / "jobs-started.log"

    # ------------------------------------------------------------------ files the deployment needs

    @staticmethod
    def scenario_of(workdir: Path, name: str) -> Path:
        return workdir / "nodes" / name / "live.yaml"

    @staticmethod
    def reset_command(workdir: Path) -> list[str]:
        script = workdir / "campaign-gpu-reset"
        ask_script(script, "GPU reset", workdir / "resets", '"$SLURMD_NODENAME"', 600)
        return [str(script), "-r", "-i", "{gpu}"]

    @staticmethod
    def prepare(workdir: Path, names: list[str]) -> None:
        """Every node's scenario, healthy, before the cluster starts (slurmd's first runs read them)."""
        for n in names:
            node = Node(n, workdir / "nodes")
            RealCampaign._publish(node, time.time(), {}, RealCampaign.scenario_of(workdir, n))

    @staticmethod
    def _publish(node: Node, now: float, cache: dict, live: Path) -> None:
        """Node.write, then an atomic swap: a run reading the file never sees half of it."""
        node.write(now, cache)
        os.replace(node.scenario, live)

    # ------------------------------------------------------------------ the loop

    def now(self) -> float:
        """Wall time: the faults' stamps and ends (Campaign._repair's bookkeeping) are epochs."""
        return time.time()

    def rel(self) -> float:
        return time.time() - self.t0

    def run(self) -> Record:
        m = self.model
        for f in m.faults:
            heapq.heappush(self.events, (f.start - T0, 0, "fault", f.id))
        for j in sorted(m.jobs.values(), key=lambda j: j.submit):
            heapq.heappush(self.events, (j.submit - T0, 1, "arrive", j.id))
        rpcs0 = self._sdiag()
        self.t0 = time.time()
        last_poll = -POLL_S
        while self.rel() < self.seconds:
            while self.events and self.events[0][0] <= self.rel():
                _, _, kind, arg = heapq.heappop(self.events)
                getattr(self, "_on_" + kind)(arg)
            if self.rel() - last_poll >= POLL_S:
                last_poll = self.rel()
                self._poll()
                self.write_all()  # the "now" line moves on (faults and repairs write at once)
            self._resets()
            self.boots.tick()
            self._health_checks()
            time.sleep(0.05)
        self._poll()
        for p, _ in self.hc.values():
            p.wait(timeout=120)
        self._prologs_and_escapes()
        for fid, f in sorted(self.fault_of.items()):
            g = F.Fault(fid, f.cls, f.node, f.start - self.t0, f.permanent, None if f.end is None else f.end - self.t0)
            g.in_job, g.how = f.in_job, getattr(f, "how", None)
            self.rec.faults.append(g)
        self.rec.notes += [f"reboot of {n}: asked at {a}s, machine off at {o}s, up at {u}s"
                           for n, a, o, u in self.boots.log]
        self.rec.runs = len(self._calls())
        rpcs1 = self._sdiag()
        self.rec.rpcs = {k: rpcs1.get(k, 0) - rpcs0.get(k, 0) for k in GPUHC_RPCS if rpcs1.get(k, 0) - rpcs0.get(k, 0)}
        self.rec.jobs = {"submitted": len(self.jobs), "started": sum(1 for j in self.jobs.values() if j["started"]),
                         "killed": sum(1 for j in self.jobs.values() if j["killed"])}
        return self.rec

    def write_all(self) -> None:
        for n, node in self.nodes.items():
            self._publish(node, time.time(), self.lines_cache, self.scenario_of(node.dir.parent.parent, n))

    # ------------------------------------------------------------------ faults and repairs

    def _on_fault(self, fid: int) -> None:
        mf = self.model.faults[fid]
        name = mf.node
        if mf.cls.app:  # inside a job: the model's node if it runs one here, else another busy node
            busy = sorted(self.running)
            if not busy:
                self.rec.notes.append(f"{mf.cls.name} at {self.rel():.1f}s dropped: no job running here")
                return
            name = name if name in busy else self.rng.choice(busy)
        f = F.Fault(fid, mf.cls, name, time.time(), mf.permanent, stamp=time.time())
        f.in_job = str(self.running[name]) if name in self.running else None
        self.fault_of[fid] = f
        self.nodes[name].faults.append(f)
        self.write_all()  # before the job is killed: its epilog must find the fault's lines
        if mf.clears_at is not None:
            heapq.heappush(self.events, (mf.clears_at - T0, 2, "clear", fid))
        if f.in_job is not None and (mf.cls.kills_job or mf.cls.app):
            self._kill(int(f.in_job))

    def _on_clear(self, fid: int) -> None:
        f = self.fault_of.get(fid)
        if f is not None and f.active:
            self.repair(f, "cleared by itself")

    def repair(self, f: F.Fault, how: str, keep_lines: bool = True) -> None:
        Campaign._repair(self, self.nodes[f.node], f, how, keep_lines)  # the model's own bookkeeping, on wall time
        self.write_all()

    def _resets(self) -> None:
        """Answer the reset stand-in: after reset_s, the model's dice (the faults the model's
        k-th reset of this node repaired are repaired by its k-th reset here)."""
        for req in self.resets_dir.glob("req.*"):
            came = self.resets.setdefault(req.name, time.time())
            if time.time() - came < self.reset_s:
                continue
            node = req.name.split(".")[1]
            k = self.reset_count.get(node, 0)
            self.reset_count[node] = k + 1
            outcomes = self.model.reset_outcomes.get(node, [])
            healed = set(outcomes[k]) if k < len(outcomes) else set()
            for f in list(self.nodes[node].hardware()):
                if f.id in healed:
                    self.repair(f, "reset")
                else:
                    f.stamp = time.time()  # it shows again after the reset, as in the model
            self.write_all()
            self.reset_log.append((node, came - self.t0, self.rel()))
            (self.resets_dir / ("done." + req.name[4:])).touch()
            req.unlink()

    # ------------------------------------------------------------------ jobs

    def _on_arrive(self, jid: int) -> None:
        j = self.model.jobs[jid]
        # The job's own record that it ran on each of its nodes: one task per node, which Slurm
        # launches only on a node whose prolog passed (the batch script alone runs on the
        # first node, even while another node's prolog is failing).
        # The chroot's own srun: the job's PATH starts with the host's way into the chroot.
        record = (f"PATH=/usr/bin:/bin:$PATH srun -N {j.size} --ntasks-per-node=1 sh -c "
                  f"'echo $(date +%s.%N) $SLURM_JOB_ID $SLURMD_NODENAME >> {self.started_log}'; ")
        argv = ["--exclusive", "-N", str(j.size), "-o", "/dev/null", "-J", f"campaign-{jid}",
                "--wrap", record + f"exec sleep {max(1, round(j.duration))}"]
        if j.pinned:  # only what its user pinned: Slurm places the others, and their prologs stop them in Slurm
            argv = ["-w", ",".join(j.pinned), *argv]
        self.jobs[jid] = {"real": self.c.sbatch(*argv), "started": False, "killed": False, "nodes": ()}

    def _sdiag(self) -> dict[str, int]:
        """slurmctld's RPC counts by message type (`sdiag`'s "Remote Procedure Call statistics by
        message type": `REQUEST_UPDATE_NODE ( 3002) count:5 ave_time:...`). They include the
        harness's own reads (squeue, sinfo), so node reads are an upper bound of gpuhc's."""
        cp = self.c.run(["sdiag"], check=False)
        out, by_type = {}, False
        for line in cp.stdout.splitlines():
            if "by message type" in line:
                by_type = True
            elif "by user" in line:
                by_type = False
            elif by_type and (m := re.match(r"\s*(\w+)\s*\(\s*\d+\)\s*count:(\d+)", line)):
                out[m.group(1)] = int(m.group(2))
        return out

    def _kill(self, jid: int) -> None:
        self.c.run(["scancel", str(self.jobs[jid]["real"])], check=False)
        self.jobs[jid]["killed"] = True

    # ------------------------------------------------------------------ watching Slurm

    def _poll(self) -> None:
        import hostlist

        decided = self._last_runs()
        for n in self.c.nodes_now():
            if n.name not in self.nodes:
                continue
            out = self._out(n)
            was = self.slurm_nodes.get(n.name)
            self.boots.seen(n.name, n.flags, n.name in self.running, decided.get(n.name))
            if was is not None and out != self._out(was):
                t = decided.get(n.name, self.rel())
                self.rec.events.append((t, n.name, "drain" if out else "resume", n.reason if out else None))
                self.rec.lag.append(self.rel() - t)
            self.slurm_nodes[n.name] = n
        real_to_model = {v["real"]: k for k, v in self.jobs.items()}
        self.running = {}
        cp = self.c.run(["squeue", "-h", "-o", "%i|%T|%N"], check=False)
        for line in cp.stdout.splitlines():
            jid, state, nodes = (line.split("|") + ["", ""])[:3]
            mid = real_to_model.get(int(jid)) if jid.isdigit() else None
            if mid is None or state != "RUNNING" or not nodes:
                continue
            self.jobs[mid]["nodes"] = tuple(hostlist.expand_hostlist(nodes))
            for name in self.jobs[mid]["nodes"]:
                self.running[name] = mid

    @staticmethod
    def _out(n) -> bool:
        """Out of service in Slurm's table: drained, down, or a reboot asked or under way."""
        return n.drained or n.down or bool({"REBOOT_REQUESTED", "REBOOT_ISSUED"} & n.flags)

    def _calls(self) -> list[tuple[float, str, str, str]]:
        """The wrappers' record of every run slurmd or this harness started: (t, kind, node, job)."""
        p = self.c.log_dir / "calls.log"
        out = []
        for line in (p.read_text().splitlines() if p.exists() else ()):
            parts = line.split()
            if len(parts) >= 3 and parts[1] in ("healthcheck", "prolog", "epilog", "retest"):
                if parts[1] == "retest" and float(parts[0]) < self.t0:
                    continue  # the machines' first boot, before the campaign
                out.append((float(parts[0]) - self.t0, parts[1], parts[2], parts[3] if len(parts) > 3 else ""))
        return out

    def _last_runs(self) -> dict[str, float]:
        """Per node, when the run that made Slurm's latest change decided it: the start of the
        node's latest run, plus the reset stand-in's wait when a reset ran in it. The model's
        clock stands still while gpuhc runs; a real run takes a second or more on a busy box
        (reported apart as ``lag``)."""
        last: dict[str, float] = {}
        # A health check started when this harness launched it (a process start on a busy box
        # can take half a second before the wrapper writes its record); a prolog or epilog when
        # slurmd's wrapper recorded it.
        runs = [(t, node) for t, kind, node, _ in self._calls() if kind != "healthcheck"] + self.hc_log
        for t, node in runs:
            last[node] = max(last.get(node, t), t)
        for node, start, end in self.reset_log:
            if node in last and start >= last[node]:
                last[node] += end - start
        return last

    def _prologs_and_escapes(self) -> None:
        """A job whose task ran on a node whose prolog for it ran while a hardware fault was
        active there is an escape: by the prolog's own record and the task's."""
        lines = self.started_log.read_text().splitlines() if self.started_log.exists() else []
        ran = {tuple(ln.split()[1:3]) for ln in lines if len(ln.split()) == 3}  # (job, node)
        for v in self.jobs.values():
            v["started"] = any(job == str(v["real"]) for job, _ in ran)
        started = {str(v["real"]): k for k, v in self.jobs.items() if v["started"]}
        # gpuhc's own word that its prolog failed a job (gpuhc/slurm/flows/entry.py)
        failed = set(re.findall(r"gpuhc prolog (\S+): job (\d+): failing the prolog",
                                self.decisions.read_text() if self.decisions.exists() else ""))
        begun: dict[str, tuple[float, set]] = {}  # job -> (its first prolog that let it run, its nodes)
        for t, kind, node, job in self._calls():
            if kind == "prolog" and (node, job) in failed:
                self.rec.prolog_stops.append((t, node))
            if kind != "prolog" or (job, node) not in ran:
                continue
            first, nodes = begun.setdefault(job, (t, set()))
            begun[job] = (min(first, t), nodes | {node})
            for f in self.fault_of.values():
                if f.node != node or f.cls.app or not (f.start - self.t0 <= t and (f.end is None or f.end - self.t0 > t)):
                    continue
                self.rec.escapes.append((t, started[job], node, f.cls.name, f.in_job is not None))
        self.rec.job_starts = sorted((t, tuple(sorted(nodes))) for t, nodes in begun.values())

    # ------------------------------------------------------------------ the health check's cadence

    def _attention(self, name: str) -> bool:
        """The model's rule (sim.Campaign._attention) on what Slurm shows here."""
        node, row = self.nodes[name], self.slurm_nodes.get(name)
        out = row is not None and self._out(row)
        mine = parse_reason(row.reason) if out else None
        if mine is not None and mine.retired:
            return False
        node.old_lines = [ln for ln in node.old_lines
                          if time.time() - _epoch(ln[:19]) < OLD_LINES_WATCH_S * self.model.ts]
        return bool(node.faults or node.old_lines or mine is not None or out)

    def _health_checks(self) -> None:
        every = 300.0 * self.model.ts
        for i, name in enumerate(self.names):
            proc = self.hc.get(name)
            if proc is not None:
                if proc[0].poll() is None:
                    continue
                del self.hc[name]
            if name not in self.hc_next:
                if not self._attention(name):
                    continue
                phase = i / len(self.names) * every  # HealthCheckNodeState=CYCLE spreads the nodes
                self.hc_next[name] = phase + ((self.rel() - phase) // every + 1) * every
            if self.rel() >= self.hc_next[name]:
                late = self.rel() - self.hc_next[name]
                if late > 1.0:
                    self.rec.notes.append(f"{name}: health check {late:.1f}s late (the box is busy)")
                del self.hc_next[name]
                row = self.slurm_nodes.get(name)
                if self.boots.off(name) or (row is not None and "REBOOT_ISSUED" in row.flags):
                    continue  # rebooting: no slurmd to run it (the model skips it too)
                launched = self.rel()
                p = self.c.popen([str(self.c.workdir / "bin" / "healthcheck")], env={"SLURMD_NODENAME": name})
                self.hc[name] = (p, launched)
                self.hc_log.append((launched, name))

