"""The live NVML source against a fake pynvml (tests/helpers/fake_pynvml.py), plus one real-GPU test."""

from __future__ import annotations

import sys
import time

import pynvml as real
import pytest

from gpuhc.sources.nvml import NvmlLive
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml


def read(fake: FakeNvml, samples: int = 3) -> tuple:
    src = NvmlLive(clock_samples=samples, sample_interval_s=0.0, module=fake)
    return src.read(), src


def test_healthy_two_gpus_every_field_filled():
    fake = FakeNvml([FakeGpu(), FakeGpu(pci="00000000:2A:00.0", uuid="GPU-1")])
    r, src = read(fake)
    assert r.available and r.error is None
    assert r.driver_version == "580.95.05" and r.cuda_driver_version == "13.0"
    assert [g.index for g in r.gpus] == [0, 1]
    g = r.gpus[1]
    assert g.pci_bus_id == "0000:2a:00.0" and g.uuid == "GPU-1"
    assert g.name == "NVIDIA H100 80GB HBM3" and g.serial == "1650923000001" and g.vbios == "96.00.99.00.01"
    assert g.persistence_mode is True and g.ecc_mode is True
    assert (g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected, g.ecc_volatile_corrected) == (0, 0, 0)
    assert (g.remap_correctable, g.remap_uncorrectable, g.remap_pending, g.remap_failure) == (0, 0, False, False)
    assert g.retired_pages_sbe is None and g.retired_pages_pending is None  # NOT_SUPPORTED on Hopper
    assert len(g.nvlinks) == 18 and all(link.active for link in g.nvlinks)
    assert g.nvlinks[17].errors == {"replay": 0, "recovery": 0, "crc": 0}
    assert (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max, g.pcie_replay) == (5, 5, 16, 16, 0)
    assert g.clock_event_samples == [1, 1, 1]
    assert (g.sm_clock_mhz, g.mem_clock_mhz, g.utilization_gpu) == (345, 2619, 0)
    assert (g.temp_gpu_c, g.temp_mem_c) == (36, 38)
    assert (g.power_w, g.power_limit_w, g.power_default_limit_w) == (70.0, 700.0, 700.0)
    assert (g.fabric_state, g.fabric_status) == ("completed", "success")
    assert src.notes == []
    assert fake.initialised == 0  # nvmlShutdown balanced nvmlInit


def test_counters_are_batched_not_read_one_getter_at_a_time():
    fake = FakeNvml([FakeGpu() for _ in range(8)])
    read(fake)
    # two field-value batches per GPU (device fields, then all links); no per-counter getters
    assert fake.calls["nvmlDeviceGetFieldValues"] == 16
    for getter in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetNvLinkState",
                   "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetEccMode"):
        assert fake.calls[getter] == 0, getter
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 24  # 3 samples x 8 GPUs


def test_a_stage_with_some_gpus_reads_the_others_inventory_only():
    # the prolog judges the job's GPUs; gpu-count and xid still need every GPU's name and PCI id
    fake = FakeNvml([FakeGpu(pci=f"00000000:{0x18 + i:02X}:00.0", uuid=f"GPU-{i}") for i in range(4)])
    r = NvmlLive(clock_samples=2, sample_interval_s=0.0, module=fake, gpus=[2]).read()
    assert [(g.index, g.uuid, g.pci_bus_id) for g in r.gpus] == [(i, f"GPU-{i}", f"0000:{0x18 + i:02x}:00.0")
                                                                   for i in range(4)]
    full, other = r.gpus[2], r.gpus[0]
    assert len(full.nvlinks) == 18 and full.clock_event_samples == [1, 1] and full.power_limit_w == 700.0
    assert other.nvlinks == [] and other.ecc_mode is None and other.power_limit_w is None
    assert other.name == "NVIDIA H100 80GB HBM3" and other.serial == "1650923000001" and not other.lost
    # how hot and busy, for the thermal check's sibling comparison
    assert (other.temp_gpu_c, other.utilization_gpu, other.clock_event_samples) == (36, 0, [1, 1])
    assert fake.calls["nvmlDeviceGetFieldValues"] == 2  # device batch and link batch of gpu2 only


def test_clock_rounds_keep_their_interval():
    fake = FakeNvml([FakeGpu(), FakeGpu()])
    t0 = time.monotonic()
    r = NvmlLive(clock_samples=3, sample_interval_s=0.05, module=fake).read()
    assert time.monotonic() - t0 >= 0.1  # three samples, 50 ms apart
    assert all(len(g.clock_event_samples) == 3 for g in r.gpus)


