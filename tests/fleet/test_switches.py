"""Switch-level incidents: failures of one check under one leaf switch inside the window become
one suspect-switch incident, and those nodes are not reported again one by one."""

from __future__ import annotations


import pytest

from gpuhc.fleet.switches import Failure, failures_from_nodes, group_by_switch, parse_topology_conf, read_topology_conf
from gpuhc.slurm.read.nodes import Node
from tests.helpers.paths import FIXTURES

FIXTURES = FIXTURES / "topology"
IB = "infiniband"


@pytest.fixture(scope="module")
def tree() -> dict[str, str]:
    return read_topology_conf(str(FIXTURES / "topology-tree.conf"))


def test_topology_conf_leaves_from_the_manual_examples(tree):
    assert len(tree) == 18
    assert {tree[f"dev{i}"] for i in range(6)} == {"s0"} and tree["dev17"] == "s2"
    assert "s3" not in tree.values()  # the spine lists switches, not nodes
    block = read_topology_conf(str(FIXTURES / "topology-block.conf"))
    assert len(block) == 128 and block["node33"] == "block2"


def test_comments_and_continuations():
    text = "# SwitchName=fake Nodes=x[1-9]\nSwitchName=leaf1 \\\n  Nodes=a[1-2]  # two nodes\n"
    assert parse_topology_conf(text) == {"a1": "leaf1", "a2": "leaf1"}


def test_three_nodes_under_one_switch_make_one_incident_and_no_node_noise(tree):
    t0 = 1_700_000_000.0
    failures = [Failure("dev1", IB, t0, "mlx5_0 port 1 down"), Failure("dev4", IB, t0 + 60),
                Failure("dev2", IB, t0 + 300), Failure("dev7", IB, t0 + 30),  # s1: alone
                Failure("dev3", "ecc", t0 + 10)]  # another check under s0
    incidents, rest = group_by_switch(failures, tree, min_nodes=3, window_s=1800)
    (inc,) = incidents
    assert (inc.switch, inc.check, inc.nodes) == ("s0", IB, ["dev1", "dev2", "dev4"])
    assert inc.first == t0 and inc.last == t0 + 300
    assert "suspect switch s0" in inc.summary and "dev[1-2,4]" in inc.summary
    assert sorted(f.node for f in rest) == ["dev3", "dev7"]  # nothing of the incident is repeated
    assert inc.to_dict()["kind"] == "suspect_switch"


def test_k_and_window_are_respected(tree):
    t0 = 1000.0
    spread = [Failure("dev0", IB, t0), Failure("dev1", IB, t0 + 3600), Failure("dev2", IB, t0 + 7200)]
    assert group_by_switch(spread, tree, 3, 1800)[0] == []  # an hour apart: three node failures
    two = [Failure("dev0", IB, t0), Failure("dev1", IB, t0 + 5)]
    assert group_by_switch(two, tree, 3, 1800)[0] == []
    assert len(group_by_switch(two, tree, 2, 1800)[0]) == 1
    with pytest.raises(ValueError):
        group_by_switch(two, tree, 1, 1800)


def test_a_flapping_switch_stays_one_incident(tree):
    t0 = 0.0
    f = [Failure(f"dev{i}", IB, t0 + i * 100) for i in range(3)] + [Failure("dev5", IB, t0 + 1500),
                                                                    Failure("dev0", IB, t0 + 3000)]
    (inc,), rest = group_by_switch(f, tree, 3, 1800)
    assert inc.nodes == ["dev0", "dev1", "dev2", "dev5"] and len(inc.failures) == 5 and rest == []


def test_nodes_outside_the_topology_are_never_grouped(tree):
    f = [Failure(f"x{i}", IB, 0.0) for i in range(5)]
    incidents, rest = group_by_switch(f, tree, 3, 1800)
    assert incidents == [] and len(rest) == 5


def test_failures_from_slurms_node_list():
    def node(name, reason, state="IDLE", flags=("DRAIN",), t=100.0):
        return Node(name, state, frozenset(flags), reason, "root", t)

    nodes = [node("dev0", "gpuhc: infiniband mlx5_0 port 1 link down"), node("dev1", "admin: new cable"),
             node("dev2", "gpuhc: RETIRED ecc gpu0 uncorrectable"), node("dev3", "gpuhc: xid79 gpu1", flags=()),
             node("dev4", "gpuhc: infiniband mlx5_0 port 1 link down [q1]", state="DOWN", flags=())]
    got = failures_from_nodes(nodes)
    assert [(f.node, f.check) for f in got] == [("dev0", IB), ("dev4", IB)]


def test_failures_the_breaker_withheld_still_make_the_incident(tree, tmp_path):
    """A switch outage that trips the breaker leaves most of its nodes undrained; their health
    checks' event-log lines (action "blocked") still show where the failures are."""
    from gpuhc.export.eventlog import append_event
    from gpuhc.fleet.history import read_failures
    from gpuhc.fleet.switches import merge_failures

    log = tmp_path / "events.jsonl"
    reason = "gpuhc: infiniband mlx5_3/1 DOWN, physical link Polling"
    for i, (node, action) in enumerate([("dev0", "drain"), ("dev1", "blocked"), ("dev2", "blocked"),
                                        ("dev1", "blocked"), ("dev9", "none")]):
        append_event(str(log), {"node": node, "stage": "passive", "started": 5000.0 + 60 * i, "results": [],
                                "slurm": {"action": action, "acted": action == "drain",
                                          "reason": reason if action != "none" else None}})
    append_event(str(log), {"node": "dev3", "stage": "passive", "started": 10.0, "results": [],
                            "slurm": {"action": "drain", "acted": True, "reason": reason}})  # before --since
    problems: list[str] = []
    got = read_failures([str(log)], since=1000.0, problems=problems)
    assert [(n, c, t) for n, c, t, _ in got] == [("dev0", IB, 5000.0), ("dev1", IB, 5060.0), ("dev2", IB, 5120.0)]
    held = [Failure("dev0", IB, 4990.0, "from Slurm")]
    merged = merge_failures(held, [Failure(*f) for f in got])
    assert [(f.node, f.time) for f in merged] == [("dev0", 4990.0), ("dev1", 5060.0), ("dev2", 5120.0)]
    (inc,), rest = group_by_switch(merged, tree, 3, 1800)
    assert inc.switch == "s0" and inc.nodes == ["dev0", "dev1", "dev2"] and rest == [] and problems == []
