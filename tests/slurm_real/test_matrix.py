"""What differs between Slurm releases and matters to gpuhc, on each release of the matrix
(conftest.py: ``--slurm=all``): the health check slurmd runs when it starts, and a reboot that
gpuhc asks for (``gpuhc quarantine retest --reboot``) through a real RebootProgram.

docs/slurm.md ("Slurm releases") has the per-release table these tests hold true.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.slurm_flows import HEALTHY, XID79, back_in_service, base_config, decisions, gpuhc

pytestmark = pytest.mark.slurm

XID_REASON = "gpuhc: xid79 gpu3 (0000:5d:00.0): GPU has fallen off the bus"


def scenario_file(path: Path, sick: bool) -> str:
    """A node's recording, swappable in place: healthy, or with gpu3's Xid 79."""
    text = XID79.read_text().replace("extends: healthy-8xh100.yaml", f"extends: {HEALTHY}") if sick else \
        f"extends: {HEALTHY}\n"
    path.write_text(text)
    return str(path)


def registered(node) -> bool:
    """slurmctld has heard from the node's slurmd: not UNKNOWN, not DOWN, answering."""
    return node.state not in ("UNKNOWN", "DOWN") and "NOT_RESPONDING" not in node.flags


def slurmd_started(c, node: str) -> str:
    return next(t for t in c.scontrol("show", "node", "-o", node).stdout.split() if t.startswith("SlurmdStartTime="))


def test_healthcheck_fails_when_slurmd_starts(slurm_cluster, tmp_path):
    """A node whose health check fails at slurmd's start ends registered and drained with
    gpuhc's reason, never stuck unregistered: at the cluster's first start (a node slurmctld has
    never heard from) and at a slurmd restart. HealthCheckInterval is long, so only the run
    slurmd makes at its start can have drained it."""
    wd = tmp_path / "start"
    n2 = tmp_path / "n2.yaml"
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), healthcheck=True, healthcheck_interval=3600,
                      healthcheck_node_state="ANY,CYCLE", gpuhc_config=base_config(wd),
                      node_scenarios={"n1": scenario_file(tmp_path / "n1.yaml", sick=True),
                                      "n2": scenario_file(n2, sick=False)})
    # gpuhc drains during slurmd's start-up check, before the node's first registration
    # (UNKNOWN+DRAIN for a moment); the node must then register, still drained.
    n1 = c.wait_for(lambda: (n := c.node("n1")).drained and registered(n) and n, 120, "n1 drained and registered")
    assert n1.reason == XID_REASON and n1.state == "IDLE", (n1.raw_state, n1.reason)
    assert [x.split(":")[0] for x in decisions(wd, "n1")][:2] == ["passive", "drained"]
    assert not c.node("n2").drained

    # n2's GPU falls off the bus while slurmd is down; slurmd comes back: drained, registered.
    before = slurmd_started(c, "n2")
    c.stop_slurmd("n2")
    scenario_file(n2, sick=True)
    c.start_slurmd("n2")
    slurmd_log = wd / "log" / "slurmd.n2.log"
    # slurmd logs the failed check once the program has ended; it may register before that.
    node = c.wait_for(lambda: (n := c.node("n2")).drained and registered(n) and slurmd_started(c, "n2") != before
                      and "health_check failed: rc:1" in slurmd_log.read_text() and n, 120,
                      "n2 drained and registered by its restarted slurmd, and its failed check logged",
                      pending=lambda: f"n2's decisions: {decisions(wd, 'n2')}")
    assert node.reason == XID_REASON and node.state == "IDLE", (node.raw_state, node.reason)


def boot_time(c, node: str) -> str:
    return next(t for t in c.scontrol("show", "node", "-o", node).stdout.split() if t.startswith("BootTime="))


@pytest.mark.parametrize("passes", [True, False], ids=["passes", "fails"])
def test_reboot_for_retest_through_real_reboot_program(slurm_cluster, tmp_path, passes, slurm_release):
    """quarantine's reboot for real: drained by gpuhc -> `gpuhc quarantine retest --reboot`
    (`scontrol reboot ASAP nextstate=DOWN reason=<gpuhc's>`) -> reboot pending -> the cluster's
    RebootProgram "reboots" that node only (its slurmd, with a new boot time) -> slurmd registers
    -> the boot unit (examples/systemd/gpuhc-retest.service's commands) retests -> resume, or
    quarantine cycle 1."""
    wd = tmp_path / "rb"
    scen = tmp_path / "n1.yaml"
    # ReturnToService=1, as slurm/slurm.conf.example asks of sites that use gpuhc's reboot: with
    # 2, Slurm 24.11 returns the node to service at its first answer after the reboot, before
    # the retest, whatever nextstate said (docs/slurm.md, "Slurm releases").
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), reboot=True, gpuhc_config=base_config(wd),
                      extra_conf=["ReturnToService=1"],
                      node_scenarios={"n1": scenario_file(scen, sick=False), "n2": str(HEALTHY)})
    calls = wd / "log" / "calls.log"  # written by the machines' boot units, which may not have started yet
    c.wait_for(lambda: calls.read_text().count(" boot-done ") == 2, 180, "first boot units done",
               pending=lambda: calls.read_text()[-1000:])
    c.scontrol("update", "NodeName=n1", "State=DRAIN", f"Reason={XID_REASON}")
    before = boot_time(c, "n1")
    if not passes:  # still sick after the reboot: a row remap pending (the GPU was not reset)
        scen.write_text(f"extends: {HEALTHY.parent / 'row-remap-pending.yaml'}\n")
    rq = gpuhc(c, "quarantine", "retest", "--reboot", "n1")
    assert rq.returncode == 0 and "reboot requested (nextstate=DOWN)" in rq.stdout, rq.stdout + rq.stderr
    pending = c.node("n1")
    assert "REBOOT" in pending.raw_state and pending.reason.startswith(XID_REASON), (pending.raw_state, pending.reason)

    c.wait_for(lambda: " reboot n1" in calls.read_text(), 120, "RebootProgram run on n1")
    c.wait_for(lambda: boot_time(c, "n1") != before, 120, "n1 registered with a new boot time")
    done = c.wait_for(lambda: re.findall(r" boot-done n1 rc=(\d+)", calls.read_text())[1:], 240,
                      "n1's boot-time retest finished", pending=lambda: calls.read_text()[-1000:])
    node = c.node("n1")
    boot_log = (wd / "log" / "boot.n1.log").read_text()
    if passes:
        # the retest, not Slurm, put it back: nextstate=DOWN held the node out until then
        assert done == ["0"] and "retest passed (was drained): resuming" in boot_log, boot_log
        assert back_in_service(node, slurm_release), (node.raw_state, node.reason)
    else:
        assert done == ["1"] and "quarantine [q1]" in boot_log, boot_log
        assert (node.drained or node.down) and node.reason == XID_REASON + " [q1]", (node.raw_state, node.reason)
    # only the node asked for rebooted
    assert " reboot n2" not in calls.read_text() and calls.read_text().count(" boot n2") == 1
    assert not c.node("n2").drained