def test_not_supported_everywhere_gives_none_and_no_notes():
    gpu = FakeGpu(fields={}, link_errors={}, fabric=None,
                  fail={"nvmlDeviceGetPowerManagementDefaultLimit": real.NVML_ERROR_NOT_SUPPORTED,
                        "nvmlDeviceGetSerial": real.NVML_ERROR_NOT_SUPPORTED,
                        "nvmlDeviceGetCurrentClocksEventReasons": real.NVML_ERROR_NOT_SUPPORTED})
    r, src = read(FakeNvml([gpu]))
    g = r.gpus[0]
    assert r.available and g.name == "NVIDIA H100 80GB HBM3"
    assert g.ecc_mode is None and g.remap_pending is None and g.temp_mem_c is None and g.pcie_replay is None
    assert g.nvlinks == []  # link count unknown, the state probe says link 0 does not exist
    assert g.serial is None and g.power_default_limit_w is None
    assert g.fabric_state is None and g.fabric_status is None
    assert g.clock_event_samples == []
    assert g.power_limit_w == 700.0  # the rest still read
    assert src.notes == []  # NOT_SUPPORTED is normal, not worth a note


def test_old_driver_without_field_values_uses_dedicated_getters():
    fake = FakeNvml([FakeGpu()], has_field_values=False)
    r, src = read(fake)
    g = r.gpus[0]
    assert (g.remap_correctable, g.remap_uncorrectable, g.remap_pending, g.remap_failure) == (1, 2, True, False)
    assert g.pcie_replay == 7 and g.ecc_mode is True and g.ecc_volatile_uncorrected == 0
    # link count from probing nvmlDeviceGetNvLinkState; states known, counters not
    assert len(g.nvlinks) == 18 and g.nvlinks[0].active is True and g.nvlinks[0].errors == {}
    assert any("field values" in n for n in src.notes)


def test_one_field_error_in_the_batch_falls_back_for_that_counter():
    gpu = FakeGpu()
    gpu.fields["NVML_FI_DEV_REMAPPED_PENDING"] = (real.NVML_ERROR_UNKNOWN,)
    fake = FakeNvml([gpu])
    r, _ = read(fake)
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 1
    assert r.gpus[0].remap_pending is True


def test_other_getter_error_gives_none_plus_note_and_keeps_going():
    gpu = FakeGpu(fail={"nvmlDeviceGetSerial": real.NVML_ERROR_UNKNOWN,
                        "nvmlDeviceGetTemperature": real.NVML_ERROR_TIMEOUT})
    r, src = read(FakeNvml([gpu]))
    g = r.gpus[0]
    assert g.serial is None and g.temp_gpu_c is None
    assert g.power_w == 70.0 and len(g.nvlinks) == 18
    assert any("gpu0: serial" in n for n in src.notes)
    assert any("gpu0: temp_gpu_c" in n and "Timeout" in n for n in src.notes)


