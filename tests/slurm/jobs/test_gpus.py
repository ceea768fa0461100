"""The prolog and epilog judge the GPUs Slurm gave the job (gpuhc/slurm/jobs/gpus.py): replays of
an 8x A100 node in MIG mode and of a hand-written gres.conf whose order is not NVML's, through
the real runner; the mapping kept per boot; a mapping that cannot be made drains nothing."""

from __future__ import annotations

import os
import shutil

import pytest

from gpuhc.node.gres_conf import GpuMapError
from gpuhc.run.report import RunOptions
from gpuhc.slurm.flows import entry
from gpuhc.slurm.jobs import gpus as job_gpus
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sources import SourceSpec
from gpuhc.sources.scenario import load_scenario
from tests.helpers.minislurm import MiniSlurm, config
from tests.helpers.paths import SCENARIOS


def real_flow(tmp_path, stage, scenario, env, slurm=None, cfg=None):
    """A prolog or epilog flow that runs the real checks on a scenario; Slurm only if given."""
    def make(deadline):
        def never(argv, timeout):
            raise AssertionError(f"Slurm was asked: {argv}")
        return Scontrol(run=slurm or never, deadline=deadline)

    spec = SourceSpec(nvml_scenario=str(SCENARIOS / scenario))
    opts = RunOptions(stage=stage, config=cfg or config(tmp_path), sources=spec, state_dir=str(tmp_path / "state"),
                      hostname="n1")
    return entry.Flow(stage=stage, opts=opts, log=entry.Log(f"gpuhc {stage} n1", None, False, False),
                      make_scontrol=make, env=dict(env, SLURM_JOB_ID="77"))


def results(out, check):
    return [(r.status.value, r.subject, r.message) for r in out.report.results if r.check == check]


# ---------------------------------------------------------------------------- MIG replays


def test_prolog_on_mig_slice_12_passes_beside_other_jobs_slices(tmp_path):
    # GPU 1's slices gi7, gi12 and gi14 run other jobs; Slurm's 12 is its gi13, free.
    out = entry.prolog(real_flow(tmp_path, "prolog", "healthy-8xa100-mig.yaml", {"SLURM_JOB_GPUS": "12"}))
    assert out.exit_code == 0 and out.report.status.value == "pass", out.lines
    assert results(out, "occupancy") == [("pass", "gpu1", "gpu1 MIG gi13/ci0 free (13 MiB in use)")]
    assert any("SLURM_JOB_GPUS=12 -> 12:gpu1 gi13/ci0" in line for line in out.lines)


def test_prolog_on_a_slice_with_a_leftover_fails_and_drains(tmp_path):
    s = MiniSlurm({"n1": ("IDLE", None)})
    out = entry.prolog(real_flow(tmp_path, "prolog", "mig-leftover-own-slice.yaml", {"SLURM_JOB_GPUS": "12"}, slurm=s))
    assert out.exit_code == 1 and out.decision.act is Act.DRAIN
    (fail,) = [r for r in out.report.results if r.status.value == "fail"]
    assert fail.check == "occupancy" and "gpu1 MIG gi13/ci0 holds 1 compute process: pid 48213" in fail.message


def test_prolog_on_a_sibling_slice_of_the_leftover_passes(tmp_path):
    # Slurm's 8 is GPU 1's gi8: the leftover on gi13 is not its business.
    out = entry.prolog(real_flow(tmp_path, "prolog", "mig-leftover-own-slice.yaml", {"SLURM_JOB_GPUS": "8"}))
    assert out.exit_code == 0 and out.report.status.value == "pass", out.lines


def test_cuda_visible_devices_mig_uuid_names_the_same_slice(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "MIG-7a3c010d-5b1e-5c7d-9e40-a1b2c3d4e5f6"}
    out = entry.prolog(real_flow(tmp_path, "prolog", "mig-leftover-own-slice.yaml", env,
                                 slurm=MiniSlurm({"n1": ("IDLE", None)})))
    assert out.exit_code == 1 and "gi13/ci0" in results(out, "occupancy")[0][2]


