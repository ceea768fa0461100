"""No way around the circuit breaker, on a real Slurm (issue 30; docs/slurm.md, "No exit 1 without
the breaker"). One partition of 10 nodes (cap 1 at the default 10 %), of which n1 and n2 run a
slurmd with gpuhc's prolog and an Xid 79 scenario (the NVML stand-in), the others only defined:

1. a node gpuhc retired earlier does not take the partition's one place: n1's failing health
   check still drains it (before, the retired node held the cap for good and every later sick
   node kept taking jobs), and the count says the retirements' ALERT;
2. with the cap now reached and n2's run lock held by another gpuhc run, a job's prolog on the
   failing n2 cannot take its turn: it knows the breaker is open from n2's last count (read
   before the wait), lets the job run and says so; Slurm does not drain n2 with "Prolog error"
   (before, the prolog exited 1 without having read the breaker).

The lock's holder is a process that takes n2's ``slurm.lock`` the way a gpuhc run does (flock on
the same file): a real health check holds it only for its jitter and waits, too short a window to
place a job's prolog in it reliably.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.slurm_bigcluster import BigSlurmCluster
from tests.helpers.slurm_flows import XID79, base_config, decisions
from tests.helpers.story import once

pytestmark = pytest.mark.slurm

RETIRED = "gpuhc: RETIRED lemon node s00001: 3 drains in 30d (xid); last: xid79 gpu3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm_release):
    wd = tmp_path_factory.mktemp("bypass")
    cfg = base_config(wd, breaker={"max_drained": None, "max_drained_percent": 10, "jitter_s": 1.0})
    c = BigSlurmCluster(wd, size=10, partition_size=10, release=slurm_release, prolog=True,
                        node_scenarios={"n1": str(XID79), "n2": str(XID79)}, gpuhc_config=cfg)
    c.wd = wd
    with c:
        yield c


def healthcheck(c, node: str) -> int:
    env = {"SLURMD_NODENAME": node}
    return c.run([str(c.workdir / "bin" / "healthcheck")], env=env, check=False, timeout=120).returncode


def retired_node_then_a_sick_one(c) -> None:
    c.scontrol("update", "NodeName=s00001", "State=DRAIN", f"Reason={RETIRED}")
    c.code_n1 = healthcheck(c, "n1")


def test_a_retired_node_does_not_stop_the_next_sick_node_from_draining(cluster):
    once(cluster, retired_node_then_a_sick_one)
    n1 = cluster.node("n1")
    assert cluster.code_n1 == 1 and n1.drained and n1.reason.startswith("gpuhc: xid"), (cluster.code_n1, n1)
    said = decisions(cluster.wd, "n1")
    assert any("drained:" in x for x in said), said
    assert any("ALERT: 1 retired nodes >= their cap 1" in x for x in said), said


def cap_reached_lock_held_prolog(c) -> None:
    c.code_n2 = healthcheck(c, "n2")  # cap reached: n2 counts, finds it open, remembers the count
    state = c.state_root / "n2"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(state / 'slurm.lock')!r}, os.O_RDONLY | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(120)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        c.job = c.sbatch("-w", "n2", "-o", "/dev/null", "--wrap", "true")
        c.job_state = c.wait_for_job(c.job, timeout=180)
    finally:
        holder.kill()
        holder.wait()


def test_cap_reached_and_lock_held_the_prolog_lets_the_job_run(cluster):
    once(cluster, retired_node_then_a_sick_one, cap_reached_lock_held_prolog)
    assert cluster.code_n2 == 4, cluster.code_n2  # the health check: breaker open
    assert cluster.job_state == "COMPLETED", cluster.job_state
    n2 = cluster.node("n2")
    assert not n2.drained and "Prolog error" not in (n2.reason or ""), n2
    said = decisions(cluster.wd, "n2", "prolog")
    assert any("did not finish in time" in x for x in said), said  # the lock was held throughout
    ran = [x for x in said if "letting the job run" in x]
    assert len(ran) == 1 and "circuit breaker open" in ran[0] and "this node's last count" in ran[0], said
    assert os.path.exists(cluster.state_root / "n2" / "slurm.lock")
