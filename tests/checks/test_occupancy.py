"""GPU occupancy (issue 14): the check's rules, the live reader against the fake pynvml, the
scenario format, and how the runner and the Slurm flows scope it."""

from __future__ import annotations

import os
import textwrap

import pynvml as real
import pytest

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.checks.base import Context
from gpuhc.checks.occupancy import CHECKS, judge, wait_for_stage
from gpuhc.errors import SourceError
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources.gpu_procs import OccupancyLive
from gpuhc.sources.scenario import load_scenario
from gpuhc.sources.snapshot_format import dump_snapshot, dump_yaml
from tests.helpers.paths import REPO

GiB = 1 << 30
DEFAULTS = CHECKS[0].defaults
EXAMPLES = os.path.join(REPO, "examples", "scenarios")


def snap(*gpus: GpuOccupancy, waited: float = 0.0) -> Snapshot:
    return Snapshot("n1", 0.0, occupancy=Occupancy(available=True, gpus=list(gpus), waited_s=waited))


def ctx(gpus: list[int] | None = None, **t) -> Context:
    return Context(thresholds={**DEFAULTS, **t}, gpus=gpus)


def by_subject(out) -> dict:
    return {r.subject: r for r in out.results}


# ------------------------------------------------------------------------------------- the check


def test_a_compute_process_fails_and_drains_naming_pid_name_and_gib():
    out = judge(snap(GpuOccupancy(0, memory_used_mib=3),
                     GpuOccupancy(1, memory_used_mib=20485, processes=[GpuProcess(48213, "python3", 20480.0)])), ctx())
    r = by_subject(out)
    assert r["gpu0"].status is Status.PASS
    assert r["gpu1"].status is Status.FAIL and r["gpu1"].action.drains and r["gpu1"].value == [48213]
    assert r["gpu1"].message == "gpu1 holds 1 compute process: pid 48213 (python3, 20.0 GiB); 20.0 GiB in use"


def test_a_process_proc_no_longer_has_is_named_as_such():
    out = judge(snap(GpuOccupancy(2, memory_used_mib=1000, processes=[GpuProcess(77, None, 900.0, gone=True)])), ctx())
    (r,) = out.results
    assert r.status is Status.FAIL and "pid 77 (no longer in /proc, 0.9 GiB)" in r.message


def test_memory_held_with_no_process_is_the_same_finding():
    (r,) = judge(snap(GpuOccupancy(3, memory_used_mib=3072)), ctx()).results
    assert r.status is Status.FAIL and r.action.drains
    assert r.message.startswith("gpu3 has 3.0 GiB in use with no process listed (leaked context")
    assert (r.value, r.threshold) == (3072, 1024)


def test_memory_threshold_is_configurable():
    (r,) = judge(snap(GpuOccupancy(3, memory_used_mib=3072)), ctx(max_used_mib=4096)).results
    assert r.status is Status.PASS


def test_a_graphics_only_process_is_no_finding_but_its_memory_counts():
    xorg = GpuProcess(1500, "Xorg", 40.0, kinds="graphics")
    (ok,) = judge(snap(GpuOccupancy(0, memory_used_mib=45, processes=[xorg])), ctx()).results
    assert ok.status is Status.PASS and "1 graphics process" in ok.message
    big = GpuProcess(1500, "Xorg", 2048.0, kinds="graphics")
    (bad,) = judge(snap(GpuOccupancy(0, memory_used_mib=2100, processes=[big])), ctx()).results
    assert bad.status is Status.FAIL and "by pid 1500 (Xorg, graphics, 2.0 GiB)" in bad.message


def test_only_the_stage_gpus_are_judged():
    busy = GpuOccupancy(1, memory_used_mib=9000, processes=[GpuProcess(9, "python", 8000.0)])
    out = judge(snap(GpuOccupancy(0, memory_used_mib=0), busy), ctx(gpus=[0]))
    assert [(r.subject, r.status) for r in out.results] == [("gpu0", Status.PASS)]