def test_a_slice_gone_from_the_gpu_is_a_mig_layout_finding(tmp_path):
    """gres.conf names GPU 1's gi13 (as sites write MIG gres.conf by hand); a GPU reset dropped
    the GPU's instances. The job's prolog fails with the layout's own action, not a reboot."""
    scen = tmp_path / "lost.yaml"
    scen.write_text(f"extends: {SCENARIOS / 'healthy-8xa100-mig.yaml'}\ngpus:\n  1: {{mig: []}}\noccupancy: {{gpus: []}}\n"
                    "gres:\n  conf: \"Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap255,"
                    "/dev/nvidia-caps/nvidia-cap256\\n\"\n"
                    "  mig_minors: \"gpu1/gi13/access 255\\ngpu1/gi13/ci0/access 256\\n\"\n")
    s = MiniSlurm({"n1": ("IDLE", None)})
    f = real_flow(tmp_path, "prolog", "healthy-8xa100-mig.yaml", {"SLURM_JOB_GPUS": "0"}, slurm=s)
    f.opts.sources = SourceSpec(nvml_scenario=str(scen))
    out = entry.prolog(f)
    fails = [(r.check, r.action.value) for r in out.report.results if r.status.value == "fail"]
    assert fails == [("mig-layout", "drain + recreate MIG instances")]
    assert out.exit_code == 1 and out.decision.act is Act.DRAIN


# ---------------------------------------------------------------------------- gres.conf order


@pytest.mark.parametrize("slurm_index, nvml_gpu, status", [("0", "gpu2", "fail"), ("2", "gpu0", "pass")])
def test_hand_written_gres_conf_judges_the_gpus_slurm_gave(tmp_path, slurm_index, nvml_gpu, status):
    s = MiniSlurm({"n1": ("IDLE", None)})
    out = entry.prolog(real_flow(tmp_path, "prolog", "gres-order-8xh100.yaml", {"SLURM_JOB_GPUS": slurm_index}, slurm=s))
    assert [subject for _, subject, _ in results(out, "ecc")] == [nvml_gpu]
    assert out.report.status.value == status and out.exit_code == (1 if status == "fail" else 0)


# ---------------------------------------------------------------------------- refusing


def test_an_index_slurm_cannot_have_given_drains_nothing(tmp_path):
    """Issue 31's reproduction: SLURM_JOB_GPUS=12 on the healthy 8x H100 replay (no gres.conf)
    failed gpu-count, drain + reboot. Now: said loudly, every GPU judged, nothing drained."""
    out = entry.prolog(real_flow(tmp_path, "prolog", "healthy-8xh100.yaml", {"SLURM_JOB_GPUS": "12"}))
    assert out.exit_code == 0 and out.report.status.value == "pass"
    assert any("cannot map Slurm's GPUs" in line and "this node has no GPU 12" in line for line in out.lines)
    assert not results(out, "occupancy")  # who holds the GPUs is not judged


def test_gres_conf_others_can_write_is_refused(tmp_path, monkeypatch):
    conf = tmp_path / "etc" / "gres.conf"
    conf.parent.mkdir()
    conf.write_text("Name=gpu File=/dev/nvidia[0-7]\n")
    os.chmod(conf, 0o666)
    f = real_flow(tmp_path, "prolog", "healthy-8xh100.yaml", {"SLURM_JOB_GPUS": "1"})
    f.opts.sources = SourceSpec()
    f.env["SLURM_CONF"] = str(conf.parent / "slurm.conf")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(job_gpus, "who_the_gpus_are", lambda spec: load_scenario(str(SCENARIOS / "healthy-8xh100.yaml")).nvml)
    with pytest.raises(GpuMapError, match="writable by group or others"):
        job_gpus.node_devices(f.opts, "n1", f.env)


# ---------------------------------------------------------------------------- kept per boot


