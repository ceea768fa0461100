"""`gpuhc drain-report` against a real Slurm (Debian 22.05, started by tests/helpers/slurm_cluster.py),
read live through `scontrol --all --oneliner show node`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm


def drain_report(cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhc", "drain-report", *args], capture_output=True, text=True,
                          env=cluster.env(), timeout=timeout)


def test_live_report_groups_and_owners(slurm_cluster):
    c = slurm_cluster(nodes=("n1", "n2", "n3", "n4"))
    c.scontrol("update", "NodeName=n1,n2", "State=DRAIN", "Reason=gpuhc: xid Xid 79 on gpu3")
    c.scontrol("update", "NodeName=n3", "State=DRAIN", "Reason=swap DIMM B2 [ticket 77]")
    c.scontrol("update", "NodeName=n4", "State=DOWN", "Reason=Not responding")
    c.wait_for(lambda: sum(n.unavailable for n in c.nodes_now()) == 4, 120, "4 nodes out")

    p = drain_report(c, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["source"] == "scontrol --oneliner show node"
    assert doc["total_nodes"] == 4 and doc["unavailable"] == 4
    groups = {g["cause"]: (g["owner"], g["count"], [r["nodes"] for r in g["rows"]]) for g in doc["groups"]}
    assert groups == {"xid": ("gpuhc", 2, ["n[1-2]"]), "admin": ("admin", 1, ["n3"]),
                      "not responding": ("slurm", 1, ["n4"])}
    assert all(0 <= n["age_s"] < 300 and n["user"] == "root" for n in doc["nodes"])

    p = drain_report(c, "--state", "down")
    assert p.returncode == 0 and "1 of 4 nodes unavailable (down 1)" in p.stdout

    p = drain_report(c, "--owner", "gpuhc", "--csv")
    assert [line.split(",")[0] for line in p.stdout.splitlines()[1:]] == ["n1", "n2"]


def test_live_report_when_slurm_does_not_answer(slurm_cluster):
    c = slurm_cluster(nodes=("n1",))
    c.stop()
    p = drain_report(c, "--timeout", "3")
    assert p.returncode == 3 and "scontrol" in p.stderr and "Traceback" not in p.stderr