def test_many_processes_are_counted_not_all_named():
    procs = [GpuProcess(100 + i, "rank", 1024.0) for i in range(5)]
    (r,) = judge(snap(GpuOccupancy(0, memory_used_mib=5200, processes=procs)), ctx()).results
    assert "holds 5 compute processes" in r.message and "and 2 more" in r.message and "pid 103" not in r.message


def test_the_epilog_says_how_long_it_waited():
    busy = GpuOccupancy(0, memory_used_mib=900, processes=[GpuProcess(9, "python", 800.0)])
    (r,) = judge(snap(busy, waited=5.02), ctx()).results
    assert "holds 1 compute process after waiting 5 s:" in r.message


def test_a_gpu_nvml_cannot_list_is_an_error_not_a_pass():
    (r,) = judge(snap(GpuOccupancy(0, error="no NVML handle: GPU is lost")), ctx()).results
    assert r.status is Status.ERROR and not r.action.drains and "GPU is lost" in r.message


def test_not_read_or_no_nvml_is_na():
    assert judge(Snapshot("n1", 0.0), ctx()).results[0].status is Status.NA
    gone = Snapshot("n1", 0.0, occupancy=Occupancy(available=False, error="NVIDIA driver not loaded"))
    (r,) = judge(gone, ctx()).results
    assert r.status is Status.NA and "driver not loaded" in r.message


def test_only_the_epilog_waits_and_never_past_the_check_timeout():
    # the bound the epilog waits for is the next prolog's: memory left with no process (leaked_mib)
    assert wait_for_stage("prolog", DEFAULTS, 15.0) == (0.0, 15)
    assert wait_for_stage("bootstrap", DEFAULTS, 15.0) == (0.0, 15)
    assert wait_for_stage("epilog", DEFAULTS, 15.0) == (14.0, 15)
    assert wait_for_stage("epilog", {"epilog_wait_s": 60, "leaked_mib": 64}, 15.0) == (14.0, 64)


def test_the_epilog_waits_20_s_by_default_within_the_check_timeout_and_the_epilogs_budget():
    # A large context can take tens of seconds to free after the job ended (issue 35's campaign:
    # 5 s drained a node at 1 % of job ends); the wait is only spent while a GPU is still held.
    from gpuhc.config.load import CORE_SCHEMA

    assert DEFAULTS["epilog_wait_s"] == 20.0 and CHECKS[0].timeout_s == 25.0
    assert wait_for_stage("epilog", DEFAULTS, CHECKS[0].timeout_s) == (20.0, 15)
    assert CHECKS[0].timeout_s <= CORE_SCHEMA["budget_s"]["epilog"].default - 5.0


def test_threshold_validation():
    assert CHECKS[0].validate({**DEFAULTS, "epilog_wait_s": -1})
    assert not CHECKS[0].validate(dict(DEFAULTS))


def test_never_in_the_passive_stage():
    assert "passive" not in CHECKS[0].stages
    assert set(CHECKS[0].stages) == {"prolog", "epilog", "bootstrap"}


# ----------------------------------------------------------------------------- the live reader


def fake_proc(tmp_path, **names: str) -> str:
    """A /proc stand-in holding the given pids (pid=name)."""
    root = tmp_path / "proc"
    for pid, name in names.items():
        (root / pid.lstrip("p")).mkdir(parents=True)
        (root / pid.lstrip("p") / "comm").write_text(name + "\n")
        (root / pid.lstrip("p") / "status").write_text(f"Name:\t{name}\nUid:\t{1000 + len(name)}\t0\t0\t0\n")
    root.mkdir(exist_ok=True)
    return str(root)


