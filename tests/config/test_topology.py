"""gpuhc/config/topology.py: Slurm's switch topology text -> the leaf switch or block of each node.

The records are the topology.conf(5) manual's own examples (tests/fixtures/topology/README.md);
the real-Slurm test (tests/test_fleet_slurm.py) reads a live `scontrol show topology`."""

from __future__ import annotations


from gpuhc.config.topology import parse_topology
from tests.helpers.paths import FIXTURES

TOPOLOGY = FIXTURES / "topology"


def test_the_manual_tree_gives_each_node_its_leaf_and_skips_the_spine():
    leaf_of = parse_topology((TOPOLOGY / "topology-tree.conf").read_text())
    assert len(leaf_of) == 18
    assert leaf_of["dev0"] == "s0" and leaf_of["dev6"] == "s1" and leaf_of["dev17"] == "s2"
    assert "s3" not in leaf_of.values()  # lists switches, no nodes


def test_the_manual_blocks_are_leaves_and_block_sizes_are_no_block():
    leaf_of = parse_topology((TOPOLOGY / "topology-block.conf").read_text())
    assert len(leaf_of) == 128 and leaf_of["node1"] == "block1" and leaf_of["node128"] == "block4"


def test_only_level_zero_switches_are_leaves_and_the_first_leaf_of_a_node_wins():
    text = ("SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]\n"
            "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
            "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[2-4]\n")
    assert parse_topology(text) == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2", "n4": "leaf2"}


def test_a_record_with_a_broken_hostlist_is_skipped_and_the_rest_read():
    text = "SwitchName=bad Level=0 Nodes=n[3-\nSwitchName=good Level=0 Nodes=m[1-2]\n"
    assert parse_topology(text) == {"m1": "good", "m2": "good"}
    assert parse_topology("") == {}
