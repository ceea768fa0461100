"""The fabric readings in the recording format: `gpuhc snapshot` writes them, a replay reads them
back to the same verdict, a bad section is refused by name, and `imex_required` turns the IMEX
scenario into a drain through the real runner."""

from __future__ import annotations

import os

import pynvml as real
import pytest

from tests.helpers.fake_pynvml import FakeGpu, FakeNvml
from gpuhc.config.load import Config, defaults, schema
from gpuhc.errors import SourceError
from gpuhc.model.host import ImexStatus
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.run.runner import read_snapshot, run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.sources.nvml import NvmlLive
from gpuhc.sources.scenario import load_scenario
from gpuhc.sources.snapshot_format import dump_snapshot, dump_yaml
from tests.helpers.paths import REPO

ROOT = str(REPO)
SCENARIOS = os.path.join(ROOT, "examples", "scenarios")


def run(tmp_path, scenario: str, runs: int = 1, check: str = "fabric", **thresholds):
    data = defaults(schema())
    if thresholds:
        data["checks"] = {check: {"thresholds": thresholds}}
    opts = RunOptions(stage="passive", config=Config(data), sources=SourceSpec(nvml_scenario=scenario),
                      state_dir=str(tmp_path / "state"), hostname="gb200-tray01")
    for _ in range(runs):
        report = run_stage(opts)
    return report


def test_imex_required_makes_a_down_domain_a_drain(tmp_path):
    report = run(tmp_path, os.path.join(SCENARIOS, "imex-domain-down.yaml"), check="imex", imex_required=True)
    failing = [(r.check, r.subject, r.action.value) for r in report.results if r.status is Status.FAIL]
    assert failing == [("imex", "node", "drain + reboot")] and report.exit_code == 1


def test_a_live_gb200_reading_round_trips_through_a_snapshot(tmp_path):
    info = {"cliqueId": 4026, "clusterUuid": bytes.fromhex("9c6f5af353bf49b5a436b66766c413c3"),
            "healthMask": 0x51AA, "healthSummary": real.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY}
    fields = {**FakeGpu().fields, "NVML_FI_DEV_C2C_LINK_ERROR_INTR": 3, "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY": 0,
              "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B": 0}
    fake = FakeNvml([FakeGpu(name="NVIDIA GB200", uuid=f"GPU-{i}", pci=f"0000000{8 + i}:01:00.0", fabric_info=info,
                             fields=fields) for i in range(2)])
    reading = NvmlLive(clock_samples=1, module=fake).read()
    assert reading.gpus[1].fabric_health_summary == "healthy" and reading.gpus[1].c2c_errors["crc"] == 3
    imex = ImexStatus(installed=True, daemon="READY", domain="UP", nodes={"10.136.206.48": "READY"})
    snap = Snapshot("gb200-tray01", 1760535023.0, reading, imex=imex)
    for compact in (True, False):
        path = tmp_path / f"snap-{compact}.yaml"
        path.write_text(dump_yaml(snap, compact))
        s = load_scenario(str(path))
        assert s.nvml == reading and s.imex_source().read() == imex


def test_gpuhc_snapshot_of_a_replayed_tray_keeps_fabric_and_imex(tmp_path):
    snap = read_snapshot(SourceSpec(nvml_scenario=os.path.join(SCENARIOS, "healthy-4xgb200.yaml")), "gb200-tray01")
    doc = dump_snapshot(snap)
    assert doc["imex"]["domain"] == "UP" and doc["defaults"]["fabric_clique_id"] == 4026
    assert doc["defaults"]["c2c_errors"] == {"crc": 0, "replay": 0, "replay_b2b": 0}
    path = tmp_path / "again.yaml"
    path.write_text(dump_yaml(snap))
    before, after = run(tmp_path / "a", os.path.join(SCENARIOS, "healthy-4xgb200.yaml")), run(tmp_path / "b", str(path))
    assert [(r.check, r.status) for r in before.results] == [(r.check, r.status) for r in after.results]


def test_old_scenarios_without_the_new_fields_have_none_of_them():
    s = load_scenario(os.path.join(SCENARIOS, "healthy-8xh100.yaml"))
    assert s.imex_source().read() is None
    assert all(g.fabric_health_mask is None and g.c2c_errors is None for g in s.nvml.gpus)


@pytest.mark.parametrize("section,words", [
    ("imex: {daemon: READY}", "imex: the imex section needs `installed`"),
    ("imex: {installed: true, state: UP}", "unknown imex field 'state'"),
    ("imex: {installed: true, nodes: [a, b]}", "imex nodes must map a node address to its state"),
    ("imex: {installed: yes please}", "must be true or false"),
    ("defaults: {c2c_errors: {crc: -1}}", "counter values must be non-negative integers"),
    ("defaults: {fabric_health_mask: -5}", "must not be negative"),
    ("defaults: {fabric_clique_id: two}", "must be an integer"),
])
def test_a_bad_fabric_section_is_refused_by_name(tmp_path, section, words):
    path = tmp_path / "bad.yaml"
    path.write_text(f"extends: {os.path.join(SCENARIOS, 'healthy-4xgb200.yaml')}\n{section}\n")
    with pytest.raises(SourceError) as e:
        load_scenario(str(path))
    assert words in str(e.value) and "bad.yaml" in str(e.value)
