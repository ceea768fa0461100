"""bench/jobs_analyze.py on a device run's files made from the issue-24 recording: the watcher's
decision-log lines as gpuhc writes them (gpuhc/slurm/flows/log.py, the watcher's own messages), the
phases as the workload prints them, and the monitor's lines; so the analysis that fills
docs/verification.md reads what the device run will leave."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest

from gpuhc.checks import jobs, jobs_judge as jj
from gpuhc.checks.base import Context
from gpuhc.model.snapshot import Snapshot
from gpuhc.slurm.jobs.watch import Watcher
from gpuhc.sources.activity_io import activity_from_dict
from tests.helpers.paths import FIXTURES, REPO

TICKS = [json.loads(line) for line in (FIXTURES / "jobs" / "h100x4-device.jsonl").read_text().splitlines()]
STALL = 1795697758.969


def analyze():
    spec = importlib.util.spec_from_file_location("jobs_analyze", os.path.join(REPO, "bench", "jobs_analyze.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Flow:
    """What Watcher.round reads of a flow, with the real decision log."""

    def __init__(self, tmp_path, log):
        from gpuhc.config.load import load_config
        from gpuhc.run.report import RunOptions
        from gpuhc.sources import SourceSpec

        cfg = tmp_path / "gpuhc.yaml"
        cfg.write_text("slurm: {scontrol: /nonexistent/scontrol, syslog: false}\n")
        self.opts = RunOptions(stage="passive", config=load_config(str(cfg)), sources=SourceSpec(),
                               state_dir=str(tmp_path / "state"), hostname="dev")
        self.log, self.node, self.started = log, "dev", time.monotonic()

    @property
    def deadline(self):
        from gpuhc.model.deadline import Deadline

        return Deadline(self.started + 5.5)

    @property
    def slurm(self):
        return self.opts.config.section("slurm")

    def now(self):
        return time.time()


def device_run(tmp_path, monkeypatch) -> str:
    """The hang run as the device script would leave it: job 3300, gpu3 stalled at STALL."""
    from gpuhc.slurm.flows import log as logmod

    out = tmp_path / "out"
    out.mkdir()
    hang = [json.loads(json.dumps(t)) for t in TICKS if t["run"] == "hang"]
    for t in hang:
        for g in t["activity"]["gpus"]:
            g["jobs"] = ["3300"]
    stamp = [0.0]
    real = time.strftime
    monkeypatch.setattr(logmod.time, "strftime", lambda fmt, *a: real(fmt, time.localtime(stamp[0])))
    log = logmod.Log("gpuhc watch dev", str(out / "decisions.log"), use_syslog=False, echo=False)

    class Reader:
        def read(self):
            return activity_from_dict(hang[min(i, len(hang) - 1)]["activity"])
    flow = _Flow(tmp_path, log)
    w = Watcher(flow, Reader(), clock=lambda: stamp[0])
    for i, t in enumerate(hang):
        stamp[0] = t["time"]
        for r in w.round().results:
            if r.status.value == "warn":
                log(f"watch: {r.message}")
    (out / "stalls.jsonl").write_text(json.dumps({"job": "3300", "rank": 3, "gpu": 3, "start": STALL, "seconds": 90, "n": 0}) + "\n")
    prev: dict = {}
    with open(out / "monitor-cases.jsonl", "w") as f, open(out / "phases.txt", "w") as ph:
        ph.write(json.dumps({"phase": "train", "time": hang[0]["time"], "seconds": STALL - hang[0]["time"]}) + "\n")
        ph.write(json.dumps({"phase": "stall", "time": STALL, "seconds": 120}) + "\n")
        for t in hang:
            for g in t["activity"]["gpus"]:
                g["jobs"] = ["3201"]
            res = jobs.judge(Snapshot("dev", t["time"], activity=activity_from_dict(t["activity"])),
                             Context(thresholds=dict(jj.DEFAULTS), prev=prev))
            prev = res.state or {}
            f.write(json.dumps({"time": t["time"], "results": [r.to_dict() for r in res.results],
                                "activity": t["activity"], "run": "train" if t["time"] < STALL else "stall"}) + "\n")
    with open(out / "watch-cpu.jsonl", "w") as f:
        stat = (FIXTURES / "jobs" / "proc" / "spinner.stat").read_text().strip()
        f.write(json.dumps({"part": "stalls", "pid": 1, "t": 0.0, "stat": stat.replace(" 71 1 ", " 0 0 ")}) + "\n")
        f.write(json.dumps({"part": "stalls", "pid": 1, "t": 100.0, "stat": stat}) + "\n")
    return str(out)


def test_the_analysis_reads_the_device_runs_files(tmp_path, monkeypatch):
    a = analyze()
    out = device_run(tmp_path, monkeypatch)
    watched = a.watcher_lines(out)
    assert watched and {(w["job"], w["kind"], tuple(w["culprits"])) for w in watched} == {("3300", "hang", ("gpu3",))}
    s = a.stalls(out, watched)
    assert s["stalls"] == s["named"] == 1 and s["missed"] == [] and s["findings_outside_a_stall"] == []
    first_named = min(w["t"] for w in watched)
    assert s["p50_s"] == s["p90_s"] == pytest.approx(first_named - STALL, abs=0.1) and 0 < s["p90_s"] < 60
    rows = {r["phase"]: r for r in a.cases(out, watched)}
    assert rows["train"]["health_check_ok"] is True and rows["stall"]["health_check_ok"] is False  # gpu3, not gpu2
    # 72 clock ticks of CPU (the spinner's utime + stime) over 100 s of wall time
    assert a.cpu(out)["stalls"]["percent_of_one_core"] == pytest.approx(72 / os.sysconf("SC_CLK_TCK"), abs=0.001)
    assert a.recording(out, "GPU 0: test") == len([t for t in TICKS if t["run"] == "hang"])


def test_a_watcher_round_counts_for_the_phase_that_holds_most_of_its_window(tmp_path, monkeypatch):
    # The 4x H200 run's own decision log and phases (tests/fixtures/jobs/README.md): the
    # watcher's round 1 s into `load` still judged `work2` (gpu2); its next, 11 s in, named gpu3.
    monkeypatch.setenv("TZ", "UTC")  # the log's local time was UTC on the device
    time.tzset()
    a = analyze()
    run = FIXTURES / "jobs" / "h200x4-issue32-run"
    for name in ("decisions.log", "phases.txt"):
        (tmp_path / name).write_text((run / name).read_text())
    try:
        rows = {r["phase"]: r for r in a.cases(str(tmp_path), a.watcher_lines(str(tmp_path)))}
    finally:
        monkeypatch.undo()
        time.tzset()
    assert rows["work2"]["watcher_first"] == {"after_s": 9, "kind": "straggler", "culprits": ["gpu2"]}
    assert rows["load"]["watcher_first"] == {"after_s": 11, "kind": "straggler", "culprits": ["gpu3"]}
    assert rows["ckpt"]["watcher_first"] is None
