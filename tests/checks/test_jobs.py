"""The jobs check (issue 24) on activity recorded on a real 4x H100 machine, and its rules."""

from __future__ import annotations

import json

import pytest

from gpuhc.checks import jobs, jobs_judge as jj
from gpuhc.checks.base import Context
from gpuhc.model.activity import Activity, GpuActivity
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources.activity_io import activity_from_dict
from tests.helpers.paths import FIXTURES

TICKS = [json.loads(line) for line in
         (FIXTURES / "jobs" / "h100x4-device.jsonl").read_text().splitlines()]
STALL = 1795697758.969  # when rank 3 stopped (the hang run's mark file)
STRAGGLER_SEEN = (1795698330, 1795698380)  # the pause run's ticks that saw the straggler run


def ticks(run: str) -> list[dict]:
    return [t for t in TICKS if t["run"] == run]


def replay(run: str, **thresholds) -> list[tuple[dict, list]]:
    """Judge a recorded run tick by tick with the shipped defaults, state carried as the runner does."""
    prev: dict = {}
    out = []
    for t in ticks(run):
        res = jobs.judge(Snapshot("gpu01", t["time"], activity=activity_from_dict(t["activity"])),
                         Context(thresholds={**jj.DEFAULTS, **thresholds}, prev=prev))
        prev = res.state or {}
        out.append((t, res.results))
    return out


def warnings(results: list) -> list:
    return [r for r in results if r.status is Status.WARN]


def test_real_hang_is_called_at_the_first_tick_after_the_stall_with_the_stalled_gpu_named():
    judged = replay("hang")
    before = [res for t, res in judged if t["time"] < STALL]
    assert before and not any(warnings(res) for res in before)
    first_after = next(res for t, res in judged if t["time"] > STALL)
    (w,) = warnings(first_after)
    assert w.subject == "job4242" and w.action is Action.RESTART_APP
    assert w.value["culprits"] == ["gpu3"] and w.value["signature"] == "hang"
    assert w.value["gpus"] == {"gpu0": "spin", "gpu1": "spin", "gpu2": "spin", "gpu3": "idle"}
    assert "culprit: gpu3" in w.message


def test_the_hangs_since_is_kept_across_runs():
    judged = replay("hang")
    sinces = [warnings(res)[0].value["since"] for t, res in judged if t["time"] > STALL]
    assert len(sinces) >= 2 and len(set(sinces)) == 1
    assert STALL - 1 <= sinces[0] <= STALL + 30  # no earlier than the stall; the buffer shows the last ~14 s


def test_real_straggler_names_the_loaded_gpu():
    for t, res in replay("straggler"):
        ws = warnings(res)
        assert {w.subject for w in ws} == {"job4242", "job4243"}
        assert all(w.value["culprits"] == ["gpu2"] and w.action is Action.NONE for w in ws)


def test_ten_minute_run_with_data_loading_pauses_has_no_finding():
    judged = replay("pause-run")
    quiet = [(t, res) for t, res in judged
             if not STRAGGLER_SEEN[0] <= t["time"] <= STRAGGLER_SEEN[1] and t is not judged[-1][0]]
    assert len(quiet) >= 15
    assert [r.message for t, res in quiet for r in warnings(res)] == []
    assert {r.value["signature"] for t, res in quiet for r in res} == {"running"}


def test_the_straggler_it_overlapped_is_seen_in_it_too():
    seen = [res for t, res in replay("pause-run") if STRAGGLER_SEEN[0] <= t["time"] <= STRAGGLER_SEEN[1]]
    assert any(w.value["culprits"] == ["gpu2"] for res in seen for w in warnings(res))


def gpu(i: int, util: float, mem: float, watts: float, job: str = "7", span: float = 14.0, uid: int = 1000) -> GpuActivity:
    return GpuActivity(index=i, jobs=[job], span_s=span, gpu_util=[util] * 70, mem_util=[mem] * 70,
                       power_w=[watts] * 100, power_limit_w=700.0, sm_clock_mhz=1980.0, owners={job: [uid]})


def judge(gpus: list[GpuActivity], prev: dict | None = None, now: float = 1000.0, **t):
    return jobs.judge(Snapshot("n", now, activity=Activity(available=True, gpus=gpus)),
                      Context(thresholds={**jj.DEFAULTS, **t}, prev=prev or {}))


# Synthesized from the table (utilization 0 %, 74 W: a GPU with nothing to do).
def test_all_gpus_idle_is_never_a_hang_however_long():
    prev = None
    for now in (1000.0, 1300.0, 1600.0):
        out = judge([gpu(i, 0, 0, 74) for i in range(4)], prev, now)
        prev = out.state
        assert [r.status for r in out.results] == [Status.PASS]
        assert out.results[0].value["signature"] == "idle"


