"""Which nodes probe each other: grouping idle nodes, rotation, and the switch topology.

Rotation: nodes are taken oldest-probe first (never probed = oldest), and a node probed less
than ``period_h`` ago waits, so a cluster where only some nodes are idle at a time is still
covered: whoever was busy last time is first in line next time. ``max_nodes`` caps a sweep for
sites that would rather probe a slice each hour than the whole fleet at once.

Topology: when Slurm knows the switches (``scontrol show topology``: topology/tree leaf
switches, or topology/block blocks, read by :mod:`gpuhc.config.topology`), most groups stay
inside one leaf switch, so a slow group points at its own nodes and not at a spine link; a
share of groups (``cross_switch_fraction``) deliberately spans leaves to exercise the links
above them. The two kinds are judged apart
(``span`` ``leaf``/``cross``): cross-switch bandwidth is allowed to be lower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass
class Group:
    """One probe job: these nodes run one all-reduce sweep together."""

    id: str  # r<round>g<index>, unique within the sweep
    nodes: list[str]
    round: int = 0
    purpose: str = "probe"  # probe / isolate (suspect + known-good) / bisect / confirm (re-run)
    span: str = ""  # "leaf", "cross", or "" when the topology is unknown
    ranks_per_node: int = 1
    suspects: list[str] = field(default_factory=list)  # for follow-up rounds: who is under test
    job_id: str | None = None
    submit_error: str | None = None

    @property
    def shape(self) -> str:
        return f"{len(self.nodes)}x{self.ranks_per_node}"

    def to_dict(self) -> dict:
        # By hand rather than dataclasses.asdict (a deep copy): a sweep record holds hundreds.
        return {"id": self.id, "nodes": list(self.nodes), "round": self.round, "purpose": self.purpose,
                "span": self.span, "ranks_per_node": self.ranks_per_node, "suspects": list(self.suspects),
                "job_id": self.job_id, "submit_error": self.submit_error}

    @classmethod
    def from_dict(cls, d: dict) -> "Group":
        return cls(**{k: d[k] for k in _GROUP_FIELDS if k in d})


_GROUP_FIELDS = tuple(Group.__dataclass_fields__)


def group_id(round_no: int, index: int) -> str:
    return f"r{round_no}g{index:04d}"


# ---------------------------------------------------------------------------- probe planning


@dataclass
class Plan:
    groups: list[Group]
    waiting: list[str]  # idle, but probed within the period
    left_over: list[str]  # due, but no complete group could take them this time


def due_order(idle: Iterable[str], last_probed: dict[str, float], now: float, period_s: float,
              first: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(due nodes oldest-probe first, nodes that wait because they were probed recently).
    Nodes in ``first`` (suspects whose jobs keep ending badly) lead, and never wait."""
    first = set(first)
    due, waiting = [], []
    for node in sorted(set(idle)):
        last = last_probed.get(node)
        if last is not None and now - last < period_s and node not in first:
            waiting.append(node)
        else:
            due.append(node)
    due.sort(key=lambda n: (n not in first, last_probed.get(n, 0.0), n))
    return due, waiting


def plan_probe(
    idle: Iterable[str],
    last_probed: dict[str, float],
    now: float,
    group_size: int,
    ranks_per_node: int = 1,
    period_s: float = 0.0,
    max_nodes: int = 0,
    leaf_of: dict[str, str] | None = None,
    cross_fraction: float = 0.0,
    first: Iterable[str] = (),
) -> Plan:
    due, waiting = due_order(idle, last_probed, now, period_s, first)
    if max_nodes:
        cap = max(group_size, max_nodes - max_nodes % group_size)
        due, rest = due[:cap], due[cap:]
    else:
        rest = []
    leaf_of = {n: leaf_of[n] for n in due if leaf_of and n in leaf_of} if leaf_of else {}
    if leaf_of and len(set(leaf_of.values())) > 1:
        chunks, left = _plan_topology(due, leaf_of, group_size, cross_fraction)
    else:
        chunks = [("", due[i:i + group_size]) for i in range(0, len(due) - len(due) % group_size, group_size)]
        left = due[len(due) - len(due) % group_size:]
    groups = [Group(group_id(0, i), nodes, 0, "probe", span, ranks_per_node) for i, (span, nodes) in enumerate(chunks)]
    return Plan(groups, waiting, left + rest)


def _plan_topology(due: list[str], leaf_of: dict[str, str], size: int, cross_fraction: float) -> tuple[list, list[str]]:
    """Leaf-local groups first, a share of cross-leaf groups, leftovers pooled across leaves."""
    queues: dict[str, list[str]] = {}
    for node in due:  # due is priority ordered, and so is each leaf's queue
        queues.setdefault(leaf_of.get(node, "?"), []).append(node)
    total_groups = len(due) // size
    want_cross = int(round(total_groups * cross_fraction))
    chunks: list[tuple[str, list[str]]] = []
    # Cross-leaf groups take one node from each of the fullest leaves in turn.
    for _ in range(want_cross):
        group = _take_spread(queues, size)
        if group is None:
            break
        chunks.append(("cross", group))
    left: list[str] = []
    for leaf in sorted(queues):
        q = queues[leaf]
        full = len(q) - len(q) % size
        chunks.extend(("leaf", q[i:i + size]) for i in range(0, full, size))
        left.extend(q[full:])
    # What no leaf could fill still makes cross-leaf groups (if it spans leaves at all).
    left.sort(key=due.index)
    pooled: dict[str, list[str]] = {}
    for node in left:
        pooled.setdefault(leaf_of.get(node, "?"), []).append(node)
    leftover: list[str] = []
    while sum(map(len, pooled.values())) >= size:
        group = _take_spread(pooled, size)
        if group is None:
            break
        chunks.append(("cross", group))
    for q in pooled.values():
        leftover.extend(q)
    return chunks, sorted(leftover, key=due.index)


def _take_spread(queues: dict[str, list[str]], size: int) -> list[str] | None:
    """``size`` nodes from at least two leaves, fullest leaves first; None if impossible."""
    nonempty = [leaf for leaf in queues if queues[leaf]]
    if len(nonempty) < 2 or sum(len(queues[x]) for x in nonempty) < size:
        return None
    group: list[str] = []
    while len(group) < size:
        for leaf in sorted(nonempty, key=lambda x: (-len(queues[x]), x)):
            if queues[leaf] and len(group) < size:
                group.append(queues[leaf].pop(0))
        nonempty = [leaf for leaf in nonempty if queues[leaf]]
    return group


def overdue(nodes: Sequence[str], last_probed: dict[str, float], now: float, period_s: float) -> list[str]:
    """Nodes not probed within the period (busy every time a sweep came by)."""
    return sorted(n for n in nodes if now - last_probed.get(n, 0.0) > period_s)
