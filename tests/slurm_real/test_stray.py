"""A stray process on a real Slurm (slurmctld + slurmd on localhost): the prolog drains for it,
and the health check, which does not judge occupancy on a node in service, judges it while gpuhc
holds the node for it (gpuhc/slurm/policy/drain.py ``rejudge``). So the node is not resumed onto the
stray (the flapping docs/campaign.md measured), is resumed once the stray is gone, and, with the
ladder on, is rebooted: Slurm shows no job there, so the process is no job's
(gpuhc/slurm/repair/remediate.py). The GPUs are the one fake (a replayed scenario, the hardware
boundary); drain, requeue, resume and the reboot are Slurm's own.
"""

from __future__ import annotations

import re
import shutil

import pytest

from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import HEALTHY, RECOMMENDED, back_in_service, base_config, decisions, gpuhc
from tests.helpers.slurm_flows import reboot_and_retest

pytestmark = pytest.mark.slurm

STRAY = REPO / "examples" / "scenarios" / "stray-process.yaml"  # gpu1 held by pid 48213
IDLE = "occupancy:\n  gpus:\n" + "".join(
    f"    - {{index: {i}, memory_used_mib: 0, memory_total_mib: 81559}}\n" for i in range(8))


def stray_cluster(slurm_cluster, tmp_path, cfg, **kw):
    """One node whose gpu1 holds a stray; a job given GPUs 0-1 makes its prolog drain the node,
    and the requeued job is cancelled (its user gave up), so no job is left for the node."""
    scenario = tmp_path / "n1.yaml"
    shutil.copyfile(STRAY, scenario)
    scenario.write_text(scenario.read_text().replace("extends: healthy-8xh100.yaml", f"extends: {HEALTHY}"))
    (tmp_path / "healed.yaml").write_text(f"extends: {HEALTHY}\n{IDLE}")
    c = slurm_cluster(workdir=tmp_path / "c", nodes=("n1",), prolog=True, gpus_per_node=8,
                      prolog_flags=RECOMMENDED["PrologFlags"], gpuhc_config=cfg,
                      node_scenarios={"n1": str(scenario)}, **kw)
    if kw.get("reboot"):  # the machine's first boot runs the boot-time retest: let it finish first
        calls = c.workdir / "log" / "calls.log"
        c.wait_for(lambda: calls.exists() and any(x.split()[1:3] == ["boot-done", "n1"]
                                                  for x in calls.read_text().splitlines()), 180,
                   "the first boot-time retest", pending=lambda: calls.read_text()[-1000:])
    job = c.sbatch("-w", "n1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "true")
    c.wait_for(lambda: re.search(r"Restarts=[1-9]", c.scontrol("show", "job", "-o", str(job)).stdout), 120,
               f"job {job} requeued", pending=lambda: c.scontrol("show", "job", "-o", str(job)).stdout.strip())
    c.run(["scancel", str(job)], check=False)
    assert c.node("n1").reason.startswith("gpuhc: occupancy gpu1 holds 1 compute process"), c.node("n1")
    return c, scenario


def test_the_health_check_keeps_a_stray_drained_until_it_is_gone(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "c"
    c, scenario = stray_cluster(slurm_cluster, tmp_path, base_config(wd))  # cool-down 0, 3 clean runs
    try:
        for _ in range(4):  # more than resume_after: it used to be resumed here
            gpuhc(c, "healthcheck", node="n1")
        n1 = c.node("n1")
        assert n1.drained and n1.reason.startswith("gpuhc: occupancy gpu1"), n1
        lines = decisions(wd, "n1")
        assert sum(1 for x in lines if x.startswith("passive: FAIL")) == 4, lines
        assert any(x.startswith("keep: already drained by gpuhc (same reason)") for x in lines), lines
        shutil.copyfile(tmp_path / "healed.yaml", scenario)  # the stray exits
        for _ in range(3):
            gpuhc(c, "healthcheck", node="n1")
        assert back_in_service(c.node("n1"), slurm_release), c.node("n1")
        assert decisions(wd, "n1")[-1].startswith("resumed: resuming: 3 healthy runs"), decisions(wd, "n1")
    finally:
        c.stop()


def test_the_ladder_reboots_a_node_held_by_a_stray_no_job_owns(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "c"
    cfg = base_config(wd)
    # drain + reboot: [reboot], the shipped ladder. The stray's /proc entry, its real uid a user's:
    # a process whose owner cannot be read (or root's) would make the ladder wait (remediate.owner_of).
    proc = tmp_path / "proc"
    (proc / "48213").mkdir(parents=True)
    (proc / "48213" / "status").write_text("Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\n")
    cfg["slurm"]["remediation"] = {"enabled": True, "reset": {"proc_root": str(proc)}}
    c, scenario = stray_cluster(slurm_cluster, tmp_path, cfg, reboot=True)
    try:
        gpuhc(c, "healthcheck", node="n1")
        n1 = c.node("n1")
        assert "[reboot]" in n1.reason or {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & n1.flags, n1
        lines = decisions(wd, "n1")
        assert any(x.startswith("remediation: reboot: reboot for retest") for x in lines), lines
        # The reboot ends the stray; the boot-time retest (occupancy included) resumes the node.
        reboot_and_retest(c, tmp_path / "healed.yaml", scenario, lambda n: back_in_service(n, slurm_release))
        # The retest logs its verdict after Slurm shows the resume: wait for the line (it may find
        # the node already returned by Slurm, docs/slurm.md "Slurm releases": passed all the same).
        c.wait_for(lambda: any(x.startswith("retest passed (was drained)") for x in
                               decisions(wd, "n1", "quarantine retest")), 120, "the retest's verdict in its log",
                   pending=lambda: f"the retest's lines so far: {decisions(wd, 'n1', 'quarantine retest')}")
    finally:
        c.stop()