def test_the_mapping_is_made_once_per_boot_and_gres_conf(tmp_path, monkeypatch):
    conf = tmp_path / "gres.conf"
    conf.write_text("Name=gpu File=/dev/nvidia[0-7]\n")
    healthy = load_scenario(str(SCENARIOS / "gres-order-8xh100.yaml")).nvml
    reads = []
    monkeypatch.setattr(job_gpus, "who_the_gpus_are", lambda spec: reads.append(1) or healthy)
    boot = ["b1"]
    monkeypatch.setattr(job_gpus, "_boot_id", lambda: boot[0])
    cfg = config(tmp_path)
    cfg.data["node"]["gres_conf"] = str(conf)
    opts = RunOptions(stage="prolog", config=cfg, sources=SourceSpec(), state_dir=str(tmp_path / "state"), hostname="n1")
    os.makedirs(opts.state_dir)
    first, _ = job_gpus.node_devices(opts, "n1", {})
    again, _ = job_gpus.node_devices(opts, "n1", {})
    assert first == again and first[0].gpu == 2 and len(reads) == 1
    conf.write_text("Name=gpu File=/dev/nvidia[0-3]\n")  # gres.conf changed: made again
    assert len(job_gpus.node_devices(opts, "n1", {})[0]) == 4 and len(reads) == 2
    boot[0] = "b2"  # rebooted: made again
    job_gpus.node_devices(opts, "n1", {})
    assert len(reads) == 3


def test_the_epilog_of_a_slice_loads_no_gpu_others_run_on(tmp_path, monkeypatch):
    """The epilog's active checks would burn the whole parent GPU, under other jobs' slices
    (and find them busy: a drain). A job on a slice or a share gets none."""
    called = []
    monkeypatch.setattr("gpuhc.active.run_active", lambda stage, ctx: called.append(ctx.gpus) or [])
    out = entry.epilog(real_flow(tmp_path, "epilog", "healthy-8xa100-mig.yaml", {"SLURM_JOB_GPUS": "12"}))
    assert out.exit_code == 0 and called == [], out.lines
    assert any("not run on GPUs the job shares" in n for n in out.report.notes)
    out = entry.epilog(real_flow(tmp_path, "epilog", "gres-order-8xh100.yaml", {"SLURM_JOB_GPUS": "2"}))
    assert called == [[0]]  # a whole GPU (Slurm's 2 is NVML's gpu0) still gets them


