"""The runner: per-check timeouts inside the stage budget, errors never look like a sick node."""

from __future__ import annotations

import time

import pytest

from gpuhc.checks.base import KERNEL_LOG, NVML, Check, CheckOutput, result
from gpuhc.config.load import Config, defaults, schema
from gpuhc.model.result import Action, Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec, Sources
from tests.helpers.source_fakes import FOREVER, FakeKlog, FakeNvml, FakeSysfs



def _judge_nvml(snapshot, ctx):
    ok = snapshot.nvml is not None and snapshot.nvml.available
    runs = ctx.prev.get("runs", 0) + 1
    return CheckOutput([result("fake-nvml", Status.PASS if ok else Status.FAIL, "nvml read", action=Action.NONE if ok else Action.DRAIN_REBOOT)], {"runs": runs})


def _judge_klog(snapshot, ctx):
    return CheckOutput([result("fake-klog", Status.PASS, f"now={snapshot.time:.0f}")])


def _judge_buggy(snapshot, ctx):
    raise KeyError("oops")


CHECKS = [
    Check("fake-nvml", (NVML,), _judge_nvml, timeout_s=0.5),
    Check("fake-klog", (KERNEL_LOG,), _judge_klog, timeout_s=0.5),
]


@pytest.fixture
def setup(monkeypatch, tmp_path):
    def make(nvml=None, checks=CHECKS, replay=False):
        monkeypatch.setattr("gpuhc.checks.checks_for_stage", lambda stage: list(checks))
        monkeypatch.setattr(
            "gpuhc.run.runner.build_sources",
            lambda spec, step=None: Sources(nvml or FakeNvml(), FakeKlog(), FakeSysfs(), replay=replay),
        )
        monkeypatch.setattr("gpuhc.run.runner._profile", lambda snapshot, config: None)
        cfg = Config(defaults(schema()))
        return RunOptions(stage="passive", config=cfg, sources=SourceSpec(), state_dir=str(tmp_path / "state"), hostname="n1")

    return make


def test_healthy_run_passes_and_keeps_state(setup):
    opts = setup()
    report = run_stage(opts)
    assert report.status is Status.PASS and report.exit_code == 0
    assert [r.check for r in report.results] == ["fake-nvml", "fake-klog"]
    report2 = run_stage(opts)
    assert report2.exit_code == 0
    from gpuhc.state.node import StateStore

    assert StateStore(opts.state_dir).read()["checks"]["fake-nvml"] == {"runs": 2}


def test_hung_source_is_named_and_run_ends_in_budget(setup):
    opts = setup(nvml=FakeNvml(hang=True))
    opts.budget_s = 2.0
    t0 = time.monotonic()
    report = run_stage(opts)
    elapsed = time.monotonic() - t0
    # The hung check is reported by id, the other check still judged, the run ended early.
    by_id = {r.check: r for r in report.results}
    assert by_id["fake-nvml"].status is Status.ERROR
    assert "timed out" in by_id["fake-nvml"].message and "nvml" in by_id["fake-nvml"].message
    assert by_id["fake-klog"].status is Status.PASS
    assert report.timed_out == ["fake-nvml"]
    assert report.exit_code == 3  # gpuhc could not judge: never a drain
    assert elapsed < opts.budget_s


def test_budget_caps_check_timeouts(setup):
    slow = [Check("fake-nvml", (NVML,), _judge_nvml, timeout_s=30.0)]
    opts = setup(nvml=FakeNvml(hang=True), checks=slow)
    opts.budget_s = 1.0
    t0 = time.monotonic()
    report = run_stage(opts)
    # The budget, not the check's 30 s, ended the wait: the message names it, and the run is far
    # from 30 s (no tight wall-clock bound: a loaded CI box adds seconds).
    assert report.timed_out == ["fake-nvml"] and time.monotonic() - t0 < 15.0
    assert [r.message for r in report.results] == ["timed out after 1.0s reading nvml"]


def test_source_error_is_an_error_not_a_failure(setup):
    report = run_stage(setup(nvml=FakeNvml(raises=True)))
    r = report.results[0]
    assert r.status is Status.ERROR and "ioctl failed" in r.message
    assert not report.failing()


def test_buggy_check_is_reported_not_raised(setup):
    checks = CHECKS + [Check("buggy", (NVML,), _judge_buggy)]
    report = run_stage(setup(checks=checks))
    buggy = [r for r in report.results if r.check == "buggy"][0]
    assert buggy.status is Status.ERROR and "internal error" in buggy.message
    assert not report.failing()


def test_replay_judges_at_the_recordings_time(setup):
    report = run_stage(setup(replay=True))
    assert [r.message for r in report.results if r.check == "fake-klog"] == ["now=1000000"]


def test_a_recording_read_after_the_wait_gave_up_is_still_judged_at_its_time(setup, monkeypatch):
    """On a loaded box the kernel log of a replay came a moment after the runner's first wait
    for it gave up: the check then judged the recording at today's date, and a recorded Xid 79
    fell out of its 24 h window (PASS). The first wait is made to give up here."""
    from gpuhc.run.read import Reader

    real_wait, late = Reader.wait, []

    def wait(self, deadline):
        if self.name == KERNEL_LOG and not late:
            late.append(real_wait(self, deadline))
            return False
        return real_wait(self, deadline)

    monkeypatch.setattr(Reader, "wait", wait)
    report = run_stage(setup(replay=True))
    assert late and [r.message for r in report.results if r.check == "fake-klog"] == ["now=1000000"]


