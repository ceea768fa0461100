"""Job-aware suspects: nodes whose jobs end badly more often than their partition's. Pure, except
:func:`sacct_argv` naming the one command it reads.

A flaky node rarely fails a health check: it crashes the jobs that run on it (NCCL timeouts,
segfaults in the driver, a node that drops off mid-job). Slurm's accounting remembers how every
job ended and on which nodes, so each finished job is attributed to each of its nodes, and every
node's bad-end rate is compared with the rest of its partition's.

The test (docs/repair.md, "Suspects"): for node i in partition P, with a_i bad of n_i jobs and
B bad of N jobs over all of P's nodes, the one-sided **Fisher exact test** asks how likely a
share at least this bad is when bad ends fall on nodes at random: the hypergeometric tail
P(X >= a_i), X ~ Hypergeometric(N, B, n_i). A partition runs many nodes, so the threshold is
Bonferroni's ``alpha / m`` (m: the partition's nodes with jobs), and a suspect also needs
``min_bad_jobs`` bad jobs and a rate ``min_ratio`` times the rest's: with a million jobs a tiny
excess is "significant" and still not worth a probe.

A job on several nodes counts against all of them: accounting cannot tell which node broke it.
Bad ends that are the user's fault (a FAILED script) fall evenly on every node and so cancel
out of the comparison; a node that keeps being in the wrong place does not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterable

from gpuhc.config.load import expand
from gpuhc.slurm.read.nodes import parse_slurm_time

# End states that say nothing about a node: the user or the scheduler ended the job.
NEUTRAL = ("CANCELLED", "PREEMPTED", "REQUEUED", "RESIZING", "REVOKED", "DEADLINE")
RUNNING = ("PENDING", "RUNNING", "SUSPENDED", "REQUEUE_FED", "REQUEUE_HOLD", "COMPLETING", "CONFIGURING",
           "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT")
SACCT_FORMAT = "JobID,State,Partition,NodeList,End"
MAX_EVIDENCE_JOBS = 10


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str  # first word of sacct's State ("CANCELLED by 0" -> CANCELLED)
    partition: str
    nodes: tuple[str, ...]
    end: float | None


def sacct_argv(start: float, end: float) -> list[str]:
    fmt = "%Y-%m-%dT%H:%M:%S"
    return ["sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
            "--starttime", time.strftime(fmt, time.localtime(start)),
            "--endtime", time.strftime(fmt, time.localtime(end)), "--format", SACCT_FORMAT]


def parse_sacct(text: str) -> tuple[list[Job], int]:
    """``sacct -a -X -n -P -o JobID,State,Partition,NodeList,End``: the jobs, and how many
    lines did not parse (a node list that does not expand, a short line)."""
    jobs, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 5:
            bad += 1
            continue
        jid, state, part, nodelist, end = (p.strip() for p in parts)
        if not nodelist or nodelist.lower().startswith("none"):
            continue  # never ran
        try:
            nodes = tuple(expand(nodelist))
        except ValueError:
            bad += 1
            continue
        jobs.append(Job(jid, (state.split() or ["?"])[0].upper(), part, nodes, parse_slurm_time(end)))
    return jobs, bad


def hypergeom_sf(a: int, total: int, bad: int, draws: int) -> float:
    """P(X >= a) for X ~ Hypergeometric(total, bad, draws): Fisher's one-sided p-value. Summed
    in log space (lgamma), so a partition of a million job-node pairs costs microseconds."""
    lo, hi = max(0, draws - (total - bad)), min(draws, bad)
    if a <= lo:
        return 1.0
    if a > hi:
        return 0.0

    def log_c(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    denom = log_c(total, draws)
    logs = [log_c(bad, k) + log_c(total - bad, draws - k) - denom for k in range(a, hi + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


@dataclass
class NodeRecord:
    node: str
    partition: str
    jobs: int = 0
    bad: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    bad_jobs: list[str] = field(default_factory=list)
    p_value: float = 1.0
    rest_rate: float = 0.0
    threshold: float = 0.0
    suspect: bool = False

    @property
    def rate(self) -> float:
        return self.bad / self.jobs if self.jobs else 0.0

    @property
    def ratio(self) -> float | None:
        return self.rate / self.rest_rate if self.rest_rate > 0 else None

    def to_dict(self) -> dict:
        return {"node": self.node, "partition": self.partition, "jobs": self.jobs, "bad": self.bad,
                "rate": self.rate, "partition_rest_rate": self.rest_rate, "ratio": self.ratio,
                "p_value": self.p_value, "threshold": self.threshold, "bad_by_state": dict(self.by_state),
                "bad_jobs": self.bad_jobs[:MAX_EVIDENCE_JOBS], "suspect": self.suspect}


@dataclass(frozen=True)
class Settings:
    alpha: float = 0.01
    min_bad_jobs: int = 3
    min_ratio: float = 1.5
    states: tuple[str, ...] = ("NODE_FAIL", "FAILED", "TIMEOUT")

    @classmethod
    def from_section(cls, s: dict) -> "Settings":
        return cls(float(s["alpha"]), int(s["min_bad_jobs"]), float(s["min_ratio"]),
                   tuple(str(x).upper() for x in s["states"]))


def judge(jobs: Iterable[Job], settings: Settings = Settings()) -> list[NodeRecord]:
    """Every node's record, per partition, suspects first (lowest p-value first)."""
    records: dict[tuple[str, str], NodeRecord] = {}
    for job in jobs:
        if job.state in NEUTRAL or job.state in RUNNING:
            continue
        is_bad = job.state in settings.states
        for node in job.nodes:
            rec = records.setdefault((job.partition, node), NodeRecord(node, job.partition))
            rec.jobs += 1
            if is_bad:
                rec.bad += 1
                rec.by_state[job.state] = rec.by_state.get(job.state, 0) + 1
                if len(rec.bad_jobs) < MAX_EVIDENCE_JOBS:
                    rec.bad_jobs.append(job.job_id)
    by_part: dict[str, list[NodeRecord]] = {}
    for rec in records.values():
        by_part.setdefault(rec.partition, []).append(rec)
    for recs in by_part.values():
        total, bad = sum(r.jobs for r in recs), sum(r.bad for r in recs)
        threshold = settings.alpha / len(recs)
        for r in recs:
            rest_jobs = total - r.jobs
            r.rest_rate = (bad - r.bad) / rest_jobs if rest_jobs else 0.0
            r.p_value = hypergeom_sf(r.bad, total, bad, r.jobs) if rest_jobs else 1.0
            r.threshold = threshold
            ratio_ok = r.rest_rate == 0 or r.rate >= settings.min_ratio * r.rest_rate
            r.suspect = (rest_jobs > 0 and r.bad >= settings.min_bad_jobs and ratio_ok and r.p_value < threshold)
    return sorted(records.values(), key=lambda r: (not r.suspect, r.p_value, r.partition, r.node))


def suspects(records: Iterable[NodeRecord]) -> list[str]:
    """Suspect node names, most suspicious first, each once."""
    return list(dict.fromkeys(r.node for r in records if r.suspect))