def test_a_hang_shorter_than_hang_min_s_is_only_suspected_then_called_from_memory():
    spin = [gpu(0, 100, 0, 130), gpu(1, 100, 0, 130), gpu(2, 0, 0, 125)]
    first = judge(spin, hang_min_s=60)
    assert first.results[0].status is Status.PASS and "suspected" in first.results[0].message
    later = judge(spin, first.state, now=1050.0, hang_min_s=60)
    assert later.results[0].status is Status.WARN and later.results[0].value["lasted_s"] == 64.0


def test_a_job_that_recovers_starts_over():
    spin = [gpu(0, 100, 0, 130), gpu(1, 0, 0, 125)]
    hung = judge(spin)
    ok = judge([gpu(0, 99, 30, 690), gpu(1, 99, 30, 690)], hung.state, now=1030.0)
    again = judge(spin, ok.state, now=1060.0, hang_min_s=20)
    assert again.results[0].status is Status.PASS and again.results[0].value["since"] == 1060.0 - 14.0


def test_spinning_at_high_power_is_not_a_hang():
    out = judge([gpu(0, 100, 0, 600), gpu(1, 100, 0, 610)])
    assert out.results[0].value["signature"] == "running"


def test_too_few_samples_are_not_judged():
    out = judge([gpu(0, 100, 0, 130, span=1.0), gpu(1, 0, 0, 120)])
    assert out.results[0].value["signature"] == "unknown" and out.results[0].status is Status.PASS


def test_every_gpu_spinning_here_says_the_culprit_is_elsewhere():
    out = judge([gpu(0, 100, 0, 130), gpu(1, 100, 0, 131)])
    assert out.results[0].status is Status.WARN and out.results[0].value["culprits"] == []
    assert "another node" in out.results[0].message


def test_straggler_needs_both_power_and_memory_traffic_above_the_peers():
    even = judge([gpu(i, 99, 31, 695) for i in range(4)])
    assert even.results[0].value["signature"] == "running"
    hot_only = judge([gpu(0, 99, 14, 690)] + [gpu(i, 99, 14, 430) for i in (1, 2, 3)])
    assert hot_only.results[0].value["signature"] == "running"


def test_repeat_culprit_drains_only_when_asked():
    hung = [gpu(0, 100, 0, 130, job="11", uid=1001), gpu(1, 0, 0, 125, job="11", uid=1001)]
    other = [gpu(0, 100, 0, 130, job="12", uid=1002), gpu(1, 0, 0, 125, job="12", uid=1002)]
    a = judge(hung)
    b = judge(other, a.state, now=2000.0)
    assert not [r for r in b.results if r.status is Status.FAIL]
    a = judge(hung, drain_culprit_jobs=2)
    jobs.confirm_culprit(a.state, "11", 1001)  # the Slurm side's word (gpuhc/slurm/jobs/act.py)
    b = judge(other, a.state, now=2000.0, drain_culprit_jobs=2)
    assert not [r for r in b.results if r.status is Status.FAIL]  # job 12 not confirmed yet
    jobs.confirm_culprit(b.state, "12", 1002)
    b = judge(other, b.state, now=2100.0, drain_culprit_jobs=2)
    (fail,) = [r for r in b.results if r.status is Status.FAIL]
    assert fail.action is Action.DRAIN_REBOOT and "gpu1" in fail.message and "11, 12" in fail.message
    old = judge(other, a.state, now=1000.0 + 8 * 86400, drain_culprit_jobs=2)
    assert not [r for r in old.results if r.status is Status.FAIL]
    gone = judge([gpu(0, 99, 30, 690, job="13"), gpu(1, 99, 30, 690, job="13")], b.state, now=2300.0, drain_culprit_jobs=2)
    assert not [r for r in gone.results if r.status is Status.FAIL]  # no hang going on: an admin's resume sticks


def test_no_reading_and_no_nvml():
    assert judge([]).results[0].message == "no GPU held by a running job"
    out = jobs.judge(Snapshot("n", 1.0, activity=Activity(available=False, error="driver not loaded")),
                     Context(thresholds=dict(jj.DEFAULTS)))
    assert out.results[0].status is Status.NA and "driver not loaded" in out.results[0].message
    assert jobs.judge(Snapshot("n", 1.0), Context(thresholds={})).results[0].status is Status.NA


