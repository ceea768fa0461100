"""gpuhc's sinfo reads against a real slurmctld, on every release: they see what scontrol sees,
and they ask the controller for what they claim (one node alone; one query per breaker count;
the breaker ledger's record alone).

A controller with 300 defined nodes (two with a live slurmd) in three partitions plus one extra
partition that overlaps: enough for the grouped scope query to have groups, hidden partitions
and a node listed under two partitions.
"""

from __future__ import annotations

import pytest

from tests.helpers.slurm_bigcluster import BigSlurmCluster, sdiag_rpcs

pytestmark = pytest.mark.slurm

ODD_REASONS = (
    "gpuhc: xid Xid 79 | pid=1234 | name=python3 Reason=x State=IDLE NodeName=n9 [q2]",
    "admin: é ü 😀 %s %n 50% [root@2024-01-01T00:00:00] none",
    "gpuhc: " + "x" * 248,
)


@pytest.fixture(scope="module")
def big(tmp_path_factory, slurm_release):
    wd = tmp_path_factory.mktemp("sinfo")
    c = BigSlurmCluster(wd, size=300, partition_size=100, ledger="gpuhc-ledger", release=slurm_release,
                        extra_conf="PartitionName=hidden Hidden=YES State=UP Nodes=n1,s00005,s00150")
    with c:
        yield c


def scontrol(big, monkeypatch):
    """gpuhc's Slurm wrapper talking to ``big`` with its release's client commands."""
    from gpuhc.slurm.act.scontrol import Scontrol

    env = big.env()
    monkeypatch.setenv("SLURM_CONF", env["SLURM_CONF"])
    monkeypatch.setenv("PATH", env["PATH"])
    return Scontrol()


def test_one_node_read_matches_scontrol(big, monkeypatch):
    sc = scontrol(big, monkeypatch)
    for name, reason in zip(("n1", "s00005", "s00150"), ODD_REASONS):
        big.scontrol("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")
    for name in ("n1", "n2", "s00005", "s00150", "s00297"):
        via_sinfo, via_scontrol = sc.node(name), sc.show_node(name)
        assert (via_sinfo.name, via_sinfo.state, via_sinfo.drained, via_sinfo.reason, via_sinfo.reason_user,
                via_sinfo.reason_time) == (via_scontrol.name, via_scontrol.state, via_scontrol.drained,
                                           via_scontrol.reason, via_scontrol.reason_user, via_scontrol.reason_time)
        assert set(via_sinfo.partitions) == set(via_scontrol.partitions)
    assert sc.node("s00005").state == "UNKNOWN" and sc.node("n2").state == "IDLE"  # never registered / live


def test_scope_query_sees_every_node_of_the_partitions(big, monkeypatch):
    sc = scontrol(big, monkeypatch)
    every = {n.name: n for n in sc.show_nodes()}
    for parts in (["p1"], ["p2", "hidden"], None):
        got = {n.name: n for n in sc.scope(parts)}
        want = {k for k, n in every.items() if parts is None or set(parts) & set(n.partitions)}
        assert set(got) == want
        assert {k for k, n in got.items() if n.drained} == {k for k in want if every[k].drained}
        assert all(got[k].reason == every[k].reason for k in got)


def test_reads_ask_the_controller_for_what_they_claim(big, monkeypatch):
    """sdiag counts the RPCs: a one-node read and a read of the breaker ledger are
    REQUEST_NODE_INFO_SINGLE (never the full node table), a breaker count is exactly one
    REQUEST_NODE_INFO; scontrol show node NAME, the old read, is a full REQUEST_NODE_INFO on
    every release tested (22.05, 24.11, 26.05): none filters nodes on the server for it."""
    sc = scontrol(big, monkeypatch)
    big.reset_sdiag()
    for _ in range(3):
        sc.node("s00010")
    after_reads = sdiag_rpcs(big.sdiag())
    assert after_reads.get("REQUEST_NODE_INFO_SINGLE") == 3 and "REQUEST_NODE_INFO" not in after_reads
    big.reset_sdiag()
    comment, extra, stamp, state = sc.ledger("gpuhc-ledger")
    assert (comment, extra, stamp) == ("", "", None) and "unknown" in state.lower()
    after_ledger = sdiag_rpcs(big.sdiag())
    assert after_ledger.get("REQUEST_NODE_INFO_SINGLE") == 1 and "REQUEST_NODE_INFO" not in after_ledger
    big.reset_sdiag()
    sc.scope(["p1"])
    assert sdiag_rpcs(big.sdiag()).get("REQUEST_NODE_INFO") == 1
    big.reset_sdiag()
    sc.show_node("s00010")
    assert sdiag_rpcs(big.sdiag()).get("REQUEST_NODE_INFO") == 1