@pytest.mark.parametrize(
    "code, words",
    [
        (real.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1"),
        (real.NVML_ERROR_DRIVER_NOT_LOADED, "driver not loaded"),
        (real.NVML_ERROR_UNKNOWN, "nvmlInit failed"),
    ],
)
def test_init_failure_is_a_reading_not_an_exception(code, words):
    fake = FakeNvml([FakeGpu()], init_error=code)
    r, _ = read(fake)
    assert r.available is False and words in r.error and r.gpus == []
    assert fake.calls["nvmlShutdown"] == 0  # never initialised, never shut down


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    r = NvmlLive().read()
    assert r.available is False and "nvidia-ml-py" in r.error


def test_gpu_lost_mid_read_still_listed():
    fake = FakeNvml([FakeGpu(), FakeGpu(lost=True, pci="00000000:2A:00.0"), FakeGpu(pci="00000000:3A:00.0")])
    r, src = read(fake)
    assert [g.index for g in r.gpus] == [0, 1, 2]
    lost = r.gpus[1]
    assert lost.name == "unknown (NVML: GPU is lost)" and lost.uuid == "" and lost.nvlinks == []
    assert r.gpus[2].pci_bus_id == "0000:3a:00.0" and len(r.gpus[2].clock_event_samples) == 3
    assert any("gpu1" in n and "GPU is lost" in n for n in src.notes)


def test_gpu_without_handle_still_listed():
    r, _ = read(FakeNvml([FakeGpu(handle_error=real.NVML_ERROR_GPU_IS_LOST), FakeGpu()]))
    assert r.gpus[0].name == "unknown (NVML: GPU is lost)" and r.gpus[0].pci_bus_id == ""
    assert r.gpus[1].name == "NVIDIA H100 80GB HBM3"


def test_clock_reason_samples_follow_the_hardware():
    fake = FakeNvml([FakeGpu(clock_reasons=[0x1, 0x8, 0x48])])
    r, _ = read(fake, samples=3)
    assert r.gpus[0].clock_event_samples == [0x1, 0x8, 0x48]
    r, _ = read(FakeNvml([FakeGpu(clock_reasons=[0x8])]), samples=1)
    assert r.gpus[0].clock_event_samples == [0x8]


def test_clock_reasons_fall_back_to_the_old_throttle_getter():
    gpu = FakeGpu(fail={"nvmlDeviceGetCurrentClocksEventReasons": real.NVML_ERROR_FUNCTION_NOT_FOUND})
    r, _ = read(FakeNvml([gpu]), samples=2)
    assert r.gpus[0].clock_event_samples == [0x4, 0x4]


def test_nvlink_states_and_per_link_counters():
    gpu = FakeGpu(link_state={4: real.NVML_NVLINK_STATE_INACTIVE, 5: real.NVML_NVLINK_STATE_SLEEP},
                  per_link_errors={(7, "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY"): 12})
    r, _ = read(FakeNvml([gpu]))
    links = r.gpus[0].nvlinks
    assert links[4].active is False and links[5].active is True
    assert links[7].errors["replay"] == 12 and links[6].errors["replay"] == 0


def test_fabric_not_ready_is_named():
    gpu = FakeGpu(fabric=(real.NVML_GPU_FABRIC_STATE_IN_PROGRESS, real.NVML_ERROR_NOT_READY))
    r, _ = read(FakeNvml([gpu]))
    assert (r.gpus[0].fabric_state, r.gpus[0].fabric_status) == ("in progress", "not ready")


@pytest.mark.gpu
def test_real_gpu_reading():
    """Needs an NVIDIA GPU; skips only when NVML finds none."""
    r = NvmlLive(clock_samples=2, sample_interval_s=0.01).read()
    if not r.available or not r.gpus:
        pytest.skip(f"no NVIDIA GPU here: {r.error}")
    for g in r.gpus:
        assert g.name and g.uuid.startswith("GPU-") and g.pci_bus_id.count(":") == 2
        assert g.power_limit_w and g.power_limit_w > 0
        assert len(g.clock_event_samples) == 2


@pytest.mark.gpu
def test_real_gpu_dl_counters_of_one_slice_read_directly_or_topped_up():
    """Needs an NVIDIA GPU; skips only when NVML finds none. A read of one slice, and an early
    read without DL counters topped up with that slice, hold the DL counters the driver answers
    on exactly the slice's links, and every link's state."""
    full = NvmlLive(clock_samples=1).read()
    if not full.available or not full.gpus:
        pytest.skip(f"no NVIDIA GPU here: {full.error}")
    dl = {"replay", "recovery", "crc"}
    sliced = NvmlLive(clock_samples=1, dl_rotation=3, dl_phases={0: 1}).read()
    topped = NvmlLive(clock_samples=1).top_up(NvmlLive(clock_samples=1, dl_rotation=None).read(), 3, {0: 1})
    for reading in (sliced, topped):
        assert reading.dl_rotation == 3
        for g, f in zip(reading.gpus, full.gpus):
            assert [link.active for link in g.nvlinks] == [link.active for link in f.nvlinks]
            phase = 1 if g.index == 0 else 0
            for link, whole in zip(g.nvlinks, f.nvlinks):
                want = set(whole.errors) & dl if link.link % 3 == phase else set()
                assert set(link.errors) & dl == want, (g.index, link.link)


@pytest.mark.gpu
def test_real_gpu_occupancy_reading():
    """Needs an NVIDIA GPU; skips only when NVML finds none. The UUIDs match the counter read,
    memory is reported, and every listed process is named or marked gone."""
    from gpuhc.sources.gpu_procs import OccupancyLive

    occ = OccupancyLive().read()
    if not occ.available or not occ.gpus:
        pytest.skip(f"no NVIDIA GPU here: {occ.error}")
    uuids = [g.uuid for g in NvmlLive(clock_samples=1).read().gpus]
    assert [g.uuid for g in occ.gpus] == uuids
    for g in occ.gpus:
        assert g.error is None and g.memory_total_mib and g.memory_used_mib is not None
        assert all(p.name or p.gone for p in g.processes)


def test_a_read_without_dl_counters_is_topped_up_with_one_batch_per_gpu():
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-1", pci="00000000:2A:00.0")])
    early = NvmlLive(clock_samples=1, module=fake, dl_rotation=None).read()
    assert all("replay" not in link.errors for g in early.gpus for link in g.nvlinks)
    calls = fake.calls["nvmlDeviceGetFieldValues"]
    r = NvmlLive(clock_samples=1, module=fake).top_up(early, 2, {1: 1})
    assert fake.calls["nvmlDeviceGetFieldValues"] == calls + 2
    assert [link.link for link in r.gpus[1].nvlinks if "crc" in link.errors] == list(range(1, 18, 2))
    assert (r.dl_rotation, r.dl_phases) == (2, {0: 0, 1: 1}) and fake.initialised == 0


def test_a_top_up_that_cannot_reach_the_gpus_says_so_and_keeps_the_reading():
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-1", pci="00000000:2A:00.0")])
    early = NvmlLive(clock_samples=1, module=fake, dl_rotation=None).read()
    fake.gpus[1].lost = True  # fell off the bus between the two reads
    r = NvmlLive(clock_samples=1, module=fake).top_up(early, 3, {})
    assert r.gpus[1].lost and "GPU is lost" in r.gpus[1].name and not r.gpus[0].lost
    assert 1 not in r.dl_phases and r.dl_phases[0] == 0
    fake.init_error = real.NVML_ERROR_DRIVER_NOT_LOADED  # the driver went away
    again = NvmlLive(clock_samples=1, module=fake).top_up(NvmlLive(clock_samples=1, module=FakeNvml([FakeGpu()]),
                                                                  dl_rotation=None).read(), 3, {})
    assert any(n.startswith("NVLink DL counters not read: NVIDIA driver not loaded") for n in again.notes)
