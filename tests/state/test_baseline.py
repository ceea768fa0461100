"""Baseline capture/load/show, and the checks judging a node against its baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from gpuhc.state.baseline import capture, doubts, load, render
from gpuhc.config.load import Config, defaults, schema
from gpuhc.errors import ConfigError, SourceError
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.sources.scenario import load_scenario
from tests.helpers.paths import REPO

ROOT = str(REPO)
SCENARIOS = os.path.join(ROOT, "examples", "scenarios")


def snap_of(name: str) -> Snapshot:
    s = load_scenario(os.path.join(SCENARIOS, name + ".yaml"))
    return Snapshot("gpu001", 1741082400.0, s.nvml, None, s.ib_ports, s.aer)


def test_capture_records_the_layout():
    doc = capture(snap_of("healthy-8xh100"))
    assert doc["version"] == 1 and doc["captured_at"] == "2025-03-04T10:00:00Z"
    assert (doc["hostname"], doc["driver_version"], doc["gpu_count"]) == ("gpu001", "580.95.05", 8)
    assert doc["gpu_model"] == "NVIDIA H100 80GB HBM3"
    g = doc["gpus"]["0000:5d:00.0"]
    assert (g["index"], g["pcie_gen_max"], g["pcie_width_max"], g["nvlink_active"]) == (3, 5, 16, 18)
    assert g["serial"] == "1652320010003"
    assert doc["ib"]["mlx5_7/1"] == {"rate_gbps": 400.0, "state": "ACTIVE", "link_layer": "InfiniBand"}


def test_capture_without_nvml_is_refused():
    with pytest.raises(SourceError, match="NVML unavailable"):
        capture(snap_of("nvml-unavailable"))


@pytest.mark.parametrize("name, words", [
    ("nvlink-down", "gpu2 NVLinks down: 4, 11"),
    ("pcie-width-x8", "gpu4 PCIe link x8 below its maximum x16"),
])
def test_doubts_name_what_looks_sick(name, words):
    assert words in doubts(snap_of(name))


def test_doubts_lost_gpu_and_mixed_models():
    snap = snap_of("healthy-8xh100")
    snap.nvml.gpus[1] = GpuReading(1, "unknown (NVML: GPU is lost)", "", "")
    found = doubts(snap)
    assert any("gpu1 did not answer NVML" in d for d in found) and any("mixed GPU models" in d for d in found)
    assert doubts(snap_of("healthy-8xh200")) == []


def test_load_round_trip_and_normalises_pci(tmp_path):
    doc = capture(snap_of("healthy-8xh200"))
    doc["gpus"] = {k.upper().replace("0000:", ""): v for k, v in doc["gpus"].items()}  # hand-edited ids
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(doc))
    back = load(str(path))
    assert sorted(back["gpus"]) == sorted(capture(snap_of("healthy-8xh200"))["gpus"])
    assert back["ib"] == doc["ib"]
    jpath = tmp_path / "b.json"
    jpath.write_text(json.dumps(doc))
    assert load(str(jpath))["gpu_count"] == 8


@pytest.mark.parametrize("text, where", [
    ("version: 2\n", "b.yaml:1: version: unsupported baseline version 2"),
    ("version: 1\ngpus: [a]\n", "b.yaml:2: gpus: must be a mapping"),
    ("version: 1\ngpus:\n  '0000:18:00.0': {index: zero}\n", "b.yaml:3: gpus.0000:18:00.0.index: has the wrong type"),
    ("version: 1\ngpu_count: -1\n", "b.yaml:2: gpu_count: must be a non-negative integer"),
    ("version: 1\nib: {mlx5_0/1: {rate_gbps: fast}}\n", "ib.mlx5_0/1.rate_gbps: has the wrong type"),
    ("- 1\n", "b.yaml:1: a baseline must be a mapping"),
    ("version: [1\n", "not valid YAML"),
])
def test_load_errors_name_file_line_key(tmp_path, text, where):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load(str(path))
    assert where in str(e.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read baseline"):
        load(str(tmp_path / "none.yaml"))


def test_render_lists_gpus_and_ports():
    text = render(capture(snap_of("healthy-8xh100")))
    assert "8 x NVIDIA H100 80GB HBM3" in text
    assert "  3  0000:5d:00.0  gen5 x16       18  1652320010003" in text
    assert "mlx5_0/1    ACTIVE    400 Gb/s  InfiniBand" in text


# ------------------------------------------------------------------ the checks use it


def _run(scenario: str, baseline_path: str, state_dir) -> list:
    data = defaults(schema())
    data["node"]["baseline"] = baseline_path
    opts = RunOptions(stage="passive", config=Config(data), sources=SourceSpec(nvml_scenario=scenario),
                      state_dir=str(state_dir), hostname="gpu001")
    return run_stage(opts).results


def test_a_missing_gpu_fails_against_the_baseline(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(capture(snap_of("healthy-8xh100"))))
    results = _run(os.path.join(SCENARIOS, "gpu-missing-7.yaml"), str(path), tmp_path / "s")
    failing = [r for r in results if r.status == Status.FAIL]
    assert [r.check for r in failing] == ["gpu-count"]
    assert "7 of 8" in failing[0].message


# ------------------------------------------------------------------ command line


def gpuhc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhc", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_cli_capture_then_show(tmp_path):
    out = tmp_path / "b.yaml"
    p = gpuhc("baseline", "capture", "--nvml-scenario", os.path.join(SCENARIOS, "healthy-8xh100.yaml"),
              "--node", "gpu001", "-o", str(out))
    assert p.returncode == 0, p.stderr
    assert "wrote" in p.stderr and "topology" not in load(str(out))  # no topology from a replay
    shown = gpuhc("baseline", "show", str(out))
    assert shown.returncode == 0 and "baseline of gpu001" in shown.stdout
    js = gpuhc("baseline", "show", "--json", str(out))
    assert json.loads(js.stdout)["gpu_count"] == 8


def test_cli_capture_refuses_a_sick_node_unless_forced(tmp_path):
    scenario = os.path.join(SCENARIOS, "nvlink-down.yaml")
    p = gpuhc("baseline", "capture", "--nvml-scenario", scenario)
    assert p.returncode == 2 and "NVLinks down" in p.stderr and "--force" in p.stderr and p.stdout == ""
    forced = gpuhc("baseline", "capture", "--nvml-scenario", scenario, "--force", "--json")
    assert forced.returncode == 0 and json.loads(forced.stdout)["gpus"]["0000:3a:00.0"]["nvlink_active"] == 16


def test_cli_show_bad_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "b.yaml"
    bad.write_text("version: 7\n")
    p = gpuhc("baseline", "show", str(bad))
    assert p.returncode == 2 and "b.yaml:1: version: unsupported baseline version 7" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply when running as root")
def test_root_refuses_a_baseline_others_can_write(tmp_path):
    """A baseline decides drains like the config: a writable one could make a sick node look
    normal (or drain a healthy one)."""
    path = tmp_path / "baseline.yaml"
    path.write_text("version: 1\ngpu_count: 8\n")
    path.chmod(0o666)
    with pytest.raises(ConfigError) as e:
        load(str(path))
    assert str(e.value) == f"{path}: refusing baseline: {path} is writable by group or others (chmod go-w)"
