"""The shared-cause rule: several nodes under one leaf switch failing the same check close
together are one cause (the switch, its uplink, the cooling of its rack row), not N node faults.
Pure.

Declared once, used twice: the fleet's suspect-switch incidents (``gpuhc/fleet/switches.py``)
and the lemon rule (``gpuhc/slurm/repair/lemons.py``), where a fault that belongs to such a group counts
for the switch, not for the node (docs/repair.md "Lemon memory").

The rule: failures of one check under one leaf, sorted by time; a run whose first and last are
at most ``window_s`` apart and that covers at least ``min_nodes`` (K) distinct nodes opens a
group, and later failures of that check under that leaf within ``window_s`` of the group's last
one join it (a switch that keeps flapping is still one cause). A node the topology does not
place is never grouped: nothing is known about its neighbours.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, TypeVar

T = TypeVar("T")


def group_runs(items: Iterable[T], leaf_of: Mapping[str, str], node: Callable[[T], str],
               check: Callable[[T], str], when: Callable[[T], float], min_nodes: int,
               window_s: float) -> tuple[list[tuple[str, str, list[T]]], list[T]]:
    """([(leaf, check, members)], items in no group), groups by (leaf, check) then time."""
    if min_nodes < 2:
        raise ValueError("min_nodes must be at least 2: one node is a node failure, not a switch's")
    by_key: dict[tuple[str, str], list[T]] = {}
    rest: list[T] = []
    for item in items:
        leaf = leaf_of.get(node(item))
        if leaf is None:
            rest.append(item)
        else:
            by_key.setdefault((leaf, check(item)), []).append(item)
    groups: list[tuple[str, str, list[T]]] = []
    for (leaf, name), group in sorted(by_key.items()):
        group.sort(key=lambda x: (when(x), node(x)))
        i = 0
        while i < len(group):
            j = i
            while j + 1 < len(group) and when(group[j + 1]) - when(group[i]) <= window_s:
                j += 1
            if len({node(x) for x in group[i:j + 1]}) >= min_nodes:
                members = list(group[i:j + 1])
                j += 1
                while j < len(group) and when(group[j]) - max(when(x) for x in members) <= window_s:
                    members.append(group[j])
                    j += 1
                groups.append((leaf, name, members))
                i = j
            else:
                rest.append(group[i])
                i += 1
    return groups, rest