def test_disabled_and_only(setup, tmp_path):
    opts = setup()
    opts.config.data["checks"] = {"fake-klog": {"enabled": False}}
    assert [r.check for r in run_stage(opts).results] == ["fake-nvml"]
    opts.config.data["checks"] = {}
    opts.only = ("fake-klog",)
    assert [r.check for r in run_stage(opts).results] == ["fake-klog"]


def test_unwritable_state_is_an_error_not_a_crash(setup, tmp_path):
    opts = setup()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    opts.state_dir = str(blocker / "state")  # a path under a regular file cannot be created
    report = run_stage(opts)
    assert any(r.check == "state" and r.status is Status.ERROR for r in report.results)
    assert not report.failing()


def test_unusable_baseline_is_an_error_result_every_run(setup, tmp_path):
    bad = tmp_path / "baseline.yaml"
    bad.write_text("gpus: [unclosed\n")
    opts = setup()
    opts.config.data["node"]["baseline"] = str(bad)
    for _ in range(2):  # not remembered across runs: each run says it cannot fully judge
        report = run_stage(opts)
        errs = [r for r in report.results if r.check == "baseline"]
        assert len(errs) == 1 and errs[0].status is Status.ERROR and str(bad) in errs[0].message
        assert not report.failing()


# ---------------------------------------------------------------- optional sources, real checks

XID79_LINE = "[Tue Mar  4 10:05:00 2025] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"


def test_hung_nvml_does_not_hide_an_xid_in_the_kernel_log(monkeypatch, tmp_path):
    """NVML often wedges exactly when a GPU falls off the bus: the Xid must still drain."""
    from gpuhc.checks.xid import CHECKS as XID
    from gpuhc.sources.kernel_log import FileKernelLog

    log = tmp_path / "kern.log"
    log.write_text(XID79_LINE)
    monkeypatch.setattr("gpuhc.checks.checks_for_stage", lambda stage: list(XID))
    monkeypatch.setattr("gpuhc.run.runner.build_sources", lambda spec, step=None: Sources(
        FakeNvml(hang=True), FileKernelLog(str(log)), FakeSysfs(), replay=True))
    cfg = Config(defaults(schema()))
    cfg.data["checks"] = {"xid": {"timeout_s": 1.0}}
    opts = RunOptions(stage="passive", config=cfg, sources=SourceSpec(), state_dir=str(tmp_path / "s"), hostname="n1")
    report = run_stage(opts)
    fails = report.failing()
    assert [r.check for r in fails] == ["xid"] and "79" in fails[0].message
    assert fails[0].subject == "0000:18:00.0"  # unattributed: NVML never answered
    assert any("judged without nvml" in n for n in report.notes)


class DownPortSysfs(FakeSysfs):
    def ib_ports(self):
        from gpuhc.model.host import IbPort

        return [IbPort("mlx5_1", 1, "DOWN", "Polling", 400.0, "InfiniBand")]


class HungKlog:
    def read(self):
        FOREVER.wait()


def test_hung_kernel_log_does_not_hide_a_down_ib_port(monkeypatch, tmp_path):
    from gpuhc.checks.infiniband import CHECKS as IBC

    monkeypatch.setattr("gpuhc.checks.checks_for_stage", lambda stage: list(IBC))
    monkeypatch.setattr("gpuhc.run.runner.build_sources", lambda spec, step=None: Sources(
        FakeNvml(), HungKlog(), DownPortSysfs(), replay=False))
    cfg = Config(defaults(schema()))
    cfg.data["checks"] = {"infiniband": {"timeout_s": 1.0}}
    opts = RunOptions(stage="passive", config=cfg, sources=SourceSpec(), state_dir=str(tmp_path / "s"), hostname="n1")
    report = run_stage(opts)
    assert [(r.check, r.subject) for r in report.failing()] == [("infiniband", "mlx5_1/1")]
    assert any("judged without kernel_log" in n for n in report.notes)


def test_also_runs_a_check_the_stage_does_not(tmp_path):
    """The health check of a node held for occupancy judges occupancy too (RunOptions.also,
    set by gpuhc/slurm/flows/entry.py from policy.rejudge); without it the passive stage never does."""
    from tests.helpers.paths import SCENARIOS as scen

    stray = tmp_path / "stray.yaml"
    stray.write_text((scen / "stray-process.yaml").read_text().replace(
        "extends: healthy-8xh100.yaml", f"extends: {scen / 'healthy-8xh100.yaml'}"))

    def occupancy(**kw):
        opts = RunOptions(stage="passive", config=Config(defaults(schema())), state_dir=str(tmp_path / "st"),
                          sources=SourceSpec(nvml_scenario=str(stray)), **kw)
        return [(r.status, r.subject) for r in run_stage(opts).results if r.check == "occupancy"]

    assert occupancy() == []
    got = occupancy(also=("occupancy",))
    assert (Status.FAIL, "gpu1") in got and len(got) == 8
    assert occupancy(also=("occupancy",), occupancy=False) == []  # "cannot tell whose" still wins
    assert occupancy(also=("no-such-check",)) == []
