"""mig-layout (gpuhc/checks/mig_layout.py): the MIG layout against the baseline, the job's slice
present; and the occupancy check's MIG and shared-GPU rules on a job's devices."""

from __future__ import annotations

from gpuhc.state import baseline as baseline_mod
from gpuhc.checks.base import Context
from gpuhc.checks.mig_layout import judge, layout_entry
from gpuhc.checks.occupancy import judge as occupancy
from gpuhc.node.gpumap import JobScope, Mapped
from gpuhc.model.nvml import MigInstance
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import SCENARIOS

MIG = str(SCENARIOS / "healthy-8xa100-mig.yaml")


def snap():
    s = load_scenario(MIG)
    return Snapshot("n", 1.0, nvml=s.nvml, occupancy=s.occupancy)


def test_layout_as_captured_passes_and_a_lost_instance_fails_with_its_own_action():
    good = snap()
    base = baseline_mod.capture(good)
    assert base["gpus"]["0000:0f:00.0"]["mig"][0] == "gi11/ci0 1g.10gb"
    results = judge(good, Context({}, baseline=base)).results
    assert {r.status for r in results} == {Status.PASS} and len(results) == 8
    after_reset = snap()
    after_reset.nvml.gpus[3].mig = after_reset.nvml.gpus[3].mig[:2]
    (bad,) = [r for r in judge(after_reset, Context({}, baseline=base)).results if r.status is not Status.PASS]
    assert bad.status is Status.FAIL and bad.subject == "gpu3" and bad.action is Action.RECREATE_MIG
    assert "missing: gi11/ci0 1g.10gb, gi12/ci0 1g.10gb" in bad.message and "(2 of 7 present" in bad.message


def test_mig_mode_turned_off_fails_and_an_extra_instance_warns():
    base = baseline_mod.capture(snap())
    s = snap()
    s.nvml.gpus[0].mig_mode, s.nvml.gpus[0].mig = False, []
    s.nvml.gpus[1].mig.append(MigInstance(3, 0, "MIG-x", "NVIDIA A100-SXM4-80GB MIG 1g.10gb"))
    by = {r.subject: r for r in judge(s, Context({}, baseline=base)).results}
    assert by["gpu0"].status is Status.FAIL and "MIG mode off, baseline has it on" in by["gpu0"].message
    assert by["gpu1"].status is Status.WARN and "gi3/ci0 1g.10gb" in by["gpu1"].message


def test_no_baseline_and_no_job_has_nothing_to_say():
    (r,) = judge(snap(), Context({})).results
    assert r.status is Status.NA and "8 GPU(s) in MIG mode" in r.message


def test_layout_entry_keeps_the_profile():
    assert layout_entry(MigInstance(7, 0, name="NVIDIA A100-SXM4-80GB MIG 1g.10gb")) == "gi7/ci0 1g.10gb"


# ---------------------------------------------------------------------------- occupancy on a job's devices


def job(*devices: Mapped) -> JobScope:
    from gpuhc.node.gpumap import scope

    return scope(list(devices))


def test_occupancy_counts_only_the_jobs_instance_and_its_memory():
    m = Mapped(index=12, files=(), minor=1, gpu=1, pci="0000:0f:00.0", gi=14, ci=0, mig_uuid="x")
    (r,) = occupancy(snap(), Context({"max_used_mib": 1024}, gpus=[1], job=job(m))).results
    # gi14 holds torchrun (pid 51003): its own slice, so it fails; siblings' jobs are not named
    assert r.status is Status.FAIL and "pid 51003" in r.message and "51001" not in r.message
    assert r.message.startswith("gpu1 MIG gi14/ci0 holds 1 compute process")


def test_occupancy_on_an_instance_with_memory_and_no_process_fails_on_the_instances_memory():
    inst = MigInstance(7, 0, "u", memory_used_mib=3000.0, memory_total_mib=9728.0)
    occ = Occupancy(True, gpus=[GpuOccupancy(0, mig=True, memory_used_mib=9000.0, instances=[inst])])
    m = Mapped(index=0, files=(), minor=0, gpu=0, pci="p", gi=7, ci=0, mig_uuid="u")
    (r,) = occupancy(Snapshot("n", 1.0, occupancy=occ), Context({"max_used_mib": 1024}, gpus=[0], job=job(m))).results
    assert r.status is Status.FAIL and "2.9 GiB in use" in r.message and r.value == 3000.0


def test_a_shared_gpu_is_not_failed_for_another_jobs_process():
    busy = GpuOccupancy(0, memory_used_mib=20000.0, processes=[GpuProcess(9, "python", 19000.0)])
    m = Mapped(index=0, files=("/dev/nvidia0",), minor=0, gpu=0, pci="p", shared=True)
    (r,) = occupancy(Snapshot("n", 1.0, occupancy=Occupancy(True, gpus=[busy])),
                     Context({"max_used_mib": 1024}, gpus=[0], job=job(m))).results
    assert r.status is Status.PASS and "shared" in r.message
    alone = Mapped(index=0, files=("/dev/nvidia0",), minor=0, gpu=0, pci="p")
    (r,) = occupancy(Snapshot("n", 1.0, occupancy=Occupancy(True, gpus=[busy])),
                     Context({"max_used_mib": 1024}, gpus=[0], job=job(alone))).results
    assert r.status is Status.FAIL
