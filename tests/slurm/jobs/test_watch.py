"""The node watcher (issue 32), without Slurm: `gpuhc watch` replaying a real hang round by round
(tests/fixtures/jobs/h100x4-device.jsonl) into the check's state, the run lock taken only to
write, and nothing written for a node whose GPUs hold no job. Its Slurm side (AdminComment,
hooks) is tests/slurm_real/test_jobs.py's."""

from __future__ import annotations

import json
import os

import yaml

from gpuhc.slurm.jobs.watch import Round, Watcher
from tests.helpers.cli import gpuhc
from tests.helpers.paths import FIXTURES, SCENARIOS

TICKS = [json.loads(line) for line in (FIXTURES / "jobs" / "h100x4-device.jsonl").read_text().splitlines()]


def scenario(tmp_path, *ticks: dict) -> str:
    """A scenario whose step k is the recording's tick k (its activity, job id kept). The device
    had no Slurm, so its ranks were found through their environment; here they are found as on a
    Slurm node, through slurmstepd's cgroup: a job found only through the environment is never
    acted on (issue 29, docs/security.md)."""
    acts = [_on_slurm(t) for t in ticks]
    doc = {"extends": str(SCENARIOS / "healthy-8xh100.yaml"), "activity": acts[0],
           "steps": [{"activity": a} for a in acts[1:]]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _on_slurm(tick: dict) -> dict:
    """A recorded tick's activity with its ranks found through slurmstepd's cgroup, owned by one
    user (the recording predates owners; without them the Slurm side refuses the job: issue 29)."""
    act = json.loads(json.dumps(tick["activity"]))
    for g in act.get("gpus", []):
        g["via"] = "cgroup"
        g["owners"] = {j: [1000] for j in g.get("jobs", [])}
    return act


def config(tmp_path) -> str:
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": {"log_file": str(tmp_path / "decisions.log"), "syslog": False,
                                             "scontrol": str(tmp_path / "no-scontrol")}}))
    return str(cfg)


def test_rounds_of_a_real_hang_call_it_and_record_the_state(tmp_path):
    hang = [t for t in TICKS if t["run"] == "hang"]
    path = scenario(tmp_path, hang[1], hang[2], hang[3])  # running, hang suspected (14 s), hang
    state = tmp_path / "state"
    p = gpuhc("watch", "--rounds", "3", "--interval", "1", "--config", config(tmp_path), "--state-dir", str(state),
              "--nvml-scenario", path, "--node", "gpu01")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((state / "state.json").read_text())
    job = doc["checks"]["jobs"]["jobs"]["4242"]
    assert job["signature"] == "hang" and job["culprits"] == [3]
    log = (tmp_path / "decisions.log").read_text()
    assert "gpuhc watch gpu01: watch: job 4242 looks hung" in log and "culprit: gpu3" in log
    # The Slurm side was asked (and could not answer here: no scontrol), and said so.
    assert "jobs: job 4242: not recorded" in log


def test_a_node_whose_gpus_hold_no_job_writes_nothing(tmp_path):
    path = scenario(tmp_path, TICKS[0], TICKS[0])  # no GPU held
    state = tmp_path / "state"
    p = gpuhc("watch", "--rounds", "2", "--interval", "1", "--config", config(tmp_path), "--state-dir", str(state),
              "--nvml-scenario", path, "--node", "gpu01")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not (state / "state.json").exists() and not (state / "slurm.lock").exists()


class _Reader:
    def __init__(self, ticks):
        from gpuhc.sources.activity_io import activity_from_dict

        self.acts = [activity_from_dict(_on_slurm(t)) for t in ticks]

    def read(self):
        return self.acts.pop(0)


def hang_flow(tmp_path):
    """The hang run's ticks, and a passive flow for gpu01 at the hang's time whose log lines are kept."""
    from gpuhc.cli.common import SourceArgs, run_options_from
    from gpuhc.slurm.flows.frame import Flow

    hang = [t for t in TICKS if t["run"] == "hang"]
    opts = run_options_from(SourceArgs(config_path=config(tmp_path), state_dir=str(tmp_path / "s"), hostname="gpu01",
                                       now=str(hang[3]["time"])), "passive")
    flow = Flow.for_command(opts, "gpuhc watch", "passive")
    lines: list[str] = []
    flow.log = lambda text, loud=False: lines.append(text)
    return hang, flow, lines


