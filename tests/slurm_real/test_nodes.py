"""The parsers against what a real Slurm (Debian 22.05) prints today: `scontrol show node` in
both layouts and `sinfo --json`, read from the test cluster (see tests/helpers/slurm_cluster.py)."""

from __future__ import annotations

import pytest

from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.slurm.read.nodes import parse_show_node, parse_show_node_oneline

pytestmark = pytest.mark.slurm

REASON = "gpuhc: xid Xid 79 on gpu3 [pci=0000:b3:00.0] État=cassé x=y"


@pytest.fixture(scope="module")
def cluster(slurm_cluster_module):
    c = slurm_cluster_module(nodes=("n1", "n2", "n3"))
    c.scontrol("update", "NodeName=n2", "State=DRAIN", f"Reason={REASON}")
    c.scontrol("update", "NodeName=n3", "State=DOWN", "Reason=cable pulled")
    c.wait_for(lambda: c.node("n3").down and c.node("n2").drained, 120, "n2 drained, n3 down")
    return c


def summary(nodes):
    return {n.name: (n.state, sorted(n.flags), n.reason, n.reason_user, n.partitions) for n in nodes}


def test_all_layouts_agree(cluster):
    oneline = parse_show_node_oneline(cluster.scontrol("show", "node", "-o").stdout)
    blocks = parse_show_node(cluster.scontrol("show", "node").stdout)
    sinfo = parse_nodes(cluster.run(["sinfo", "--json"]).stdout)
    expected = {
        "n1": ("IDLE", [], None, None, ("gpu",)),
        "n2": ("IDLE", ["DRAIN"], REASON, "root", ("gpu",)),
        "n3": ("DOWN", [], "cable pulled", "root", ("gpu",)),
    }
    assert summary(oneline) == expected
    assert summary(blocks) == expected
    assert summary(sinfo) == expected
    # times: text has second resolution in local time, JSON is epoch; they must agree
    t_text = {n.name: n.reason_time for n in oneline}
    t_json = {n.name: n.reason_time for n in sinfo}
    assert t_text == t_json and t_text["n2"] is not None
