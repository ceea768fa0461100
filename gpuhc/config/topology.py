"""Slurm's switch topology as text -> which leaf switch (or block) each node hangs from.

Read by the sweep's planner (groups that stay under one leaf) and by the fleet's suspect-switch
incidents (``gpuhc/fleet/switches.py``, which strips a topology.conf down to these records
first), and by the lemon rule's shared causes (``gpuhc/slurm/repair/lemon_memory.py``), so it sits below
all three. The record shapes are those of ``scontrol show topology`` and
topology.conf(5): ``SwitchName=... Level=... Nodes=<hostlist>`` for topology/tree, and
``BlockName=... Nodes=<hostlist>`` for topology/block (docs/slurm.md).
"""

from __future__ import annotations

import re

from gpuhc.config.hosts import expand
from gpuhc.files.untrusted import read_bounded

TOPOLOGY_LIMIT = 16 * 1024 * 1024

_PAIR = re.compile(r"(\w+)=(\S+)")


def parse_topology(text: str) -> dict[str, str]:
    """``scontrol show topology`` -> {node: leaf switch}. Leaves are level-0 switches
    (topology/tree) or blocks (topology/block). Empty when Slurm has no topology."""
    leaf_of: dict[str, str] = {}
    for line in text.splitlines():
        fields = dict(_PAIR.findall(line))
        name = fields.get("SwitchName") or fields.get("BlockName")
        if not name or "Nodes" not in fields:
            continue
        if "SwitchName" in fields and fields.get("Level", "0") != "0":
            continue
        try:
            nodes = expand(fields["Nodes"])
        except ValueError:
            continue
        for node in nodes:
            leaf_of.setdefault(node, name)
    return leaf_of


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
