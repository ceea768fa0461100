"""Switch-level incidents: several nodes under one leaf switch failing the same check together
are one suspect switch, not N unrelated node failures. Pure, apart from reading a topology file.

Why: a leaf switch that reboots, or a bad uplink, makes every node below it fail the same
check (IB link down, a fabric probe) within minutes. Reported node by node, that is N tickets
and N RMAs for one faulty switch. :func:`group_by_switch` takes the failures and Slurm's
topology (``scontrol show topology``, or topology.conf) and returns the incidents plus the
failures that belong to none. It does not decide drains: each node was (or was not) drained by
the usual policy and its circuit breaker, which is what stops a switch outage from draining a
whole rack blindly.

Grouping rule: failures of one check under one leaf, sorted by time; a run of failures whose
first and last are at most ``window_s`` apart and that covers at least ``min_nodes`` (K)
distinct nodes opens an incident, and later failures of that check under that leaf within
``window_s`` of the incident's last one join it (a switch that keeps flapping is still one
incident).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from gpuhc.slurm.reason import parse_reason
from gpuhc.slurm.report import compress
from gpuhc.topology_text import parse_topology
from gpuhc.untrusted import read_bounded

TOPOLOGY_LIMIT = 16 * 1024 * 1024


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


def parse_topology_conf(text: str) -> dict[str, str]:
    """topology.conf -> {node: leaf switch}: switches (or blocks) that list ``Nodes=``. Comments
    and ``\\`` line continuations are handled as Slurm does."""
    lines = []
    for raw in re.sub(r"\\\n", " ", text).splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return parse_topology("\n".join(lines))


def read_topology_conf(path: str) -> dict[str, str]:
    return parse_topology_conf(read_bounded(path, TOPOLOGY_LIMIT, "topology file").decode("utf-8", "replace"))


def group_by_switch(failures: Iterable[Failure], leaf_of: dict[str, str], min_nodes: int = 3,
                    window_s: float = 1800.0) -> tuple[list[Incident], list[Failure]]:
    """(incidents, failures in no incident). Nodes the topology does not place are never grouped."""
    if min_nodes < 2:
        raise ValueError("min_nodes must be at least 2: one node is a node failure, not a switch's")
    by_key: dict[tuple[str, str], list[Failure]] = {}
    rest: list[Failure] = []
    for f in failures:
        leaf = leaf_of.get(f.node)
        if leaf is None:
            rest.append(f)
        else:
            by_key.setdefault((leaf, f.check), []).append(f)
    incidents: list[Incident] = []
    for (leaf, check), group in sorted(by_key.items()):
        group.sort(key=lambda f: (f.time, f.node))
        i = 0
        while i < len(group):
            j = i
            while j + 1 < len(group) and group[j + 1].time - group[i].time <= window_s:
                j += 1
            if len({f.node for f in group[i:j + 1]}) >= min_nodes:
                inc = Incident(leaf, check, list(group[i:j + 1]))
                j += 1
                while j < len(group) and group[j].time - inc.last <= window_s:
                    inc.failures.append(group[j])
                    j += 1
                incidents.append(inc)
                i = j
            else:
                rest.append(group[i])
                i += 1
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