def test_damaged_state_is_survived():
    out = judge([gpu(0, 100, 0, 130), gpu(1, 0, 0, 120)], prev={"jobs": {"7": {"signature": "hang", "since": "x"}},
                                                                 "culprits": {"9": "junk"}})
    assert out.results[0].status is Status.WARN


@pytest.mark.parametrize("key,value,words", [
    ("window_s", -1, "window_s"), ("window_s", 0.1, "between 0.5 and 600"), ("straggler_wait_share", 1.0, "between 0 and 1"), ("straggler_skip_names", "pp*", "glob patterns"),
    ("environ_fallback", "yes", "true or false"), ("gpm_window_s", 5, "at most 1 second"), ("hang_min_s", float("nan"), "hang_min_s"),
])
def test_thresholds_validated(key, value, words):
    assert any(words in p for p in jj.validate({**jj.DEFAULTS, key: value}))
    assert jj.validate(dict(jj.DEFAULTS)) == []


def test_a_typo_in_the_config_is_refused_with_file_and_line(tmp_path):
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  jobs:\n    thresholds:\n      hang_min_s: -5\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    assert "hang_min_s" in str(e.value) and ":4" in str(e.value)


def test_culprit_with_a_hardware_sign_drains_only_when_asked():
    from gpuhc.model.nvml import GpuReading, NvmlReading

    nvml = NvmlReading(available=True, gpus=[
        GpuReading(index=0, name="H100", uuid="GPU-0", pci_bus_id="0000:18:00.0"),
        GpuReading(index=1, name="H100", uuid="GPU-1", pci_bus_id="0000:2a:00.0", clock_event_samples=[0x1, 0x40],
                   remap_pending=True)])
    snap = Snapshot("n", 1000.0, nvml=nvml, activity=Activity(available=True, gpus=[gpu(0, 100, 0, 130), gpu(1, 0, 0, 125)]))
    off = jobs.judge(snap, Context(thresholds=dict(jj.DEFAULTS)))
    assert [r.status for r in off.results] == [Status.WARN]
    on = jobs.judge(snap, Context(thresholds={**jj.DEFAULTS, "drain_culprit_with_hardware": True}))
    (fail,) = [r for r in on.results if r.status is Status.FAIL]
    assert fail.subject == "gpu1" and fail.action is Action.DRAIN_REBOOT
    assert "row remapping pending" in fail.message and "HW thermal slowdown" in fail.message
    nvml.gpus[1] = GpuReading(index=1, name="H100", uuid="GPU-1", pci_bus_id="0000:2a:00.0", clock_event_samples=[0x4])
    assert not [r for r in jobs.judge(snap, Context(thresholds={**jj.DEFAULTS, "drain_culprit_with_hardware": True})).results
                if r.status is Status.FAIL]


# Issue 32: the benign set and the fault set (tests/fixtures/jobs/sets.yaml), side by side.
def _sets() -> list:
    import yaml

    doc = yaml.safe_load((FIXTURES / "jobs" / "sets.yaml").read_text())
    return [pytest.param(kind, e, id=f"{kind}:{e['what'][:40]}") for kind in ("benign", "fault") for e in doc[kind]]


def _slice(entry: dict) -> list[dict]:
    lines = [json.loads(line) for line in (FIXTURES / "jobs" / entry["file"]).read_text().splitlines()]
    runs = entry["run"] if isinstance(entry["run"], list) else [entry["run"]]
    return [t for t in lines if t["run"] in runs and entry.get("from", 0) <= t["time"] <= entry.get("to", 1e12)]


@pytest.mark.parametrize("kind,entry", _sets())
def test_benign_set_never_called_fault_set_called_with_its_culprit(kind, entry):
    ticks = _slice(entry)
    # a benign slice is judged over time; a fault may be one fresh health check in its phase (as on the device)
    assert len(ticks) >= (2 if kind == "benign" else 1), f"{entry['what']}: too few ticks in its slice"
    prev: dict = {}
    called = []
    for t in ticks:
        out = jobs.judge(Snapshot("gpu01", t["time"], activity=activity_from_dict(t["activity"])),
                         Context(thresholds=dict(jj.DEFAULTS), prev=prev))
        prev = out.state or {}
        assert not [r for r in out.results if r.status is Status.FAIL]
        called += [r for r in warnings(out.results) if entry.get("job") in (None, r.value["job"])]
    if kind == "benign":
        assert [r.message for r in called] == []
    else:
        assert called, f"{entry['what']}: never called"
        assert {(r.value["signature"], tuple(r.value["culprits"])) for r in called} == {(entry["signature"], tuple(entry["culprits"]))}