def test_reader_merges_compute_and_graphics_and_names_processes(tmp_path):
    gpu = FakeGpu(compute_procs=[(4242, 20 * GiB), (5000, None)], graphics_procs=[(4242, 20 * GiB), (1500, 40 << 20)],
                  memory=(int(20.1 * GiB), 80 * GiB))
    fake = FakeNvml([FakeGpu(), gpu])
    occ = OccupancyLive(module=fake, proc_root=fake_proc(tmp_path, p4242="python3", p1500="Xorg")).read()
    assert occ.available and [g.index for g in occ.gpus] == [0, 1] and occ.waited_s == 0.0
    idle, busy = occ.gpus
    assert idle.processes == [] and idle.memory_used_mib == 4.0  # v2: without the driver's reserve
    assert busy.memory_used_mib == pytest.approx(20582.4) and busy.memory_total_mib == 81920.0
    # the real uid of /proc/<pid>/status (not the effective one, nor the directory's owner)
    assert busy.processes == [
        GpuProcess(1500, "Xorg", 40.0, "graphics", uid=1004),
        GpuProcess(4242, "python3", 20480.0, "compute+graphics", uid=1007),
        GpuProcess(5000, None, None, "compute", gone=True),
    ]
    assert fake.initialised == 0


def test_reader_leaves_out_its_own_process(tmp_path):
    fake = FakeNvml([FakeGpu(compute_procs=[(os.getpid(), 1 << 20)])])
    (g,) = OccupancyLive(module=fake, proc_root=fake_proc(tmp_path)).read().gpus
    assert g.processes == []


def test_reader_reads_only_the_wanted_gpus(tmp_path):
    fake = FakeNvml([FakeGpu() for _ in range(4)])
    occ = OccupancyLive(gpus=[3, 1], module=fake, proc_root=fake_proc(tmp_path)).read()
    assert [g.index for g in occ.gpus] == [1, 3]
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2


def test_reader_falls_back_to_v1_memory_on_old_drivers(tmp_path):
    gpu = FakeGpu(fail={"nvmlDeviceGetMemoryInfo_v2": real.NVML_ERROR_FUNCTION_NOT_FOUND})
    (g,) = OccupancyLive(module=FakeNvml([gpu]), proc_root=fake_proc(tmp_path)).read().gpus
    assert g.memory_used_mib == 504.0  # v1 counts the reserve: the threshold's default leaves room


def test_epilog_wait_ends_when_the_processes_exit(tmp_path):
    gpu = FakeGpu(compute_procs=[(4242, GiB)], procs_exit_after=2)
    src = OccupancyLive(wait_s=5.0, poll_s=0.01, module=FakeNvml([gpu]), proc_root=fake_proc(tmp_path, p4242="python"))
    occ = src.read()
    assert occ.gpus[0].processes == [] and 0.0 < occ.waited_s < 5.0


def test_epilog_wait_gives_up_and_reports_what_is_left(tmp_path):
    gpu = FakeGpu(compute_procs=[(4242, GiB)])
    src = OccupancyLive(wait_s=0.2, poll_s=0.05, module=FakeNvml([gpu]), proc_root=fake_proc(tmp_path, p4242="python"))
    occ = src.read()
    assert [p.pid for p in occ.gpus[0].processes] == [4242] and occ.waited_s >= 0.2
    (r,) = judge(Snapshot("n1", 0.0, occupancy=occ), ctx()).results
    assert r.status is Status.FAIL and "pid 4242 (python, 1.0 GiB)" in r.message


def test_epilog_wait_also_lets_a_context_tear_down(tmp_path):
    class Draining(FakeNvml):
        """The process is gone; its memory goes a moment later, as a context is torn down."""

        def nvmlDeviceGetMemoryInfo(self, h, version=None):
            self.calls["memory reads"] += 1
            if self.calls["memory reads"] > 2:
                self.gpus[h].memory = (4 << 20, 80 << 30)
            return super().nvmlDeviceGetMemoryInfo(h, version)

    fake = Draining([FakeGpu(memory=(6 << 30, 80 << 30))])
    src = OccupancyLive(wait_s=5.0, poll_s=0.01, module=fake, proc_root=fake_proc(tmp_path), settle_mib=15)
    occ = src.read()
    assert occ.gpus[0].memory_used_mib == 4.0 and 0.0 < occ.waited_s < 5.0
    assert judge(Snapshot("n1", 0.0, occupancy=occ), ctx()).results[0].status is Status.PASS


