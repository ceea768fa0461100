"""Planning probe groups: rotation by last probe, the period, the cap, switch topology."""

from __future__ import annotations

from gpuhc.sweep.plan import Group, overdue, plan_probe
from gpuhc.config.topology import parse_topology

NODES = [f"n{i:02d}" for i in range(1, 11)]


def test_pairs_all_due_nodes_and_reports_the_odd_one():
    plan = plan_probe(NODES[:5], {}, 1000.0, 2, ranks_per_node=8)
    assert [g.nodes for g in plan.groups] == [["n01", "n02"], ["n03", "n04"]]
    assert plan.left_over == ["n05"]
    assert plan.groups[0].shape == "2x8" and plan.groups[0].id == "r0g0000"


def test_rotation_takes_the_least_recently_probed_first_and_skips_recent_ones():
    last = {"n01": 900.0, "n02": 100.0, "n03": 500.0, "n04": 950.0}
    # Period 200 s at t=1000: n01 and n04 were probed within it and wait.
    plan = plan_probe(NODES[:6], last, 1000.0, 2, period_s=200.0)
    assert plan.waiting == ["n01", "n04"]
    # Never probed (n05, n06) first, then the oldest probes.
    assert [g.nodes for g in plan.groups] == [["n05", "n06"], ["n02", "n03"]]


def test_cap_and_rotation_cover_every_node_within_a_few_sweeps():
    last: dict[str, float] = {}
    covered = set()
    for sweep in range(5):
        now = 1000.0 * (sweep + 1)
        plan = plan_probe(NODES, last, now, 2, period_s=0.0, max_nodes=4)
        assert len(plan.groups) == 2
        for g in plan.groups:
            for n in g.nodes:
                last[n] = now
                covered.add(n)
    assert covered == set(NODES)
    assert overdue(NODES, last, 5000.0, 3500.0) == []
    assert overdue(NODES, {"n01": 4900.0}, 5000.0, 3500.0) == NODES[1:]


TOPOLOGY = """SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[01-05]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[06-10]
SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2] Nodes=n[01-10]
"""


def test_topology_parser_reads_leaf_switches_only():
    leaf = parse_topology(TOPOLOGY)
    assert leaf["n01"] == "leaf1" and leaf["n10"] == "leaf2" and len(leaf) == 10
    assert parse_topology("") == {}
    blocks = parse_topology("BlockName=b1 BlockIndex=0 Nodes=a[1-2] BlockSize=2\n")
    assert blocks == {"a1": "b1", "a2": "b1"}


def test_groups_stay_within_a_leaf_and_a_share_crosses():
    leaf = parse_topology(TOPOLOGY)
    plan = plan_probe(NODES, {}, 0.0, 2, leaf_of=leaf, cross_fraction=0.2)
    spans = [g.span for g in plan.groups]
    assert len(plan.groups) == 5 and not plan.left_over
    for g in plan.groups:
        leaves = {leaf[n] for n in g.nodes}
        assert (len(leaves) == 1) == (g.span == "leaf")
    assert spans.count("cross") >= 1 and spans.count("leaf") >= 3
    assert sorted(n for g in plan.groups for n in g.nodes) == NODES


def test_leaf_leftovers_pool_into_a_cross_group():
    leaf = parse_topology(TOPOLOGY)
    plan = plan_probe(NODES, {}, 0.0, 4, leaf_of=leaf, cross_fraction=0.0)
    assert [g.span for g in plan.groups] == ["leaf", "leaf"]
    # 5 per leaf, groups of 4: one left in each leaf; two cannot fill a group of 4.
    assert sorted(plan.left_over) == ["n05", "n10"]
    plan = plan_probe(NODES, {}, 0.0, 2, leaf_of=leaf, cross_fraction=0.0)
    assert [g.span for g in plan.groups].count("cross") == 1  # n05 with n10


def test_group_round_trips_through_a_dict():
    g = Group("r1g0003", ["a", "b"], 1, "isolate", "leaf", 8, suspects=["a"], job_id="17")
    assert Group.from_dict(g.to_dict()) == g
    assert Group.from_dict({**g.to_dict(), "future_field": 1}) == g
