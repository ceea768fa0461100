"""The breaker ledger on a real Slurm, every release: the node record as slurm/slurm.conf.example
and docs/slurm.md tell an admin to define it, its Comment, Extra and reason stamp read with
sinfo and written with scontrol, and a second failing node held back on the ledger's word
without counting. The 2,000-node storm with a ledger is in tests/slurm_real/test_storm.py."""

from __future__ import annotations

import subprocess

import pytest

from gpuhc.slurm.policy import ledger
from tests.helpers.paths import REPO
from tests.helpers.slurm_cluster_files import free_ports
from tests.helpers.slurm_flows import XID79, base_config, decisions

pytestmark = pytest.mark.slurm


def ledger_conf() -> list[str]:
    """The commented ledger lines of slurm/slurm.conf.example, uncommented. The test gives the
    record a port nothing listens on, so no other slurmd of this host answers for it."""
    lines = [ln.lstrip("#").strip() for ln in (REPO / "slurm" / "slurm.conf.example").read_text().splitlines()
             if ln.startswith(("#NodeName=gpuhc-ledger", "#PartitionName=gpuhc "))]
    assert len(lines) == 2, lines
    return [ln + f" NodeAddr=127.0.0.1 Port={free_ports(1)[0]}" if ln.startswith("NodeName") else ln for ln in lines]


def test_the_ledger_on_a_real_slurm(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "ledger"
    cfg = base_config(wd, breaker={"max_drained": 1, "settle_s": 1.0, "jitter_s": 0.0,
                                   "ledger_node": "gpuhc-ledger", "ledger_wait_s": 0.5})
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), gpuhc_config=cfg, extra_conf=ledger_conf())

    def healthcheck(node):
        return subprocess.run(["env", "-i", f"SLURMD_NODENAME={node}", str(wd / "bin" / "healthcheck"),
                               "--nvml-scenario", str(XID79)], capture_output=True, text=True, timeout=60)

    def record():
        out = c.run(["sinfo", "-h", "-a", "-N", "-n", "gpuhc-ledger", "-O", "Extra:|,Comment:0"]).stdout
        extra, _, comment = out.strip().partition("|")
        return comment.strip(), extra.strip()

    # n1 fails: nothing in the ledger yet, so it counts (before and after its drain), stamping the
    # record each time, and writes what it saw.
    cp = healthcheck("n1")
    assert cp.returncode == 1 and c.node("n1").drained, cp.stderr
    said = decisions(wd, "n1")
    assert any(x.startswith("breaker: counted partition gpu before the drain") for x in said), said
    comment, _ = record()
    entry = ledger.parse(comment)["p=gpu"]
    assert (entry.held, entry.total, entry.cap) == (1, 2, 1), comment  # the record is no capacity
    ledger_node = c.node("gpuhc-ledger")
    assert ledger_node.drained and ledger_node.reason.startswith("breaker ledger of gpuhc (not a compute node)")

    # n2 fails a moment later: the ledger's count says the cap is taken; no count of its own.
    cp = healthcheck("n2")
    assert cp.returncode == 4 and not c.node("n2").drained, cp.stderr
    said = decisions(wd, "n2")
    assert any("circuit breaker open: 1/2 nodes drained by gpuhc >= cap 1 (partition gpu; from the ledger)" in x
               for x in said), said
    assert not any(x.startswith("breaker: counted") for x in said), said

    # An admin releases n1 and empties the ledger (a stale "open" would hold n2 back for up to
    # ledger_ttl_s): n2 counts, finds room, drains.
    c.scontrol("update", "NodeName=n1", "State=RESUME")
    c.scontrol("update", "NodeName=gpuhc-ledger", f"Comment={ledger.PREFIX}", f"Extra={ledger.CLAIMS_PREFIX}")
    cp = healthcheck("n2")
    assert cp.returncode == 1 and c.node("n2").drained, cp.stderr
    assert ledger.parse(record()[0])["p=gpu"].held == 1


def test_a_future_stamp_in_the_ledger_ends_at_the_cap(slurm_cluster, tmp_path, slurm_release):
    """Issue 18: an entry whose newest stamp lies in the future (slurmctld's clock stepped back,
    or someone wrote it) 'covered' every drain, so with room in it more nodes drained than the
    cap allows and none undid its drain. Refused, it counts as absent: the nodes count the table,
    and the end state is the cap."""
    import time

    wd = tmp_path / "future"
    cfg = base_config(wd, breaker={"max_drained": 1, "settle_s": 1.0, "jitter_s": 0.0,
                                   "ledger_node": "gpuhc-ledger", "ledger_wait_s": 0.5})
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2", "n3"), gpuhc_config=cfg, extra_conf=ledger_conf())
    c.scontrol("update", "NodeName=n1", "State=DRAIN", "Reason=gpuhc: xid Xid 79 on gpu3: an earlier drain")
    now = int(time.time())
    future = ledger.Entry(scope="p=gpu", id="0000abcd", t=now, held=0, total=3, cap=1, newest=now + 10 ** 6)
    c.scontrol("update", "NodeName=gpuhc-ledger", f"Comment={ledger.render([future])}", f"Extra={ledger.CLAIMS_PREFIX}")
    argv = [["env", "-i", f"SLURMD_NODENAME={node}", str(wd / "bin" / "healthcheck"), "--nvml-scenario", str(XID79)]
            for node in ("n2", "n3")]
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for a in argv]
    ends = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    held = [n for n in ("n1", "n2", "n3") if c.node(n).drained]
    assert held == ["n1"], (held, ends)  # the cap, and the earlier drain ranks first
    assert [code for code, _ in ends] == [4, 4], ends
    said = decisions(wd, "n2") + decisions(wd, "n3")
    assert any("stamp from the future" in x for x in said), said
    assert all(e.newest < now + 10 ** 6 for e in ledger.parse(c.run(
        ["sinfo", "-h", "-a", "-N", "-n", "gpuhc-ledger", "-O", "Comment:0"]).stdout).values())
