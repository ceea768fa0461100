"""Runs that overlap on one node, on a real Slurm (every release): twenty health checks at once
on one failing node send exactly one DRAIN to slurmctld, and none of them reports the breaker
open (issue 18: before the node's run lock, 10 DRAINs and ten exit-4 "breaker open" reports,
taken from a read before another run's drain). gpuhc/slurm/flows/runlock.py has the lock."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.slurm_bigcluster import sdiag_rpcs
from tests.helpers.slurm_flows import XID79, base_config, decisions

pytestmark = pytest.mark.slurm

RUNS = 20


def test_twenty_health_checks_at_once_drain_once(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "concurrent"
    # Cap 1 of 2 nodes: a run that counted this node's own drain against the breaker would
    # report it open.
    cfg = base_config(wd, breaker={"max_drained": 1, "settle_s": 0.5, "jitter_s": 4.0})
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), gpuhc_config=cfg)
    c.run(["sdiag", "--reset"])
    argv = ["env", "-i", "SLURMD_NODENAME=n1", str(wd / "bin" / "healthcheck"), "--nvml-scenario", str(XID79)]
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(RUNS)]
    ends = [(p.wait(timeout=180), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in ends)
    assert codes == [1] * RUNS, ends  # every run: FAIL (exit 1); none "breaker open" (4)
    rpcs = sdiag_rpcs(c.run(["sdiag"]).stdout)
    assert rpcs.get("REQUEST_UPDATE_NODE", 0) == 1, rpcs  # one DRAIN on the wire, no undo
    n1 = c.node("n1")
    assert n1.drained and n1.reason.startswith("gpuhc: xid"), n1
    assert not c.node("n2").drained
    said = decisions(wd, "n1")
    assert sum(x.startswith("drained:") for x in said) == 1, said
    assert not any("circuit breaker open" in x for x in said), said
    # The others waited their turn and found the node drained with gpuhc's reason.
    assert sum("waiting for its turn" in x for x in said) >= 1, said
    assert sum(x.startswith("keep:") for x in said) == RUNS - 1, said
