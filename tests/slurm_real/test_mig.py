"""MIG slices on a real Slurm: gres.conf declares MIG devices (MultipleFiles= of the parent's
device file and the GPU and compute instances' nvidia-caps files, stand-ins here), jobs get
slices through --gres=gpu:N, and slurmd runs gpuhc's prolog and epilog. The GPUs are the one
fake (an 8x A100 MIG scenario: other jobs' processes on GPU 1's gi7, gi12 and gi14): gpuhc must
judge the slice Slurm gave, not the physical GPU's index nor its siblings (issue 31).
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import RECOMMENDED, base_config, decisions

pytestmark = pytest.mark.slurm

MIG = REPO / "examples" / "scenarios" / "healthy-8xa100-mig.yaml"

# Slurm's index 0: GPU 1's gi13 (free); index 1: GPU 1's gi7 (pid 51001 runs there). The minors
# are the driver's for gpu1 (docs/facts.md, "Slurm's GPU numbers, MIG and shared GPUs").
GRES = """Name=gpu Type=fake MultipleFiles={dev}/nvidia1,{dev}/nvidia-caps/nvidia-cap255,{dev}/nvidia-caps/nvidia-cap256
Name=gpu Type=fake MultipleFiles={dev}/nvidia1,{dev}/nvidia-caps/nvidia-cap201,{dev}/nvidia-caps/nvidia-cap202
"""


def node_scenario(tmp_path) -> str:
    """The MIG node, its gres.conf left to Slurm's own file: only the driver's MIG minors come
    from the recording (this host has no /proc/driver/nvidia-caps)."""
    text = MIG.read_text()
    minors = text[text.index("  mig_minors: |"):]
    path = tmp_path / "n1.yaml"
    path.write_text(f"extends: {MIG}\ngres:\n{minors}")
    return str(path)


def test_jobs_on_mig_slices_are_judged_on_their_slice(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "c"
    c = slurm_cluster(workdir=wd, nodes=("n1",), prolog=True, epilog=True, gpus_per_node=2, gres_conf=GRES,
                      prolog_flags=RECOMMENDED["PrologFlags"], gpuhc_config=base_config(wd),
                      node_scenarios={"n1": node_scenario(tmp_path)})
    try:
        # One slice: Slurm's 0, gi13 of GPU 1, free while its siblings run other jobs.
        job = c.sbatch("-w", "n1", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true")
        assert c.wait_for_job(job, 180) == "COMPLETED"
        prolog = decisions(wd, "n1", "prolog")
        # Without AutoDetect a device has no unique id: Slurm puts its index in both variables.
        assert any("PASS" in x and "SLURM_JOB_GPUS=0 CUDA_VISIBLE_DEVICES=0 -> 0:gpu1 gi13/ci0" in x
                   for x in prolog), prolog
        assert any("PASS" in x and "0:gpu1 gi13/ci0" in x for x in decisions(wd, "n1", "epilog"))
        assert not c.node("n1").drained, c.node("n1")
        # Both slices: Slurm's 1 is gi7, where pid 51001 holds the slice: drained for that slice.
        job = c.sbatch("-w", "n1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "true")
        c.wait_for(lambda: re.search(r"Restarts=[1-9]", c.scontrol("show", "job", "-o", str(job)).stdout), 180,
                   f"job {job} requeued", pending=lambda: c.scontrol("show", "job", "-o", str(job)).stdout.strip())
        c.run(["scancel", str(job)], check=False)
        n1 = c.node("n1")
        assert n1.drained and n1.reason.startswith("gpuhc: occupancy gpu1 MIG gi7/ci0 holds 1 compute process"), n1
        assert "gi13" not in n1.reason
    finally:
        c.stop()