def test_a_graphics_process_is_not_waited_for(tmp_path):
    gpu = FakeGpu(graphics_procs=[(1500, 40 << 20)])
    occ = OccupancyLive(wait_s=5.0, module=FakeNvml([gpu]), proc_root=fake_proc(tmp_path, p1500="Xorg")).read()
    assert occ.waited_s < 0.5


def test_a_lost_gpu_is_kept_with_its_error(tmp_path):
    fake = FakeNvml([FakeGpu(), FakeGpu(handle_error=real.NVML_ERROR_GPU_IS_LOST), FakeGpu(lost=True)])
    occ = OccupancyLive(module=fake, proc_root=fake_proc(tmp_path)).read()
    assert occ.gpus[0].error is None
    assert "no NVML handle" in occ.gpus[1].error and "cannot list processes" in occ.gpus[2].error


def test_no_nvml_is_a_reading_not_an_exception(tmp_path):
    occ = OccupancyLive(module=FakeNvml([], init_error=real.NVML_ERROR_DRIVER_NOT_LOADED)).read()
    assert not occ.available and "driver not loaded" in occ.error


def test_not_supported_process_listing_is_no_process(tmp_path):
    gpu = FakeGpu(fail={"nvmlDeviceGetGraphicsRunningProcesses": real.NVML_ERROR_NOT_SUPPORTED})
    (g,) = OccupancyLive(module=FakeNvml([gpu]), proc_root=fake_proc(tmp_path)).read().gpus
    assert g.error is None and g.processes == []
    # ... for this check; the list is named, and the reset plan reads it as holders it cannot see
    assert g.unlisted == ["graphics"]


def test_process_name_is_read_bounded_and_printable(tmp_path):
    root = fake_proc(tmp_path, p4242="py\x1bthon")
    gpu = FakeGpu(compute_procs=[(4242, GiB)])
    (g,) = OccupancyLive(module=FakeNvml([gpu]), proc_root=root).read().gpus
    # escaped as the reset plan and the services check show the same process (gpuhc/node/holders.py)
    assert g.processes[0].name == "py\\x1bthon"
    (tmp_path / "proc" / "4242" / "comm").write_text("x" * 1000)
    (g,) = OccupancyLive(module=FakeNvml([gpu]), proc_root=root).read().gpus
    assert g.processes[0].name is None and not g.processes[0].gone


# ------------------------------------------------------------------------------ scenario format


