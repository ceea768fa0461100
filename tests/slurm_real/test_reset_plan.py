"""`gpuhc quarantine reset --plan` against a real Slurm of each release (issue 30; docs/repair.md
"Where slurmd holds the GPUs"): its first line says what the installed release means for the
reset (from the release's own `scontrol --version`: 22.05 lets go of NVML after detection, 23.02
and later keep it in slurmd with AutoDetect=nvml), a process named slurmd holding the GPUs'
device files makes the path "reboot first", and the plan exits 1 while Slurm shows a job on the
node. The GPUs are the NVML stand-in (a scenario) and the processes a /proc tree
(tests/helpers/reset_fakes.py): the hardware boundary; the job and the node's state are Slurm's.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.reset_fakes import fake_proc
from tests.helpers.slurm_flows import HEALTHY, base_config, gpuhc
from tests.helpers.story import once

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm_cluster_module):
    wd = tmp_path_factory.mktemp("plan")
    proc = fake_proc(wd / "proc", HEALTHY)
    cfg = base_config(wd)
    # no unit to ask systemd about (the test machine may run none); persistence toggled by `true`
    cfg["slurm"]["remediation"] = {"reset": {"services": [], "proc_root": str(proc), "dev_root": str(wd),
                                             "nvidia_smi": "/bin/true"}}
    # NVML's process lists, none on any GPU: a scenario without them leaves the plan blind to NVML's holders
    scenario = wd / "n1.yaml"
    scenario.write_text(f"extends: {HEALTHY}\noccupancy:\n  gpus: []\n")
    c = slurm_cluster_module(workdir=wd, nodes=("n1", "n2"), gpuhc_config=cfg, node_scenarios={"n1": str(scenario)})
    c.proc = proc
    return c


def plan(c):
    return gpuhc(c, "quarantine", "reset", "--plan", "--gpus", "1", node="n1")


def plans(c) -> None:
    c.idle = plan(c)
    d = c.proc / "4100" / "fd"  # slurmd with AutoDetect=nvml on 23.02+: the control device and every GPU's
    d.mkdir(parents=True)
    for i, dev in enumerate(["/dev/nvidiactl"] + [f"/dev/nvidia{g}" for g in range(8)]):
        os.symlink(dev, d / str(i))
    (c.proc / "4100" / "comm").write_text("slurmd\n")
    (c.proc / "4100" / "cgroup").write_text("0::/system.slice/slurmd.service\n")
    c.held = plan(c)
    for p in sorted(d.iterdir()):
        p.unlink()
    c.job = c.sbatch("-w", "n1", "-o", "/dev/null", "--wrap", "sleep 60")
    assert c.wait_for_job(c.job, 120, ("RUNNING",)) == "RUNNING"
    c.busy = plan(c)
    c.run(["scancel", str(c.job)], check=False)


def test_the_plan_says_the_release_the_holder_and_the_job(cluster, slurm_release):
    once(cluster, plans)
    first = cluster.idle.stdout.splitlines()[0]
    major = slurm_release.version
    assert first.startswith(f"slurm {major}: "), cluster.idle.stdout + cluster.idle.stderr
    assert ("reboot first there" in first) == (major != "22.05"), first
    assert cluster.idle.returncode == 0 and cluster.idle.stdout.rstrip().endswith("path: reset"), cluster.idle.stdout
    last = cluster.held.stdout.rstrip().splitlines()[-1]
    assert cluster.held.returncode == 1 and last.startswith("path: reboot first: slurmd (pid 4100) holds"), last
    assert "BLOCKED: Slurm shows jobs on the node" in cluster.busy.stdout and cluster.busy.returncode == 1, \
        cluster.busy.stdout
