"""The job activity source (issue 24): NVML's buffered samples through the fake pynvml, and the
job of each process from a /proc tree laid out as Slurm's cgroup plugins lay it out."""

from __future__ import annotations

import os

import pynvml as real
import pytest

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.sources.job_activity import ActivityLive, JobResolver, job_from_cgroup, job_from_environ

NOW = 1_795_697_800.0
US = 1_000_000

# /proc/<pid>/cgroup as slurmstepd leaves it: cgroup v2 under slurmstepd.scope (Slurm's
# cgroup_v2 documentation), the same with --enable-multiple-slurmd (<node>_slurmstepd.scope,
# plazonic/cgroup_exporter issue 8), cgroup v1's slurm/uid_<uid>/job_<id>/step_<s>/task_<n>
# (Slurm's cgroup documentation) and its multiple-slurmd slurm_<node>/ (cgroup_exporter PR 5).
# Paths written from those documents' descriptions, not copied from a node.
V2 = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"
V2_MULTI = "0::/system.slice/gpu01_slurmstepd.scope/job_77/step_batch/user/task_0\n"
V1 = ("12:freezer:/slurm/uid_1000/job_5150/step_0/task_1\n11:memory:/slurm/uid_1000/job_5150/step_0/task_1\n"
      "1:name=systemd:/system.slice/slurmd.service\n")
V1_MULTI = "4:devices:/slurm_gpu02/uid_0/job_31/step_extern/task_0\n"


@pytest.mark.parametrize("text,job", [(V2, "4242"), (V2_MULTI, "77"), (V1, "5150"), (V1_MULTI, "31"),
                                      ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
                                      ("0::/system.slice/job_x/step_0\n", None), ("", None),
                                      ("0::/home/job_12345678901234/\n", None),
                                      # a user's own delegated cgroups, named like slurmstepd's (issue 29)
                                      ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_1/x\n", None),
                                      ("0::/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/job_1\n", None),
                                      ("0::/system.slice/slurmstepd.scope/job_0042/step_0\n", "42"),
                                      ("4:devices:/user.slice/slurm/uid_0/job_1\n", None)])
def test_job_from_cgroup(text, job):
    assert job_from_cgroup(text) == job


def test_job_from_environ():
    assert job_from_environ(b"PATH=/bin\0SLURM_JOB_ID=88\0X=1\0") == "88"
    assert job_from_environ(b"SLURM_JOB_ID=88;rm -rf /\0") is None
    assert job_from_environ(b"SLURM_JOBID=88\0") is None
    assert job_from_environ(b"SLURM_JOB_ID=0000778\0") == "778"  # one job, one spelling (issue 29)


def proc(tmp_path, pid: int, cgroup: str | None = None, environ: bytes | None = None, status: str | None = "user") -> None:
    """A fake /proc/<pid>: its cgroup, environ and a real status (tests/fixtures/jobs/proc/<status>.status)."""
    from tests.helpers.paths import FIXTURES

    d = tmp_path / str(pid)
    d.mkdir()
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)
    if environ is not None:
        (d / "environ").write_bytes(environ)
    if status is not None:
        (d / "status").write_bytes((FIXTURES / "jobs" / "proc" / f"{status}.status").read_bytes())


