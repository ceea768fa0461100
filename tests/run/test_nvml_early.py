"""The early NVML read (gpuhc/run/nvml_early.py): what it guesses from argv and the
environment, and when the run adopts it instead of reading again."""

from __future__ import annotations

import functools

import pytest

import gpuhc.sources.nvml as nvml_mod
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.run import nvml_early
from gpuhc.sources import SourceSpec, build_sources
from gpuhc.sources.nvml import NvmlLive


@pytest.mark.parametrize("argv, env, want", [
    (["check"], {}, (3, None)),
    (["check", "--stage", "prolog", "--gpus", "1,3"], {}, (1, [1, 3])),
    (["check", "--stage=epilog", "--gpus=0-2", "-v"], {}, (3, [0, 1, 2])),
    (["check", "--gpus", "GPU-4f1c"], {}, (3, None)),  # not indices: read every GPU
    (["healthcheck"], {"SLURM_JOB_GPUS": "1"}, (3, None)),  # the health check is not a job's
    (["prolog"], {"SLURM_JOB_GPUS": "2,5", "CUDA_VISIBLE_DEVICES": "0"}, (1, [2, 5])),
    (["epilog"], {"CUDA_VISIBLE_DEVICES": "3"}, (3, [3])),
    (["prolog"], {}, (1, None)),
    (["check", "--nvml-scenario", "x.yaml"], {}, None),
    (["check", "--demo"], {}, None),
    (["prolog", "--help"], {}, None),
    (["drain-report"], {}, None),
    ([], {}, None),
])
def test_the_guess_follows_the_command_line_and_slurm(argv, env, want):
    assert nvml_early._guess(argv, env) == want


def test_covers_only_what_it_read():
    early = nvml_early._EarlyRead.__new__(nvml_early._EarlyRead)
    early.samples, early.interval, early.gpus = 3, 0.02, frozenset({1, 2})
    assert early.covers(1, 0.02, [1]) and early.covers(3, 0.02, [1, 2])
    assert not early.covers(5, 0.02, [1])  # fewer samples than asked
    assert not early.covers(1, 0.05, [1])  # another interval
    assert not early.covers(1, 0.02, None) and not early.covers(1, 0.02, [0, 1])  # a GPU it did not read
    early.gpus = None
    assert early.covers(1, 0.02, None) and early.covers(1, 0.02, [7])


@pytest.fixture
def fake_nvml(monkeypatch):
    fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}", pci=f"00000000:{0x18 + i:02X}:00.0") for i in range(2)])
    monkeypatch.setattr(nvml_mod, "NvmlLive", functools.partial(NvmlLive, module=fake))
    monkeypatch.setattr(nvml_early, "_early", None)
    monkeypatch.setattr(nvml_early, "_started", False)
    monkeypatch.delenv("GPUHC_NVML_EARLY", raising=False)
    return fake


def test_a_live_run_adopts_the_early_read_once(fake_nvml, tmp_path):
    nvml_early.start(["check", "--stage", "prolog", "--gpus", "1"], env={})
    spec = SourceSpec(clock_samples=1, gpus=[1], sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    src = build_sources(spec).nvml
    assert isinstance(src, nvml_early._EarlyRead)
    reading = src.read()
    assert [g.uuid for g in reading.gpus] == ["GPU-0", "GPU-1"] and reading.gpus[1].nvlinks
    assert reading.gpus[0].nvlinks == []  # not the stage's GPU: inventory only
    # the early read's init, and the top-up's with the DL counters (every link: rotation 1)
    assert fake_nvml.calls["nvmlInit"] == 2 and fake_nvml.initialised == 0
    assert fake_nvml.asked_links("NVML_FI_DEV_NVLINK_ERROR_DL_CRC", gpu=1) == list(range(18))
    assert all(link.errors == {"replay": 0, "recovery": 0, "crc": 0} for link in reading.gpus[1].nvlinks)
    assert not isinstance(build_sources(spec).nvml, nvml_early._EarlyRead)  # handed out once
    nvml_early.start(["check"], env={})
    assert nvml_early._early is None  # started once per process


def test_a_run_asking_for_more_reads_afresh(fake_nvml, tmp_path):
    nvml_early.start(["check", "--stage", "prolog", "--gpus", "1"], env={})
    spec = SourceSpec(clock_samples=3, sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    src = build_sources(spec).nvml
    assert not isinstance(src, nvml_early._EarlyRead)
    assert all(g.nvlinks for g in src.read().gpus)


def test_a_replay_never_adopts_it(fake_nvml, tmp_path):
    nvml_early.start(["check"], env={})
    scenario = tmp_path / "s.yaml"
    scenario.write_text('gpus: [{name: H100, uuid: GPU-0, pci_bus_id: "0000:18:00.0"}]\n')
    src = build_sources(SourceSpec(nvml_scenario=str(scenario))).nvml
    assert src.read().gpus[0].uuid == "GPU-0"


def test_it_can_be_turned_off(fake_nvml):
    nvml_early.start(["check"], env={"GPUHC_NVML_EARLY": "0"})
    assert nvml_early._early is None


def test_a_broken_read_is_the_readers_error(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("driver wedged")

    monkeypatch.setattr(nvml_mod, "NvmlLive", boom)
    early = nvml_early._EarlyRead(1, None)
    with pytest.raises(RuntimeError, match="driver wedged"):
        early.read()


def test_the_early_read_leaves_the_dl_counters_to_the_slice_the_run_asks(fake_nvml, tmp_path):
    # The early thread cannot know the slice (it lives in the state, not loaded yet): it asks for
    # no DL counter, and the adopted read adds exactly the slice's links, one batch per GPU.
    fake_nvml.gpus[1].per_link_errors = {(5, "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY"): 7}
    nvml_early.start(["check"], env={})
    early = nvml_early._early
    early.done.wait(5)
    assert fake_nvml.asked_links("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY") == []
    assert len(fake_nvml.asked_links("NVML_FI_DEV_NVLINK_GET_STATE")) == 2 * 18  # state: every link, every run
    spec = SourceSpec(sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"), dl_rotation=3, dl_phases={1: 2})
    src = build_sources(spec).nvml
    assert src is early  # adopted: the rotation does not cost the early read
    reading = src.read()
    for const in ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY",
                  "NVML_FI_DEV_NVLINK_ERROR_DL_CRC"):
        assert fake_nvml.asked_links(const, gpu=0) == [0, 3, 6, 9, 12, 15]  # no pointer yet: slice 0
        assert fake_nvml.asked_links(const, gpu=1) == [2, 5, 8, 11, 14, 17]
    assert (reading.dl_rotation, reading.dl_phases) == (3, {0: 0, 1: 2})
    assert reading.gpus[1].nvlinks[5].errors["replay"] == 7
    assert "replay" not in reading.gpus[1].nvlinks[4].errors  # another slice: read on another run
    assert early.released.is_set() and fake_nvml.initialised == 0


def test_an_early_read_not_adopted_lets_nvml_go(fake_nvml, tmp_path):
    nvml_early.start(["check", "--stage", "prolog", "--gpus", "1"], env={})
    early = nvml_early._early
    spec = SourceSpec(clock_samples=3, sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    assert build_sources(spec).nvml is not early
    assert early.released.is_set()  # its thread shuts NVML down instead of waiting for a top-up