def test_an_mps_jobs_index_counts_the_mps_devices_and_its_gpu_is_shared(tmp_path):
    scen = tmp_path / "mps.yaml"
    scen.write_text(f"extends: {SCENARIOS / 'stray-process.yaml'}\n"
                    "gres: {conf: \"Name=gpu File=/dev/nvidia[0-7]\\nName=mps Count=100 File=/dev/nvidia[1-2]\\n\"}\n")
    env = {"SLURM_JOB_GPUS": "0", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
    f = real_flow(tmp_path, "prolog", "healthy-8xh100.yaml", env)
    f.opts.sources = SourceSpec(nvml_scenario=str(scen))
    out = entry.prolog(f)  # gpu1 holds pid 48213: another job sharing it through MPS
    assert out.exit_code == 0 and results(out, "occupancy") == [
        ("pass", "gpu1", "gpu1 is shared (gres.conf lends it as shard/mps): other jobs' processes are expected, not judged")]


def test_a_job_naming_no_gpu_maps_nothing_and_reads_nothing(tmp_path, monkeypatch):
    """A CPU job (or a CPU node: no gres.conf, no NVML) is not a mapping failure."""
    monkeypatch.setattr(job_gpus, "node_devices", lambda *a: (_ for _ in ()).throw(AssertionError("read")))
    f = real_flow(tmp_path, "prolog", "healthy-8xh100.yaml", {})
    assert job_gpus.job_devices(f.opts, "n1", f.env) == (None, "the job was given no GPU (Slurm set neither SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES)")


def test_a_mig_re_partition_without_a_reboot_makes_the_mapping_again(tmp_path, monkeypatch):
    """Same boot, same gres.conf: the driver's list of MIG instances (its capability tree, faked
    here) changed, so the kept mapping is not used (before: the old slices' map stayed all boot)."""
    conf = tmp_path / "gres.conf"
    conf.write_text("Name=gpu File=/dev/nvidia[0-7]\n")
    healthy = load_scenario(str(SCENARIOS / "gres-order-8xh100.yaml")).nvml
    reads = []
    monkeypatch.setattr(job_gpus, "who_the_gpus_are", lambda spec: reads.append(1) or healthy)
    monkeypatch.setattr(job_gpus, "_boot_id", lambda: "b1")
    caps = tmp_path / "capabilities"
    monkeypatch.setattr("gpuhc.sources.gres.MIG_CAPS", str(caps))

    def partition(*instances: str) -> None:
        shutil.rmtree(caps, ignore_errors=True)
        (caps / "gpu0" / "mig").mkdir(parents=True)
        (caps / "gpu0" / "mig" / "config").write_text("")
        for inst in instances:
            (caps / "gpu0" / "mig" / inst).mkdir(parents=True)
            (caps / "gpu0" / "mig" / inst / "access").write_text("")

    cfg = config(tmp_path)
    cfg.data["node"]["gres_conf"] = str(conf)
    opts = RunOptions(stage="prolog", config=cfg, sources=SourceSpec(), state_dir=str(tmp_path / "state"), hostname="n1")
    os.makedirs(opts.state_dir)
    partition("gi1/ci0", "gi2/ci0")  # two 3g slices
    job_gpus.node_devices(opts, "n1", {})
    job_gpus.node_devices(opts, "n1", {})
    assert len(reads) == 1  # kept
    partition("gi7/ci0", "gi8/ci0", "gi9/ci0")  # re-partitioned into 2g slices, no reboot
    job_gpus.node_devices(opts, "n1", {})
    assert len(reads) == 2
    job_gpus.node_devices(opts, "n1", {})
    assert len(reads) == 2  # the new layout's map is kept in turn
    partition("gi7/ci0", "gi8/ci0", "gi9/ci0", "gi9/ci1")  # a compute instance more
    job_gpus.node_devices(opts, "n1", {})
    assert len(reads) == 3


@pytest.mark.parametrize("stage", ["prolog", "epilog"])
def test_the_log_line_of_a_job_without_gpus_says_what_the_node_has(tmp_path, monkeypatch, stage):
    """A CPU job on a CPU node: the line says the node has no GPU (it once said "every GPU of
    the node is checked; GPU occupancy not judged" there); the same job on a GPU node says that
    every GPU is checked and who holds them is not judged."""
    from gpuhc.model.result import Result, Status
    from tests.helpers.minislurm import run

    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_EXIT_CODE": "0"}
    cpu = Result("gpu-count", Status.PASS, "no GPUs expected (Slurm gives this node no GPUs), no NVIDIA driver",
                 value=0, threshold=0)
    gpus = Result("gpu-count", Status.PASS, "8 GPUs, as expected", value=8, threshold=8)
    lines = run(tmp_path / "cpu", monkeypatch, stage, None, [cpu], env=env).lines
    assert any(line.endswith("[a node without GPUs; the job was given none]") for line in lines), lines
    assert not any("every GPU" in line or "occupancy" in line for line in lines), lines
    lines = run(tmp_path / "gpu", monkeypatch, stage, None, [gpus], env=env).lines
    assert any(line.endswith("[the job was given no GPU (Slurm set neither SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES): "
                             "every GPU of the node is checked; GPU occupancy not judged (another job may hold them)]")
               for line in lines), lines


def test_a_replay_maps_its_devices_from_one_load_of_the_recording(tmp_path, monkeypatch):
    """The gres section and the GPUs come from the same recording: read, validated and resolved
    once (it was twice, half of the prolog's cost in the campaign model)."""
    from gpuhc.sources import scenario

    loads, real = [], scenario._load_base
    monkeypatch.setattr(scenario, "_load_base", lambda path, depth, read: loads.append(depth) or real(path, depth, read))
    f = real_flow(tmp_path, "prolog", "gres-order-8xh100.yaml", {"SLURM_JOB_GPUS": "1"})
    table, _ = job_gpus.node_devices(f.opts, "n1", f.env)
    assert loads.count(0) == 1 and len(table) == 8
    job_gpus.node_devices(f.opts, "n1", f.env)
    assert loads.count(0) == 2  # outside the call nothing is kept: the next run reads it afresh