def test_the_run_lock_is_taken_only_to_write_and_a_busy_lock_is_left_to_its_holder(tmp_path):
    import fcntl

    hang, flow, lines = hang_flow(tmp_path)
    w = Watcher(flow, _Reader([hang[1], hang[3], hang[3]]))
    first = w.round()
    assert isinstance(first, Round) and not first.published and first.jobs == 1  # running: nothing to write
    lock = os.open(tmp_path / "s" / "slurm.lock", os.O_RDWR | os.O_CREAT) if (tmp_path / "s").exists() else None
    assert lock is not None
    fcntl.flock(lock, fcntl.LOCK_EX)  # a health check holds the node's turn
    flow.opts.config.section("slurm")["deadline_s"]["passive"] = 5.5  # so the wait for it is short
    busy = w.round()
    assert busy.lock_busy and not busy.published
    fcntl.flock(lock, fcntl.LOCK_UN)
    free = w.round()
    assert free.published and any("not recorded" in line for line in lines)
    os.close(lock)


def test_a_scenario_that_does_not_load_is_a_usage_error_said_once(tmp_path):
    from tests.helpers.cli import one_line_error

    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: /nonexistent/base.yaml\n")
    p = gpuhc("watch", "--rounds", "1", "--config", config(tmp_path), "--state-dir", str(tmp_path / "s"),
              "--nvml-scenario", str(bad))
    assert "no such scenario" in one_line_error(p, 2)


def test_slurm_is_asked_only_with_something_to_say(tmp_path):
    from gpuhc.cli.common import SourceArgs, run_options_from
    from gpuhc.slurm.flows.frame import Flow

    hang = [t for t in TICKS if t["run"] == "hang"]
    idle = json.loads(json.dumps(hang[3]))
    for g in idle["activity"]["gpus"]:
        g.update({k: hang[3]["activity"]["gpus"][3][k] for k in ("gpu_util", "mem_util", "power_w")})  # all like gpu3
    clock = [1000.0]
    opts = run_options_from(SourceArgs(config_path=config(tmp_path), state_dir=str(tmp_path / "s"), hostname="gpu01"), "passive")
    flow = Flow.for_command(opts, "gpuhc watch", "passive")
    flow.log = lambda text, loud=False: None
    w = Watcher(flow, _Reader([idle, idle, idle, hang[1]]), clock=lambda: clock[0])
    assert w.round().published  # all idle: the record is read once ...
    clock[0] += 12
    assert not w.round().published  # ... not every round
    clock[0] += 60
    assert w.round().published  # ... and again a minute later
    clock[0] += 12
    assert not w.round().published  # running, nothing written before: nothing to say


def test_a_hang_of_processes_not_one_users_is_refused_once_and_not_asked_about_again(tmp_path):
    """Issue 29: the job's processes are two users' (a second user's process in it): the Slurm
    side refuses it once (said, no Slurm call); later rounds take neither the lock nor Slurm."""
    hang, flow, lines = hang_flow(tmp_path)
    reader = _Reader([hang[3], hang[3], hang[3]])
    for act in reader.acts:
        act.gpus[3].owners = {"4242": [1000, 1001]}
    w = Watcher(flow, reader)
    assert w.round().published
    assert not w.round().published and not w.round().published
    refused = [x for x in lines if "are not its user's" in x]
    assert len(refused) == 1 and "uid 1000,1001" in refused[0] and not any("not recorded" in x for x in lines), lines


def test_the_live_reader_holds_nvml_and_pairs_gpm_only_once_it_does(monkeypatch):
    import pynvml

    from gpuhc.config.load import Config
    from gpuhc.slurm.jobs import watch as jobs_watch

    calls = []

    def init():  # the driver answers from the second try on
        calls.append("init")
        if len(calls) == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    monkeypatch.setattr(pynvml, "nvmlInit", init)
    reader = jobs_watch.live_reader(Config({}))
    seen = []
    reader.reader.read = lambda: seen.append(reader.reader.gpm_between_reads)
    reader.read()  # the driver not up yet: no GPM pairing across a shutdown
    reader.read()  # now held: paired from here on, NVML never initialised again
    reader.read()
    assert seen == [False, True, True] and calls == ["init", "init"]
    assert reader.reader.gpm_window_s == 0.0  # never waits
