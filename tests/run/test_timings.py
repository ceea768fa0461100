"""What a run cost, per source and per check (gpuhc/run/timings.py; issue 47).

The numbers are wall-clock: the tests hold only what a sleep guarantees (a read or a judge that
sleeps 50 ms costs at least that), never an upper bound on a shared machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


import pytest

from gpuhc.checks.base import KERNEL_LOG, NVML, Check, CheckOutput, result
from gpuhc.config.load import Config, defaults, schema
from gpuhc.model.result import Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.run.timings import timing_lines
from gpuhc.sources import SourceSpec, Sources
from tests.helpers.paths import REPO
from tests.helpers.source_fakes import FakeKlog, FakeNvml, FakeSysfs

HEALTHY = str(REPO / "examples" / "scenarios" / "healthy-8xh100.yaml")


def _pass(check_id):
    return lambda snapshot, ctx: CheckOutput([result(check_id, Status.PASS, "fine")])


CHECKS = [Check("fake-nvml", (NVML,), _pass("fake-nvml"), timeout_s=0.5),
          Check("fake-klog", (KERNEL_LOG,), _pass("fake-klog"), timeout_s=0.5)]


@pytest.fixture
def setup(monkeypatch, tmp_path):
    def make(nvml=None, checks=CHECKS):
        monkeypatch.setattr("gpuhc.checks.checks_for_stage", lambda stage: list(checks))
        monkeypatch.setattr("gpuhc.run.runner.build_sources",
                            lambda spec, step=None: Sources(nvml or FakeNvml(), FakeKlog(), FakeSysfs(), replay=False))
        monkeypatch.setattr("gpuhc.run.runner._profile", lambda snapshot, config: None)
        return RunOptions(stage="passive", config=Config(defaults(schema())), sources=SourceSpec(),
                          state_dir=str(tmp_path / "state"), hostname="n1")

    return make


def _slow_judge(snapshot, ctx):
    time.sleep(0.05)
    return CheckOutput([result("slow", Status.PASS, "judged slowly")])


def test_timings_are_left_out_unless_asked(setup):
    report = run_stage(setup())
    assert report.timings is None and "timings" not in report.to_dict()


def test_each_source_and_each_check_has_its_wall_time(setup):
    checks = [*CHECKS, Check("slow", (KERNEL_LOG,), _slow_judge, timeout_s=2.0)]
    opts = setup(nvml=FakeNvml(sleep_s=0.05), checks=checks)
    opts.timings = True
    report = run_stage(opts)
    t = report.to_dict()["timings"]
    assert t["unit"] == "ms"
    assert set(t["sources"]) == {NVML, KERNEL_LOG}
    assert t["sources"][NVML]["wall_ms"] >= 50 and t["sources"][NVML]["error"] is False
    assert t["checks"]["slow"]["judge_ms"] >= 50 and t["checks"]["slow"]["sources"] == [KERNEL_LOG]
    assert t["checks"]["fake-nvml"]["sources"] == [NVML]
    assert set(t["phases"]) == {"before_run_ms", "select_ms", "start_sources_ms", "checks_ms", "state_ms", "run_ms"}
    assert t["phases"]["checks_ms"] >= 50
    json.dumps(t)  # plain data: the JSON report and the event log carry it


def test_a_source_that_never_answered_has_no_cost_and_its_check_did_not_judge(setup):
    opts = setup(nvml=FakeNvml(hang=True))
    opts.budget_s, opts.timings = 1.0, True
    report = run_stage(opts)
    t = report.timings
    assert t["sources"][NVML]["wall_ms"] is None
    assert t["checks"]["fake-nvml"]["judge_ms"] is None and t["checks"]["fake-nvml"]["wait_ms"] > 0
    assert t["checks"]["fake-klog"]["judge_ms"] is not None


def test_a_failed_source_is_marked(setup):
    opts = setup(nvml=FakeNvml(raises=True))
    opts.timings = True
    t = run_stage(opts).timings
    assert t["sources"][NVML]["error"] is True and t["checks"]["fake-nvml"]["judge_ms"] is None


def test_the_table_lists_the_dearest_check_first(setup):
    checks = [*CHECKS, Check("slow", (KERNEL_LOG,), _slow_judge, timeout_s=2.0)]
    opts = setup(checks=checks)
    opts.timings = True
    lines = timing_lines(run_stage(opts).timings)
    header = lines.index(next(line for line in lines if line.startswith("CHECK")))
    assert lines[header + 1].split()[0] == "slow"
    assert {line.split()[0] for line in lines[header + 1:]} == {"slow", "fake-nvml", "fake-klog"}


def _gpuhc(*args: str, tmp_path) -> subprocess.CompletedProcess:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    return subprocess.run([sys.executable, "-m", "gpuhc", "check", "--config", str(empty), "--nvml-scenario",
                           HEALTHY, *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_check_timings_prints_every_check_and_source(tmp_path):
    p = _gpuhc("--timings", tmp_path=tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    rows = out[out.index(next(line for line in out if line.startswith("CHECK"))) + 1:]
    ids = {r.split()[0] for r in rows}
    assert {"xid", "ecc", "nvlink", "gpu-count"} <= ids
    assert any(line.startswith("nvml ") for line in out) and any(line.startswith("kernel_log ") for line in out)


def test_check_json_has_timings_only_when_asked(tmp_path):
    with_t = json.loads(_gpuhc("--json", "--timings", tmp_path=tmp_path).stdout)
    without = json.loads(_gpuhc("--json", tmp_path=tmp_path).stdout)
    assert "timings" not in without
    judged = {r["check"] for r in with_t["results"]}
    assert judged <= set(with_t["timings"]["checks"])
    assert all(c["judge_ms"] is not None for c in with_t["timings"]["checks"].values())

