"""The NVML read's MIG half (gpuhc/sources/nvml_mig.py) and the processes per MIG instance
(gpuhc/sources/gpu_procs.py), on the fake pynvml shaped like the real one."""

from __future__ import annotations

import pynvml as real

from gpuhc.model.nvml import MigInstance
from gpuhc.sources.gpu_procs import OccupancyLive
from gpuhc.sources.nvml import NvmlLive
from tests.helpers.fake_pynvml import FakeGpu, FakeMig, FakeNvml

ON = real.NVML_DEVICE_MIG_ENABLE


def mig_gpu(**kw) -> FakeGpu:
    # NVML's slots hold the instances in creation order; slot 3 empty (an instance destroyed)
    slots = [FakeMig(9, uuid="MIG-9"), FakeMig(7, uuid="MIG-7", compute_procs=[(4100, 4 << 30)]), FakeMig(8, uuid="MIG-8"),
             None, FakeMig(11, uuid="MIG-11", compute_procs=[(4200, 1 << 30)], memory=(1030 << 20, 9728 << 20))]
    return FakeGpu(name="NVIDIA A100-SXM4-80GB", mig_mode=ON, mig_devices=slots, **kw)


def test_read_gives_minor_and_mig_devices_skipping_empty_slots():
    fake = FakeNvml([FakeGpu(minor=3), mig_gpu(minor=0)])
    reading = NvmlLive(module=fake, gpus=[]).read()  # identity only: what the mapping needs
    plain, mig = reading.gpus
    assert (plain.minor, plain.mig_mode, plain.mig) == (3, None, [])
    assert (mig.minor, mig.mig_mode) == (0, True)
    assert [(i.gi, i.ci, i.uuid) for i in mig.mig] == [(9, 0, "MIG-9"), (7, 0, "MIG-7"), (8, 0, "MIG-8"), (11, 0, "MIG-11")]
    assert mig.mig[3].memory_used_mib == 1030.0 and mig.mig[3].memory_total_mib == 9728.0
    assert reading.notes == []  # an empty slot is no error


def test_occupancy_lists_each_instance_and_marks_its_processes(tmp_path):
    (proc := tmp_path / "proc").mkdir()
    occ = OccupancyLive(module=FakeNvml([mig_gpu()]), proc_root=str(proc)).read()
    (g,) = occ.gpus
    assert g.mig and [i.gi for i in g.instances] == [9, 7, 8, 11]
    assert [(p.pid, p.gi, p.ci) for p in g.processes] == [(4100, 7, 0), (4200, 11, 0)]


def test_epilog_waits_only_for_the_jobs_own_slice(tmp_path):
    from gpuhc.node.gpumap import JobScope

    (proc := tmp_path / "proc").mkdir()
    job = JobScope(gpus=[0], slices={0: [(9, 0)]}, shared=frozenset(), devices=())
    fake = FakeNvml([mig_gpu()])
    occ = OccupancyLive(module=fake, proc_root=str(proc), wait_s=2.0, poll_s=0.05, job=job).read()
    assert occ.waited_s < 0.5  # the siblings' processes (gi7, gi11) are other jobs': no wait
    busy = JobScope(gpus=[0], slices={0: [(7, 0)]}, shared=frozenset(), devices=())
    occ = OccupancyLive(module=FakeNvml([mig_gpu()]), proc_root=str(proc), wait_s=0.3, poll_s=0.05, job=busy).read()
    assert occ.waited_s >= 0.25  # its own slice still holds a process: waited the whole time


def test_label():
    assert MigInstance(3, 1).label == "gi3/ci1"
