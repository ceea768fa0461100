"""Switch-level incidents: several nodes under one leaf switch failing the same check together
are one suspect switch, not N unrelated node failures. Pure, apart from reading a topology file.

Why: a leaf switch that reboots, or a bad uplink, makes every node below it fail the same
check (IB link down, a fabric probe) within minutes. Reported node by node, that is N tickets
and N RMAs for one faulty switch. :func:`group_by_switch` takes the failures and Slurm's
topology (``scontrol show topology``, or topology.conf) and returns the incidents plus the
failures that belong to none. It does not decide drains: each node was (or was not) drained by
the usual policy and its circuit breaker, which is what stops a switch outage from draining a
whole rack blindly.

Grouping rule: :mod:`gpuhc.slurm.policy.shared_cause` (the lemon rule uses the same one, so a switch
incident listed here is one whose faults count for no node's lemon record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from gpuhc.slurm.policy.reason import parse_reason
from gpuhc.slurm.report.build import compress
from gpuhc.slurm.policy.shared_cause import group_runs
from gpuhc.config.topology import parse_topology_conf, read_topology_conf  # noqa: F401 (the fleet's readers)


@dataclass(frozen=True)
class Failure:
    node: str
    check: str
    time: float
    detail: str = ""


@dataclass
class Incident:
    switch: str
    check: str
    failures: list[Failure] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({f.node for f in self.failures})

    @property
    def first(self) -> float:
        return min(f.time for f in self.failures)

    @property
    def last(self) -> float:
        return max(f.time for f in self.failures)

    @property
    def summary(self) -> str:
        return (f"suspect switch {self.switch}: {len(self.nodes)} nodes under it failed {self.check} within "
                f"{self.last - self.first:.0f}s ({compress(self.nodes)})")

    def to_dict(self) -> dict:
        return {"kind": "suspect_switch", "switch": self.switch, "check": self.check, "nodes": self.nodes,
                "first": self.first, "last": self.last, "summary": self.summary,
                "failures": [{"node": f.node, "time": f.time, "detail": f.detail} for f in self.failures]}


def group_by_switch(failures: Iterable[Failure], leaf_of: dict[str, str], min_nodes: int = 3,
                    window_s: float = 1800.0) -> tuple[list[Incident], list[Failure]]:
    """(incidents, failures in no incident), by the shared-cause rule
    (:func:`gpuhc.slurm.policy.shared_cause.group_runs`). Nodes the topology does not place are never grouped."""
    runs, rest = group_runs(failures, leaf_of, lambda f: f.node, lambda f: f.check, lambda f: f.time,
                            min_nodes, window_s)
    incidents = [Incident(leaf, check, members) for leaf, check, members in runs]
    return sorted(incidents, key=lambda x: (x.first, x.switch)), sorted(rest, key=lambda f: (f.time, f.node))


def failures_from_nodes(nodes: Iterable) -> list[Failure]:
    """Failures from Slurm's node list: every node out of service with a gpuhc reason, its check
    from the reason, its time from the reason's timestamp. Retired nodes are old news, left out."""
    out = []
    for n in nodes:
        mine = parse_reason(n.reason)
        if mine is None or mine.retired or not n.unavailable or n.reason_time is None:
            continue
        out.append(Failure(n.name, mine.check, n.reason_time, mine.body))
    return out


def merge_failures(held: Iterable[Failure], logged: Iterable[Failure]) -> list[Failure]:
    """Slurm's held nodes plus the logged failures, one per node and check (the earliest)."""
    first: dict[tuple[str, str], Failure] = {}
    for f in [*held, *logged]:
        key = (f.node, f.check)
        if key not in first or f.time < first[key].time:
            first[key] = f
    return sorted(first.values(), key=lambda f: (f.time, f.node))