def write(tmp_path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_the_stray_process_example_replays_as_the_issue_saw_it():
    sc = load_scenario(os.path.join(EXAMPLES, "stray-process.yaml"))
    occ = sc.occupancy_source().read()
    assert len(occ.gpus) == 8  # every GPU of the node, listed or not
    assert occ.gpus[1].processes == [GpuProcess(48213, "python3", 20480.0, "compute")]
    assert occ.gpus[1].uuid == sc.nvml.gpus[1].uuid


def test_snapshot_of_occupancy_replays_identically(tmp_path):
    sc = load_scenario(os.path.join(EXAMPLES, "stray-process.yaml"))
    s = Snapshot("n1", 1.0, nvml=sc.nvml, occupancy=sc.occupancy_source().read())
    path = tmp_path / "snap.yaml"
    path.write_text(dump_yaml(s))
    again = load_scenario(str(path))
    assert again.occupancy == s.occupancy
    assert dump_snapshot(s)["occupancy"]["gpus"][1]["processes"][0]["pid"] == 48213


def test_a_scenario_step_can_let_the_process_exit(tmp_path):
    path = write(tmp_path, f"""\
        extends: {os.path.join(EXAMPLES, 'stray-process.yaml')}
        steps:
          - occupancy: {{gpus: [{{index: 1, memory_used_mib: 2}}]}}
        """)
    assert load_scenario(path, 0).occupancy.gpus[1].processes
    assert not load_scenario(path, 1).occupancy.gpus[1].processes


@pytest.mark.parametrize("body, where, what", [
    ("occupancy: {gpus: [{index: 0, processes: [{name: x}]}]}", "occupancy.gpus.0.processes.0", "needs its `pid`"),
    ("occupancy: {gpus: [{index: 0, processes: [{pid: 1, kinds: cuda}]}]}", "kinds", "must be one of"),
    ("occupancy: {gpus: [{index: 0, memory_used_mib: -1}]}", "memory_used_mib", "must not be negative"),
    ("occupancy: {gpus: [{index: 5}]}", "occupancy.gpus.0.index", "GPU 5 does not exist"),
    ("occupancy: {gpus: [{index: 0}, {index: 0}]}", "occupancy.gpus.1.index", "listed twice"),
    ("occupancy: {gpus: [{memory_used_mib: 1}]}", "occupancy.gpus.0", "needs its `index`"),
    ("occupancy: {gpus: [{index: 0, pid: 3}]}", "occupancy.gpus.0.pid", "unknown occupancy GPU field"),
])
def test_bad_occupancy_sections_name_file_line_and_key(tmp_path, body, where, what):
    path = write(tmp_path, f"""\
        gpus: [{{name: H100, uuid: GPU-0, pci_bus_id: "0000:18:00.0"}}]
        {body}
        """)
    with pytest.raises(SourceError) as e:
        load_scenario(path)
    assert f"{path}:2:" in str(e.value) and where in str(e.value) and what in str(e.value)


# --------------------------------------------------------------------- runner and Slurm flows


def run(stage: str, tmp_path, gpus=None, occupancy=True):
    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.run.runner import run_stage
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec

    opts = RunOptions(stage=stage, config=Config(defaults(schema())), state_dir=str(tmp_path / "state"), gpus=gpus,
                      sources=SourceSpec(nvml_scenario=os.path.join(EXAMPLES, "stray-process.yaml")),
                      occupancy=occupancy)
    return [r for r in run_stage(opts).results if r.check == "occupancy"]


def test_prolog_fails_only_on_the_occupied_gpu(tmp_path):
    res = run("prolog", tmp_path)
    assert {r.subject for r in res if r.status is Status.FAIL} == {"gpu1"}
    assert len(res) == 8
    assert [r.status for r in run("prolog", tmp_path, gpus=[0, 2])] == [Status.PASS, Status.PASS]


def test_passive_stage_never_reads_occupancy(tmp_path):
    assert run("passive", tmp_path) == []


def test_a_job_without_a_gpu_list_does_not_judge_occupancy(tmp_path):
    assert run("prolog", tmp_path, occupancy=False) == []


def test_slurm_flows_scope_occupancy_to_the_jobs_gpus(tmp_path, monkeypatch):
    from gpuhc.slurm.flows.entry import _job_scope
    from tests.helpers.minislurm import OK, flow as make_flow

    for env, gpus, judged in (({"SLURM_JOB_GPUS": "1,3"}, [1, 3], True), ({"CUDA_VISIBLE_DEVICES": "2"}, [2], True),
                              ({}, None, False), ({"SLURM_JOB_GPUS": "GPU-4f1c"}, None, False)):
        _, flow = make_flow(tmp_path, monkeypatch, "prolog", None, [OK], env=env)
        where = _job_scope(flow)
        assert (flow.opts.gpus, flow.opts.occupancy) == (gpus, judged)
        assert ("occupancy not judged" in where) is not judged


def test_turned_off_the_active_checks_keep_a_busy_gpu_an_error(tmp_path, monkeypatch):
    # A site sharing GPUs between jobs turns occupancy off; the active suite must follow.
    from gpuhc.run import runner
    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec

    seen = {}
    monkeypatch.setattr("gpuhc.active.run_active", lambda stage, ctx: seen.setdefault("ctx", ctx) and [])
    data = defaults(schema())
    for enabled in (True, False):
        data["checks"] = {"occupancy": {"enabled": enabled}}
        opts = RunOptions(stage="epilog", config=Config(data), sources=SourceSpec(), state_dir=str(tmp_path))
        seen.clear()
        runner._run_active(opts, runner.RunReport("n1", "epilog", 0.0), None, None, 1e12)
        assert seen["ctx"].busy_is_finding is enabled


def test_gpuhc_snapshot_records_the_processes(tmp_path):
    from gpuhc.run.runner import read_snapshot
    from gpuhc.sources import SourceSpec

    snap = read_snapshot(SourceSpec(nvml_scenario=os.path.join(EXAMPLES, "stray-process.yaml")), "n1")
    assert [p.pid for p in snap.occupancy.gpus[1].processes] == [48213]
    doc = dump_snapshot(snap)
    assert doc["occupancy"]["gpus"][1]["processes"][0] == {"pid": 48213, "name": "python3", "used_mib": 20480.0,
                                                           "kinds": "compute", "gone": False}


def test_mig_gpus_are_judged_by_their_processes_not_their_memory(tmp_path):
    (ok,) = judge(snap(GpuOccupancy(0, memory_used_mib=6000, mig=True)), ctx()).results
    assert ok.status is Status.PASS and "MIG on" in ok.message
    busy = GpuOccupancy(0, memory_used_mib=6000, mig=True, processes=[GpuProcess(9, "python", 5000.0)])
    assert judge(snap(busy), ctx()).results[0].status is Status.FAIL
    fake = FakeNvml([FakeGpu(mig_mode=real.NVML_DEVICE_MIG_ENABLE), FakeGpu(mig_mode=real.NVML_DEVICE_MIG_DISABLE),
                     FakeGpu()])
    occ = OccupancyLive(module=fake, proc_root=fake_proc(tmp_path)).read()
    assert [g.mig for g in occ.gpus] == [True, False, None]


# ----------------------------------------------------------------------------- memory with no process left


def test_memory_held_where_no_process_is_left_fails_from_leaked_mib():
    """The v2 figure leaves the driver's reserve out: an idle H100 with `Processes: None` reads
    `Used : 0 MiB` beside `Reserved : 551 MiB` (`nvidia-smi -q` of two 8x H100 nodes, leptonai/gpud's
    nvidia-query test data). More than leaked_mib (15, GCM's prolog default) with nothing left is
    a context nobody owns, well below max_used_mib."""
    idle = GpuOccupancy(index=0, memory_used_mib=0.0, memory_total_mib=81559.0, memory_reserved_mib=551.0)
    leaked = GpuOccupancy(index=1, memory_used_mib=400.0, memory_total_mib=81559.0, memory_reserved_mib=551.0)
    out = by_subject(judge(snap(idle, leaked), ctx()))
    assert out["gpu0"].status is Status.PASS
    assert out["gpu1"].status is Status.FAIL and out["gpu1"].threshold == 15
    assert out["gpu1"].message == ("gpu1 has 400 MiB in use with no process left (a context the driver never freed, "
                                   "or a process in another PID namespace)")


def test_the_v1_figure_holds_the_reserve_and_keeps_max_used_mib():
    v1 = GpuOccupancy(index=0, memory_used_mib=551.0, memory_total_mib=81559.0)  # reserve included, unknown
    assert judge(snap(v1), ctx()).results[0].status is Status.PASS


def test_beside_a_listed_process_the_leak_bound_does_not_apply():
    """An allowed monitor whose share NVML does not give (a container's pid), or a display
    server: something is there, so max_used_mib judges the memory."""
    mon = GpuProcess(pid=3311, name="nv-hostengine", kinds="compute", used_mib=None, uid=0)
    g = GpuOccupancy(index=0, memory_used_mib=520.0, memory_reserved_mib=551.0, processes=[mon])
    assert judge(snap(g), ctx()).results[0].status is Status.PASS


def test_the_epilog_does_not_wait_on_memory_beside_a_graphics_process_nor_on_a_v1_figure(tmp_path):
    v1 = FakeGpu(memory=(6 << 30, 80 << 30))
    fake = FakeNvml([v1])
    fake.nvmlMemory_v2 = None  # a binding without the v2 query: the figure holds the reserve
    occ = OccupancyLive(wait_s=5.0, poll_s=0.01, module=fake, proc_root=fake_proc(tmp_path), settle_mib=15).read()
    assert occ.waited_s < 0.5 and occ.gpus[0].memory_reserved_mib is None
    assert judge(Snapshot("n1", 0.0, occupancy=occ), ctx()).results[0].status is Status.FAIL  # 6.5 GiB > 1024