def series(value: int, seconds: int = 20, step_ms: int = 200) -> list[tuple[int, int]]:
    return [(int(NOW * US) - i * step_ms * 1000, value) for i in range(seconds * 1000 // step_ms)]


def held(pid: int, util: int, mem: int, mw: int, **kw) -> FakeGpu:
    return FakeGpu(compute_procs=[(pid, 1 << 30)], samples={
        real.NVML_GPU_UTILIZATION_SAMPLES: series(util), real.NVML_MEMORY_UTILIZATION_SAMPLES: series(mem),
        real.NVML_TOTAL_POWER_SAMPLES: series(mw, 3, 20)}, **kw)


def read(gpus, tmp_path, **kw):
    return ActivityLive(module=FakeNvml(gpus), proc_root=str(tmp_path), clock=lambda: NOW, **kw).read()


def test_reads_only_held_gpus_and_the_window(tmp_path):
    proc(tmp_path, 100, V2)
    nv_gpus = [held(100, 100, 0, 130000), FakeGpu()]
    act = read(nv_gpus, tmp_path, window_s=15)
    (g,) = act.gpus
    assert g.index == 0 and g.jobs == ["4242"] and g.via == "cgroup"
    assert len(g.gpu_util) == 75 and set(g.gpu_util) == {100.0} and set(g.mem_util) == {0.0}
    assert g.power_w[0] == 130.0 and g.power_limit_w == 700.0 and 14.5 < g.span_s <= 15
    assert g.sm_activity is None


def test_environ_only_without_a_slurm_cgroup_and_only_when_allowed(tmp_path):
    proc(tmp_path, 200, "0::/user.slice\n", b"SLURM_JOB_ID=99\0")
    proc(tmp_path, 300, V1, b"SLURM_JOB_ID=1\0")  # the cgroup wins over what the user set
    act = read([held(200, 0, 0, 70000), held(300, 50, 10, 300000)], tmp_path)
    assert [(g.jobs, g.via) for g in act.gpus] == [(["99"], "environ"), (["5150"], "cgroup")]
    act = read([held(200, 0, 0, 70000)], tmp_path, environ=False)
    assert act.gpus == [] and act.unmapped_pids == 1


def test_gone_and_foreign_processes_are_counted_not_guessed(tmp_path):
    proc(tmp_path, 400, "0::/system.slice/sshd.service\n")
    act = read([held(400, 10, 1, 90000), held(999, 10, 1, 90000)], tmp_path)
    assert act.gpus == [] and act.unmapped_pids == 2


def test_a_link_planted_for_cgroup_is_not_followed(tmp_path):
    (tmp_path / "secret").write_text(V2)
    (tmp_path / "500").mkdir()
    os.symlink(tmp_path / "secret", tmp_path / "500" / "cgroup")
    assert JobResolver(str(tmp_path), environ=False).job_of(500) == (None, "cgroup")


def test_no_newer_sample_and_not_supported_are_empty_series(tmp_path):
    proc(tmp_path, 100, V2)
    g = held(100, 100, 0, 130000)
    g.samples[real.NVML_TOTAL_POWER_SAMPLES] = [(int((NOW - 60) * US), 1)]  # only old: NOT_FOUND
    del g.samples[real.NVML_MEMORY_UTILIZATION_SAMPLES]  # NOT_SUPPORTED
    (a,) = read([g], tmp_path).gpus
    assert a.power_w == [] and a.mem_util == [] and a.gpu_util


def test_gpm_sm_activity_when_asked_and_supported(tmp_path):
    proc(tmp_path, 100, V2)
    proc(tmp_path, 101, V2)
    nv = FakeNvml([held(100, 100, 0, 130000, gpm_sm=18.0, gpm_occupancy=0.0118), held(101, 100, 0, 130000)])
    act = ActivityLive(module=nv, proc_root=str(tmp_path), clock=lambda: NOW, gpm_window_s=0.01).read()
    assert [g.sm_activity for g in act.gpus] == [18.0, None]
    assert [g.sm_occupancy for g in act.gpus] == [0.0118, None]  # both from one call, per GPU
    assert nv.calls["nvmlGpmSampleAlloc"] == nv.calls["nvmlGpmSampleFree"] == 2
    nv = FakeNvml([held(100, 99, 30, 690000, gpm_sm=18.0)])  # training, GPM not asked for: not taken
    ActivityLive(module=nv, proc_root=str(tmp_path), clock=lambda: NOW).read()
    assert nv.calls["nvmlGpmSampleAlloc"] == 0


def test_nvml_missing_or_a_gpu_failing(tmp_path):
    act = ActivityLive(module=FakeNvml([], init_error=real.NVML_ERROR_DRIVER_NOT_LOADED)).read()
    assert not act.available and "driver not loaded" in act.error.lower()
    proc(tmp_path, 100, V2)
    lost = held(100, 100, 0, 1, lost=True)
    assert read([lost, held(100, 99, 30, 690000)], tmp_path).gpus[0].index == 1


def test_two_jobs_on_two_mig_slices_of_one_gpu_are_two_jobs(tmp_path):
    """Each MIG device's own process list maps its processes to its slice (issue 31): the job
    check sees job 4242 on gpu0 gi7/ci0 and job 5150 on gpu0 gi8/ci0, not one GPU with both."""
    from tests.helpers.fake_pynvml import FakeMig

    proc(tmp_path, 100, V2)
    proc(tmp_path, 300, V1)
    gpu = held(100, 0, 0, 70000, mig_mode=real.NVML_DEVICE_MIG_ENABLE,
               mig_devices=[FakeMig(7, compute_procs=[(100, 1 << 30)]), FakeMig(8, compute_procs=[(300, 1 << 30)]),
                            FakeMig(9)])
    act = read([gpu], tmp_path)
    assert [(g.index, g.instance, g.jobs) for g in act.gpus] == [(0, "gi7/ci0", ["4242"]), (0, "gi8/ci0", ["5150"])]
# Issue 32: the host side of the ranks, each job's node count and name.
def ranked(tmp_path, pid: int, which: str, env: bytes | None = None) -> None:
    env = env if env is not None else b"SLURM_JOB_NUM_NODES=1\0SLURM_JOB_NAME=llm\0SLURM_PROCID=%d\0" % (pid - 100)
    import shutil

    from tests.helpers.paths import FIXTURES

    if not (tmp_path / str(pid)).exists():
        proc(tmp_path, pid, V2, env)
    for ext in ("stat", "io"):
        shutil.copy(FIXTURES / "jobs" / "proc" / f"{which}.{ext}", tmp_path / str(pid) / ext)


def test_a_suspected_hang_gets_a_second_look_at_the_processes_a_healthy_job_none(tmp_path):
    import time

    ranked(tmp_path, 100, "writer-2")
    ranked(tmp_path, 101, "sleeper")
    spin_and_idle = [held(100, 0, 0, 120000), held(101, 100, 0, 130000)]
    t0 = time.monotonic()
    act = read(spin_and_idle, tmp_path, progress_window_s=0.2)
    assert time.monotonic() - t0 >= 0.2
    assert act.job_nodes == {"4242": 1} and act.job_names == {"4242": "llm"}
    assert [g.rank for g in act.gpus] == [0, 1]
    g0, g1 = act.gpus
    assert g0.pids == [100] and g0.host_state == "R" and g0.host_dt_s >= 0.19 and g0.host_cpu_s == 0.0
    assert g1.host_state == "S" and g1.host_cpu_total_s == 0.0
    t0 = time.monotonic()
    healthy = read([held(100, 99, 30, 690000), held(101, 99, 30, 690000)], tmp_path, progress_window_s=2)
    assert time.monotonic() - t0 < 1.5
    assert [g.host_dt_s for g in healthy.gpus] == [None, None] and healthy.gpus[0].host_cpu_total_s == 0.34


def test_a_kept_reader_measures_progress_between_reads_without_waiting(tmp_path):
    ranked(tmp_path, 100, "writer-1")
    ranked(tmp_path, 101, "sleeper")
    reader = ActivityLive(module=FakeNvml([held(100, 0, 0, 120000), held(101, 100, 0, 130000)]), proc_root=str(tmp_path),
                          clock=lambda: NOW, progress_window_s=0)
    first = reader.read()
    assert first.gpus[0].host_dt_s is None
    ranked(tmp_path, 100, "writer-2")
    g0, g1 = reader.read().gpus
    assert g0.host_write_bytes == 1008730112 - 522190848 and g0.host_cpu_s == pytest.approx(0.13)
    assert g1.host_cpu_s == 0.0 and g1.host_write_bytes == 0.0


def test_gpm_between_reads_pairs_each_read_with_the_last_and_frees_what_it_let_go(tmp_path):
    proc(tmp_path, 100, V2)
    nv = FakeNvml([held(100, 99, 30, 690000, gpm_sm=97.0)])  # training: no second look of its own
    reader = ActivityLive(module=nv, proc_root=str(tmp_path), clock=lambda: NOW, gpm_between_reads=True)
    assert reader.read().gpus[0].sm_activity is None  # one sample: nothing to compare with yet
    assert reader.read().gpus[0].sm_activity == 97.0
    nv.gpus[0].compute_procs = []
    assert reader.read().gpus == []
    assert nv.calls["nvmlGpmSampleAlloc"] == nv.calls["nvmlGpmSampleFree"] == 2


def test_a_suspected_all_spin_hang_gets_gpm_over_the_second_look_a_healthy_read_none(tmp_path):
    for pid in (100, 101, 102):
        ranked(tmp_path, pid, "sleeper")
    spinning = [held(100, 100, 0, 130000, gpm_sm=21.0), held(101, 100, 0, 130000, gpm_sm=21.0),
                held(102, 100, 0, 130000, gpm_sm=0.8)]
    nv = FakeNvml(spinning)
    act = ActivityLive(module=nv, proc_root=str(tmp_path), clock=lambda: NOW, progress_window_s=0.05).read()
    assert [g.sm_activity for g in act.gpus] == [21.0, 21.0, 0.8] and act.gpus[0].host_dt_s is not None
    assert nv.calls["nvmlGpmSampleAlloc"] == nv.calls["nvmlGpmSampleFree"] == 6
    nv = FakeNvml([held(100, 99, 30, 690000, gpm_sm=80.0), held(101, 99, 30, 690000, gpm_sm=80.0)])
    act = ActivityLive(module=nv, proc_root=str(tmp_path), clock=lambda: NOW, progress_window_s=0.05).read()
    assert [g.sm_activity for g in act.gpus] == [None, None] and nv.calls["nvmlGpmSampleAlloc"] == 0


def test_the_checks_thresholds_reach_the_reader():
    from gpuhc.checks.jobs import source_settings

    r = ActivityLive(**source_settings({"progress_window_s": 0.2, "spin_mem_util_max": 3}))
    assert r.progress_window_s == 0.2 and r._spin_mem == 3.0 and r.window_s == 15.0 and r.gpm_window_s == 0.0


# ------------------------------------------------------------------ whose process (issue 29)


@pytest.mark.parametrize("status,uid", [("user", 1000), ("nobody", 65534), ("root", 0),
                                        ("setuid", 1000),  # the real uid, not the effective one
                                        ("forged-name", 1000)])  # a name can't add a Uid line
def test_the_owner_is_the_real_uid_of_the_kernels_status(tmp_path, status, uid):
    proc(tmp_path, 600, V2, status=status)
    assert JobResolver(str(tmp_path)).owner_of(600) == uid


def test_each_jobs_owners_are_recorded_per_gpu_and_an_unreadable_owner_is_no_ones(tmp_path):
    proc(tmp_path, 700, V2, status="user")
    proc(tmp_path, 701, V2, status="nobody")  # another user's process in the job's cgroup
    proc(tmp_path, 702, V1, status="root")
    proc(tmp_path, 703, V1, status=None)  # gone before its status was read
    (tmp_path / "704").mkdir()
    (tmp_path / "704" / "cgroup").write_text(V2)
    os.symlink(tmp_path / "700" / "status", tmp_path / "704" / "status")  # a planted link: not followed
    two = FakeGpu(compute_procs=[(700, 1 << 30), (701, 1 << 30)], samples=held(700, 100, 0, 130000).samples)
    act = read([two, held(702, 100, 0, 130000), held(703, 100, 0, 130000), held(704, 100, 0, 130000)], tmp_path)
    assert [(g.index, g.jobs, g.owners) for g in act.gpus] == [(0, ["4242"], {"4242": [1000, 65534]}),
                                                              (1, ["5150"], {"5150": [0]})]
    assert act.unmapped_pids == 2
