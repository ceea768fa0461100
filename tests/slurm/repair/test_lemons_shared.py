"""Lemon memory, shared causes (issue 30): a fault that was one of a switch incident (the same
check on K nodes under one leaf within the window) counts for the switch, not for the node or
its GPUs. The topologies are Slurm's own topology.conf(5) examples (tests/fixtures/topology)."""

from __future__ import annotations

import os
import time

import pytest

from tests.helpers.minislurm import OK, XID, MiniSlurm, config, run
from tests.helpers.paths import REPO

from gpuhc.export.eventlog import append_event
from gpuhc.slurm.repair.lemons import Fault, GpuId, LemonSettings, SharedCauses, judge, shared, without_shared
from gpuhc.slurm.policy.drain import Act
from gpuhc.config.topology import read_topology_conf

TOPOLOGY = REPO / "tests" / "fixtures" / "topology"
DAY = 86400.0
S = LemonSettings(True, 3, 30 * DAY)
G7 = GpuId("1652320010007", "GPU-aaaa-7")


def tree() -> SharedCauses:
    return SharedCauses(read_topology_conf(str(TOPOLOGY / "topology-tree.conf")), 3, 1800.0)


def test_a_switch_incident_counts_for_the_switch_not_the_node():
    """dev0's second drain was an IB flap that dev1 and dev2 (same leaf s0) had within minutes."""
    incident = [Fault(10 * DAY, "dev0", "infiniband", (G7,)), Fault(10 * DAY + 60, "dev1", "infiniband"),
                Fault(10 * DAY + 600, "dev2", "infiniband")]
    history = [Fault(0, "dev0", "xid", (G7,)), *incident]
    new = Fault(20 * DAY, "dev0", "xid", (G7,))
    before = judge(new, history, S)
    assert before is not None and (before.kind, before.key) == ("node", "dev0")  # the old rule: a lemon
    assert judge(new, history, S, causes=tree()) is None  # neither the node nor its GPU
    assert shared(history, tree()) == {("dev0", 10 * DAY): "s0", ("dev1", 10 * DAY + 60): "s0",
                                       ("dev2", 10 * DAY + 600): "s0"}
    assert [f.node for f in without_shared(history, tree())] == ["dev0"]


def test_no_incident_when_the_neighbours_are_elsewhere_too_few_or_too_late():
    new = Fault(20 * DAY, "dev0", "xid")
    for others in ([("dev6", 60), ("dev12", 600)],  # the same check, but under s1 and s2
                   [("dev1", 60)],  # two nodes under s0: fewer than K
                   [("dev1", 60), ("dev2", 4000)],  # the third too late for the window
                   ):
        history = [Fault(0, "dev0", "xid"), Fault(10 * DAY, "dev0", "infiniband"),
                   *(Fault(10 * DAY + dt, node, "infiniband") for node, dt in others)]
        assert judge(new, history, S, causes=tree()) is not None, others
    # another check under the same leaf is no incident of this one
    history = [Fault(0, "dev0", "xid"), Fault(10 * DAY, "dev0", "infiniband"),
               Fault(10 * DAY + 60, "dev1", "xid"), Fault(10 * DAY + 90, "dev2", "pcie")]
    assert judge(new, history, S, causes=tree()) is not None


def test_the_new_drain_itself_one_of_an_incident_makes_no_lemon_and_block_topologies_group_too():
    blocks = SharedCauses(read_topology_conf(str(TOPOLOGY / "topology-block.conf")), 3, 1800.0)
    history = [Fault(0, "node5", "xid"), Fault(DAY, "node5", "xid"),
               Fault(2 * DAY - 100, "node7", "fabric"), Fault(2 * DAY - 50, "node31", "fabric")]
    new = Fault(2 * DAY, "node5", "fabric")
    assert judge(new, history, S) is not None
    assert judge(new, history, S, causes=blocks) is None  # node5, node7, node31: all of block1
    assert judge(new, [*history[:2], Fault(2 * DAY - 50, "node40", "fabric"),  # node40 is block2's
                       history[2]], S, causes=blocks) is not None


