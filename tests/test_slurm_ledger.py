"""The breaker ledger on a real Slurm, every release: the node record as slurm/slurm.conf.example
and docs/slurm.md tell an admin to define it, its Comment, Extra and reason stamp read with
sinfo and written with scontrol, and a second failing node held back on the ledger's word
without counting. The 2,000-node storm with a ledger is in test_slurm_storm.py."""

from __future__ import annotations

import subprocess

import pytest

from gpuhc.slurm import ledger
from slurm_cluster import REPO
from slurm_cluster_files import free_ports
from test_slurm_e2e import XID79, base_config, decisions

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