def test_made_up_job_ids_from_the_environment_never_drain():
    """Issue 29: one user, three processes whose SLURM_JOB_ID names three made-up jobs, each
    "hung" on gpu1: no drain, however many (only a slurmstepd cgroup names a job that counts)."""
    state = None
    for n, job in enumerate(("901", "902", "903", "904")):
        gpus = [gpu(0, 100, 0, 130, job=job), gpu(1, 0, 0, 125, job=job)]
        for g in gpus:
            g.via = "environ"
        out = judge(gpus, state, now=1000.0 + 300 * n, drain_culprit_jobs=3, environ_fallback=True)
        state = out.state
        assert not [r for r in out.results if r.status is Status.FAIL], out.results
    assert state["culprits"] == {}


def test_the_environment_fallback_is_off_by_default():
    assert jj.DEFAULTS["environ_fallback"] is False


def hangs(seq: list[tuple[str, int, int]], needed: int, owners: dict | None = None,
          slurm_says: dict | None = None) -> tuple[list, dict]:
    """Each (job, uid, culprit GPU) hangs in turn, 300 s apart, judged with the state carried
    and each job confirmed after its run by the Slurm side for ``slurm_says`` (job -> uid; by
    default the job's uid) as gpuhc/slurm/jobs/act.py does; then one more run of the last job.
    That run's FAIL results and state."""
    state, out = None, None
    for n, (job, uid, culprit) in enumerate([*seq, seq[-1]]):
        gpus = [gpu(i, 0 if i == culprit else 100, 0, 125 if i == culprit else 130, job=job, uid=uid) for i in (0, 1, 2)]
        for g in gpus:
            g.owners = (owners or {}).get(job, g.owners)
        out = judge(gpus, state, now=1000.0 + 300 * n, drain_culprit_jobs=needed)
        state = out.state
        jobs.confirm_culprit(state, job, (slurm_says or {}).get(job, uid))
    return [r for r in out.results if r.status is Status.FAIL], state


def test_one_users_jobs_count_once_towards_the_repeat_culprit_drain():
    """Issue 29: one user's three jobs hung on gpu1 are one user's word, not three: no drain
    with drain_culprit_jobs: 2; a second user's job on the same GPU makes two."""
    fails, state = hangs([("21", 1001, 1), ("22", 1001, 1), ("23", 1001, 1)], needed=2)
    assert fails == [] and {c["user"] for c in state["culprits"].values()} == {1001}
    fails, _ = hangs([("21", 1001, 1), ("22", 1001, 1), ("24", 1002, 1)], needed=2)
    (fail,) = fails
    assert fail.value == 2 and "gpu1" in fail.message and "of 2 users" in fail.message and "21, 22, 24" in fail.message


def test_the_repeat_culprit_count_is_per_gpu():
    """Three users' jobs each stalled by a different GPU: no GPU stalls job after job."""
    fails, _ = hangs([("31", 1001, 0), ("32", 1002, 1), ("33", 1003, 2)], needed=2)
    assert fails == []
    fails, _ = hangs([("31", 1001, 0), ("32", 1002, 1), ("33", 1003, 1)], needed=2)
    assert [f.message.split(" (")[1].split(";")[0] for f in fails] == ["gpu1"]


def test_a_job_of_several_users_or_of_no_known_owner_never_counts():
    """Processes of two users in one job (or none read) say nothing about a user: not counted;
    root's processes in a job are slurmstepd's and leave the job its user's."""
    seq = [("41", 1001, 1), ("42", 1002, 1), ("43", 1003, 1)]
    fails, state = hangs(seq, needed=2, owners={"41": {"41": [1001, 1002]}, "42": {}})
    assert fails == [] and list(state["culprits"]) == ["43"]
    fails, state = hangs(seq, needed=2, owners={"41": {"41": [0, 1001]}})
    assert len(fails) == 1 and state["culprits"]["41"]["user"] == 1001


def test_a_job_slurm_did_not_confirm_for_its_owner_never_counts():
    """The processes' owner is 1002 but Slurm runs job 52 for 1003 (or not here at all): the
    Slurm side confirms nothing, and one user's confirmed job is not two users."""
    seq = [("51", 1001, 1), ("52", 1002, 1)]
    fails, state = hangs(seq, needed=2, slurm_says={"52": 1003})
    assert fails == [] and "confirmed" not in state["culprits"]["52"]
    fails, state = hangs(seq, needed=1, slurm_says={"51": 1003, "52": 1003})
    assert fails == []  # nothing confirmed: not even a threshold of one is reached
