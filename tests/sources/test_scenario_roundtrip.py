"""`gpuhc snapshot` output replays to the same readings and the same verdict: the writer
(gpuhc/sources/snapshot_format.py) against the loader (scenario.py), which only a round trip proves."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.config.load import Config, defaults, schema
from gpuhc.model.host import AerCounters, IbPort
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from gpuhc.model.nvml import GpuReading, NvLinkState, NvmlReading
from gpuhc.model.snapshot import Snapshot
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.sources.nvml import NvmlLive
from gpuhc.sources.scenario import load_scenario
from gpuhc.sources.snapshot_format import dump_snapshot, dump_yaml

import pynvml as real
from tests.helpers.paths import REPO

ROOT = str(REPO)
SCENARIOS = os.path.join(ROOT, "examples", "scenarios")


def replay(tmp_path, snap: Snapshot, compact: bool = True, name: str = "snap.yaml"):
    path = tmp_path / name
    path.write_text(dump_yaml(snap, compact))
    return load_scenario(str(path))


def test_live_reading_round_trips(tmp_path):
    fake = FakeNvml([
        FakeGpu(),
        FakeGpu(pci="00000000:2A:00.0", uuid="GPU-1", link_state={3: 0}, per_link_errors={(5, "NVML_FI_DEV_NVLINK_ERROR_DL_CRC"): 9}),
        FakeGpu(lost=True),
        FakeGpu(fields={}, fabric=None, clock_reasons=[0x8, 0x48]),
    ])
    reading = NvmlLive(clock_samples=3, sample_interval_s=0.0, module=fake).read()
    snap = Snapshot(hostname="gpu017", time=1741082400.5, nvml=reading)
    for compact in (True, False):
        assert replay(tmp_path, snap, compact).nvml == reading


def test_full_snapshot_round_trips(tmp_path):
    kernel = KernelLog(
        events=[
            KernelEvent(EventKind.XID, 1741082592.44812, "Xid 79, GPU has fallen off the bus.", pci="0000:5d:00.0", code=79),
            KernelEvent(EventKind.IB_LINK, None, "Port: 1 Link DOWN", device="mlx5_1", port=1, state="DOWN", seq=1234),
        ],
        source="/dev/kmsg", boot_id="0f8e-11", last_time=1741082700.25, last_seq=1300, unparsed_lines=2,
    )
    ib = [IbPort("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand", {"link_downed": 0}),
          IbPort("mlx5_1", 1, "DOWN", "Polling", None, None, {})]
    aer = [AerCounters("0000:18:00.0", 1, 0, None)]
    nvml = NvmlReading(True, None, "580.95.05", "13.0", [GpuReading(0, "NVIDIA H200", "GPU-0", "0000:18:00.0")])
    snap = Snapshot("gpu017", 1741082700.25, nvml, kernel, ib, aer)
    s = replay(tmp_path, snap)
    assert s.nvml == nvml and s.kernel_log_source().read() == kernel
    assert s.sysfs_source().ib_ports() == ib and s.sysfs_source().aer() == aer
    assert (s.hostname, s.time) == ("gpu017", 1741082700.25)


def test_json_output_of_gpuhc_snapshot_replays_too(tmp_path):
    s0 = load_scenario(os.path.join(SCENARIOS, "ib-flapping.yaml"))
    snap = Snapshot("n", 1.0, s0.nvml, s0.kernel_log_source().read(), s0.ib_ports, s0.aer)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(dump_snapshot(snap), indent=2))
    s = load_scenario(str(path))
    assert s.nvml == s0.nvml and s.kernel_log_source().read() == snap.kernel


def test_compact_dump_moves_shared_values_to_defaults():
    s0 = load_scenario(os.path.join(SCENARIOS, "healthy-8xh100.yaml"))
    doc = dump_snapshot(Snapshot("n", 1.0, s0.nvml))
    assert doc["defaults"]["name"] == "NVIDIA H100 80GB HBM3"
    assert doc["defaults"]["nvlinks"] == {"count": 18, "active": True, "errors": {"replay": 0, "recovery": 0, "crc": 0}}
    assert set(doc["gpus"][0]) == {"index", "uuid", "pci_bus_id", "serial", "temp_gpu_c", "minor"}  # minor: /dev/nvidia<N>


# ------------------------------------------------------------------ any reading, property-based

_ints = st.none() | st.integers(min_value=0, max_value=2**63)
_bools = st.none() | st.booleans()
_floats = st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False)
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_counters = st.dictionaries(st.sampled_from(["replay", "recovery", "crc", "crc_flit", "rcv_errors"]),
                            st.integers(min_value=0, max_value=2**40), max_size=3)


@st.composite
def gpu_readings(draw, index: int) -> GpuReading:
    n_links = draw(st.integers(min_value=0, max_value=4))
    links = [NvLinkState(i, draw(_bools), draw(_counters)) for i in range(n_links)]
    return GpuReading(
        index=index, name=draw(_text), uuid=draw(_text), pci_bus_id=draw(_text),
        serial=draw(st.none() | _text), vbios=draw(st.none() | _text), persistence_mode=draw(_bools),
        ecc_mode=draw(_bools), ecc_volatile_uncorrected=draw(_ints), ecc_aggregate_uncorrected=draw(_ints),
        ecc_volatile_corrected=draw(_ints), remap_correctable=draw(_ints), remap_uncorrectable=draw(_ints),
        remap_pending=draw(_bools), remap_failure=draw(_bools), retired_pages_sbe=draw(_ints),
        retired_pages_dbe=draw(_ints), retired_pages_pending=draw(_bools), nvlinks=links,
        pcie_gen=draw(_ints), pcie_gen_max=draw(_ints), pcie_width=draw(_ints), pcie_width_max=draw(_ints),
        pcie_replay=draw(_ints), clock_event_samples=draw(st.lists(st.integers(0, 2**64 - 1), max_size=3)),
        sm_clock_mhz=draw(_ints), mem_clock_mhz=draw(_ints), utilization_gpu=draw(_ints), temp_gpu_c=draw(_ints),
        temp_mem_c=draw(_ints), power_w=draw(_floats), power_limit_w=draw(_floats),
        power_default_limit_w=draw(_floats), fabric_state=draw(st.none() | _text),
        fabric_status=draw(st.none() | _text),
    )


@st.composite
def readings(draw) -> NvmlReading:
    n = draw(st.integers(min_value=0, max_value=3))
    gpus = [draw(gpu_readings(i)) for i in range(n)]
    if n > 1 and draw(st.booleans()):  # shared values exercise the compact `defaults`
        for g in gpus[1:]:
            g.name, g.nvlinks, g.power_w = gpus[0].name, list(gpus[0].nvlinks), gpus[0].power_w
    return NvmlReading(True, None, draw(st.none() | _text), draw(st.none() | _text), gpus)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reading=readings(), compact=st.booleans())
def test_any_reading_round_trips(tmp_path, reading, compact):
    assert replay(tmp_path, Snapshot("n", 0.0, reading), compact).nvml == reading


# ------------------------------------------------------------------ same verdict


def _verdict(scenario: str, state_dir) -> tuple:
    opts = RunOptions(stage="passive", config=Config(defaults(schema())), sources=SourceSpec(nvml_scenario=scenario),
                      state_dir=str(state_dir), hostname="gpu001")
    report = run_stage(opts)
    results = sorted((r.check, r.status.value, r.subject, r.message, r.action.value) for r in report.results)
    return report, results


@pytest.mark.parametrize("name", ["xid79-fallen-off-bus", "ib-flapping", "nvlink-down", "healthy-8xh200",
                                  "hw-slowdown", "nvml-unavailable", "gpu-missing-7"])
def test_snapshot_then_replay_gives_the_same_verdict(tmp_path, name):
    report, first = _verdict(os.path.join(SCENARIOS, name + ".yaml"), tmp_path / "a")
    path = tmp_path / "snap.yaml"
    path.write_text(dump_yaml(report.snapshot))
    again, second = _verdict(str(path), tmp_path / "b")
    assert second == first
    assert again.exit_code == report.exit_code


def test_fake_pynvml_constants_are_the_real_ones():
    """Guards the fake: it must not invent constants the real binding lacks."""
    fake = FakeNvml([])
    assert fake.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY == real.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY
    with pytest.raises(AttributeError):
        fake.nvmlDeviceGetSomethingUnfaked  # noqa: B018


def test_the_gpus_on_the_pci_bus_are_recorded_and_replayed(tmp_path):
    report, first = _verdict(os.path.join(SCENARIOS, "gpu-missing-7.yaml"), tmp_path / "a")
    assert report.snapshot.pci_gpus is not None and len(report.snapshot.pci_gpus) == 8
    assert dump_snapshot(report.snapshot)["pci_gpus"] == report.snapshot.pci_gpus
    assert replay(tmp_path, report.snapshot).pci_gpus == report.snapshot.pci_gpus
    assert ("gpu-count", "fail", "0000:db:00.0") in [r[:3] for r in first]


def test_occupancy_round_trips_with_the_lists_nvml_does_not_give(tmp_path):
    """A list NVML does not give (``unlisted``) replays as such: the reset plan refuses on it
    (gpuhc/slurm/repair/reset_probe.py), a replay as on the node."""
    from gpuhc.sources.gpu_procs import OccupancyLive

    gpus = [FakeGpu(compute_procs=[(4242, 1 << 30)],
                    fail={"nvmlDeviceGetGraphicsRunningProcesses": real.NVML_ERROR_NOT_SUPPORTED}),
            FakeGpu(pci="00000000:2A:00.0", uuid="GPU-1")]
    occ = OccupancyLive(module=FakeNvml(gpus), proc_root=str(tmp_path)).read()
    assert [g.unlisted for g in occ.gpus] == [["graphics"], []] and occ.gpus[0].processes[0].gone
    snap = Snapshot(hostname="gpu017", time=1741082400.5, nvml=NvmlLive(clock_samples=1, module=FakeNvml(gpus)).read(),
                    occupancy=occ)
    for compact in (True, False):
        assert replay(tmp_path, snap, compact).occupancy_source().read() == occ
