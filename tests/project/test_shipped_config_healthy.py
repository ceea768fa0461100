"""The checks around the GPU (hung-task, nic-health, firmware, ipoib, storage, kernel-health) say
nothing on a healthy node: every healthy recording in examples/scenarios/, run through the
runner as ``gpuhc check`` runs it, with the config a site copies (etc/gpuhc.yaml) and with none
(the schema's defaults), gives no WARN, FAIL or ERROR from them on any step. A check that warned
here would buy a site its noise (or a drain) with parity."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from gpuhc.model.result import Status
from tests.helpers.paths import REPO, SCENARIOS

CHECKS = ("hung-task", "nic-health", "firmware", "ipoib", "storage", "kernel-health")
HEALTHY = sorted(glob.glob(str(SCENARIOS / "healthy-*.yaml")))


def _config(which: str, tmp_path):
    from gpuhc.config.load import Config, defaults, load_config, schema

    if which == "defaults":
        return Config(defaults(schema()))
    path = tmp_path / "gpuhc.yaml"  # a copy: the checkout's file may be group-writable, which gpuhc refuses
    shutil.copy(REPO / "etc" / "gpuhc.yaml", path)
    os.chmod(path, 0o644)
    return load_config(str(path), hostname="gpu001")


def test_there_are_healthy_recordings_of_every_kind():
    assert len(HEALTHY) >= 5


@pytest.mark.parametrize("config", ["etc/gpuhc.yaml", "defaults"])
@pytest.mark.parametrize("path", HEALTHY, ids=os.path.basename)
def test_the_checks_around_the_gpu_say_nothing_on_a_healthy_recording(path, config, tmp_path):
    from gpuhc.run.runner import run_stage
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec
    from gpuhc.sources.scenario import load_scenario

    opts = RunOptions(stage="passive", config=_config(config, tmp_path), sources=SourceSpec(nvml_scenario=path),
                      state_dir=str(tmp_path / "state"), hostname="gpu001")
    for step in range(load_scenario(path).steps):
        report = run_stage(opts)
        mine = [r for r in report.results if r.check in CHECKS]
        assert {r.check for r in mine} == set(CHECKS), (step, sorted({r.check for r in mine}))  # each one ran
        loud = [(r.check, r.status.value, r.subject, r.message) for r in mine if r.status.rank > Status.PASS.rank]
        assert loud == [], (path, config, step, loud)


def test_the_same_run_hears_a_sick_recording(tmp_path):
    """The control: the same harness on a recording with an IPoIB interface down hears it."""
    from gpuhc.run.runner import run_stage
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec

    opts = RunOptions(stage="passive", config=_config("etc/gpuhc.yaml", tmp_path),
                      sources=SourceSpec(nvml_scenario=str(SCENARIOS / "ipoib-down.yaml")),
                      state_dir=str(tmp_path / "state"), hostname="gpu001")
    report = run_stage(opts)
    assert any(r.check == "ipoib" and r.status.rank > Status.PASS.rank for r in report.results)