def test_a_node_the_topology_does_not_place_or_no_topology_counts_as_before():
    history = [Fault(0, "gpu1", "xid"), Fault(DAY, "gpu1", "ib"), Fault(DAY + 1, "gpu2", "ib"),
               Fault(DAY + 2, "gpu3", "ib")]
    new = Fault(2 * DAY, "gpu1", "xid")
    assert judge(new, history, S, causes=tree()) is not None  # dev* only: gpu1 is in no switch
    assert judge(new, history, S, causes=SharedCauses({})) is not None


# ---------------------------------------------------------------- the flow: topology and shared logs


def _neighbours_log(tmp_path, nodes, when):
    """The neighbours' own shipped logs, as the CLI writes them after a verified drain."""
    logs = tmp_path / "shipped"
    logs.mkdir(exist_ok=True)
    for node in nodes:
        rec = Fault(when, node, "xid").to_dict()
        append_event(str(logs / f"{node}.jsonl"), {"node": node, "started": when, "slurm": {"acted": True, "fault": rec}})
    return str(logs / "*.jsonl")


def _drain_resume_drain(tmp_path, monkeypatch, cfg):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    assert run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg).decision.act is Act.DRAIN
    assert run(tmp_path, monkeypatch, "passive", s, [OK], cfg=cfg).decision.act is Act.RESUME
    return s, run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)


def test_the_flow_leaves_out_a_switch_incident_seen_in_the_shared_logs(tmp_path, monkeypatch):
    """K=2: n1's second drain would retire it; n2 and n3 under the same leaf failed the same
    check in the same minutes (their shipped logs), so both of n1's drains were the switch's."""
    topo = tmp_path / "topology.conf"
    topo.write_text((TOPOLOGY / "topology-tree.conf").read_text().replace("dev[0-5]", "n[1-3]"))
    glob = _neighbours_log(tmp_path, ["n2", "n3"], time.time())

    def cfg(path, topology):
        c = config(path, lemon={"faults": 2, "event_logs": [glob]}, cooldown_s=0, resume_after=1)
        c.data["fleet"]["switch"]["topology_file"] = topology
        return c

    s, again = _drain_resume_drain(tmp_path / "a", monkeypatch, cfg(tmp_path / "a", str(topo)))
    assert again.decision.act is Act.DRAIN and s.nodes["n1"][1].startswith("gpuhc: xid"), s.nodes["n1"]
    # the same history without the topology: retired, as before issue 30
    s, again = _drain_resume_drain(tmp_path / "b", monkeypatch, cfg(tmp_path / "b", None))
    assert s.nodes["n1"][1].startswith("gpuhc: RETIRED lemon node n1: 2 drains")
    # a topology file that cannot be read is said, and the rule runs as before
    s, again = _drain_resume_drain(tmp_path / "c", monkeypatch, cfg(tmp_path / "c", str(tmp_path / "missing.conf")))
    assert s.nodes["n1"][1].startswith("gpuhc: RETIRED lemon")
    assert any("lemon memory: topology not read" in line for line in again.lines), again.lines


@pytest.mark.skipif(os.geteuid() != 0, reason="the trusted-file rule applies to root (tests/run.sh runs as root)")
def test_a_topology_file_users_can_write_is_refused_and_said(tmp_path, monkeypatch):
    """The topology decides what counts toward a retirement: a file a user could write (to hide
    a lemon behind a made-up switch) is read under the rule for files root trusts."""
    topo = tmp_path / "topology.conf"
    topo.write_text((TOPOLOGY / "topology-tree.conf").read_text().replace("dev[0-5]", "n[1-3]"))
    os.chown(topo, 1000, 1000)
    c = config(tmp_path, lemon={"faults": 2, "event_logs": [_neighbours_log(tmp_path, ["n2", "n3"], time.time())]},
               cooldown_s=0, resume_after=1)
    c.data["fleet"]["switch"]["topology_file"] = str(topo)
    s, again = _drain_resume_drain(tmp_path, monkeypatch, c)
    assert s.nodes["n1"][1].startswith("gpuhc: RETIRED lemon")
    said = [line for line in again.lines if "lemon memory: topology not read" in line]
    assert said and "owned by uid 1000, not root" in said[0], again.lines
