"""The jobs check's issue-32 rules: a pause is not a hang, a one-node job's culprit is here, a
software straggler by the share of each step its peers wait, and when `since` carries over.

GPU samples are the real 4x H100 recording (tests/fixtures/jobs/h100x4-device.jsonl); the host
side of a rank is the real /proc pairs of tests/fixtures/jobs/proc (a writer read 0.5 s apart:
0.13 CPU s and 486 MB written; a sleeper: nothing)."""

from __future__ import annotations

import copy
import json

import pytest

from gpuhc.checks import jobs, jobs_judge as jj
from gpuhc.checks.base import Context
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources.activity_io import activity_from_dict
from gpuhc.sources.job_procs import parse_io, parse_stat
from tests.helpers.paths import FIXTURES

TICKS = [json.loads(line) for line in (FIXTURES / "jobs" / "h100x4-device.jsonl").read_text().splitlines()]
HUNG = next(t for t in TICKS if t["run"] == "hang" and t["time"] > 1795697810)  # gpu0-2 spin, gpu3 idle
STRAGGLER = [t for t in TICKS if t["run"] == "straggler"]


def host(which: str, before: str | None = None, dt: float = 0.5) -> dict:
    """A rank's host fields as the reader makes them from two real /proc samples ``dt`` apart."""
    read = lambda n: (parse_stat((FIXTURES / "jobs" / "proc" / f"{n}.stat").read_text()),
                      parse_io((FIXTURES / "jobs" / "proc" / f"{n}.io").read_text()))
    (state, ticks), (rchar, wchar) = read(which)
    out = {"pids": [4711], "host_state": state, "host_cpu_total_s": ticks / 100}
    if before is not None:
        (_, t0), (r0, w0) = read(before)
        out.update(host_dt_s=dt, host_cpu_s=(ticks - t0) / 100, host_read_bytes=float(rchar - r0),
                   host_write_bytes=float(wchar - w0))
    return out


def activity(tick: dict, job: str = "4242", nodes: int | None = None, **per_gpu) -> dict:
    act = copy.deepcopy(tick["activity"])
    for g in act["gpus"]:
        g["jobs"] = [job]
        g.update(per_gpu.get(f"gpu{g['index']}", {}))
    if nodes is not None:
        act["job_nodes"] = {job: nodes}
    return act


def judge(act: dict, now: float = 2000.0, prev: dict | None = None, **t):
    return jobs.judge(Snapshot("n1", now, activity=activity_from_dict(act)),
                      Context(thresholds={**jj.DEFAULTS, **t}, prev=prev or {}))


def only(out):
    (r,) = [r for r in out.results if r.subject.startswith("job")]
    return r


# ----------------------------------------------------------------------- a pause is not a hang
def test_an_idle_rank_writing_a_checkpoint_is_a_pause_not_a_hang():
    r = only(judge(activity(HUNG, gpu3=host("writer-2", "writer-1"))))
    assert r.status is Status.PASS and r.value["signature"] == "pause" and r.value["culprits"] == ["gpu3"]
    assert "a pause, not a hang" in r.message and "gpu3's rank busy on the host (writing 973.1 MB/s" in r.message
    ranked = only(judge(activity(HUNG, gpu3={**host("writer-2", "writer-1"), "rank": 3})))
    assert "rank 3 (gpu3) busy on the host (writing 973.1 MB/s, 0.3 CPU cores)" in ranked.message


def test_an_idle_rank_making_no_progress_is_the_culprit():
    r = only(judge(activity(HUNG, gpu3=host("sleeper", "sleeper"))))
    assert r.status is Status.WARN and r.value["culprits"] == ["gpu3"] and r.action is Action.RESTART_APP


def test_in_io_wait_is_busy_even_unmeasured_and_unmeasured_otherwise_is_judged_by_the_gpus_alone():
    d = host("sleeper")
    d["host_state"] = "D"
    assert only(judge(activity(HUNG, gpu3=d))).value["signature"] == "pause"
    assert only(judge(activity(HUNG, gpu3=host("spinner")))).status is Status.WARN  # one sample: no rate


def test_a_pause_that_goes_on_past_pause_max_s_is_called_a_hang():
    busy = activity(HUNG, gpu3=host("writer-2", "writer-1"))
    first = judge(busy, now=2000.0)
    later = only(judge(busy, now=2010.0, prev=first.state, pause_max_s=20))
    assert later.status is Status.WARN and later.value["signature"] == "hang" and later.value["culprits"] == ["gpu3"]
    assert "a pause of 24 s while its peers wait" in later.message


# --------------------------------------------------------------- culprit of a one-node job: here
ALL_SPIN = {"gpu3": {k: HUNG["activity"]["gpus"][0][k] for k in ("gpu_util", "mem_util", "power_w")}}


def test_every_rank_of_a_one_node_job_spinning_is_said_plainly_never_another_node():
    r = only(judge(activity(HUNG, nodes=1, **ALL_SPIN)))
    assert r.status is Status.WARN and r.value["culprits"] == []
    assert "every rank waits: a collective mismatch or a stuck kernel" in r.message and "another node" not in r.message


def test_a_one_node_job_whose_gpu_runs_a_kernel_that_does_not_end_names_it():
    sm = {f"gpu{i}": {**ALL_SPIN.get(f"gpu{i}", {}), "sm_activity": v} for i, v in enumerate((14.0, 15.0, 99.0, 14.0))}
    r = only(judge(activity(HUNG, nodes=1, **sm)))
    assert r.status is Status.WARN and r.value["culprits"] == ["gpu2"]
    assert "gpu2 SM activity 99 % vs its peers' 14 %" in r.message
    close = {k: {**v, "sm_activity": 20.0} if k == "gpu2" else v for k, v in sm.items()}
    assert only(judge(activity(HUNG, nodes=1, **close))).value["culprits"] == []
    one_block = {k: {**v, "sm_activity": 0.8} if k == "gpu2" else {**v, "sm_activity": 21.0} for k, v in sm.items()}
    r = only(judge(activity(HUNG, nodes=1, **one_block)))  # torch.cuda._sleep: one block spinning
    assert r.value["culprits"] == ["gpu2"] and "SM activity 1 % vs its peers' 21 %" in r.message


def test_a_stuck_kernel_of_one_block_is_named_by_its_sm_occupancy():
    # GPM on 2x H200 (driver 580.159.04, docs/verification.md "Job checks, round two"): rank 1 in
    # torch.cuda._sleep kernels (one block of one thread), rank 0 waiting in the all-reduce. SM
    # activity 0.7578 % and 0.7576 %, alike; SM occupancy 0.0118 % against 0.0355 %.
    waiting, stuck = {"sm_activity": 0.7576, "sm_occupancy": 0.0355}, {"sm_activity": 0.7578, "sm_occupancy": 0.0118}
    gpus = {f"gpu{i}": {**ALL_SPIN.get(f"gpu{i}", {}), **(stuck if i == 2 else waiting)} for i in range(4)}
    r = only(judge(activity(HUNG, nodes=1, **gpus)))
    assert r.status is Status.WARN and r.value["culprits"] == ["gpu2"]
    assert "gpu2 SM occupancy 0.0118 % vs its peers' 0.0355 % (the same SMs busy)" in r.message
    # Peers that do not agree (two collectives of two shapes: a mismatch) name nobody
    split = {**gpus, "gpu3": {**gpus["gpu3"], "sm_occupancy": 0.0118}}
    assert only(judge(activity(HUNG, nodes=1, **split))).value["culprits"] == []
    # Nor does a GPU within the ratio, or one whose occupancy was not measured
    near = {**gpus, "gpu2": {**gpus["gpu2"], "sm_occupancy": 0.02}}
    assert only(judge(activity(HUNG, nodes=1, **near))).value["culprits"] == []
    unmeasured = {**gpus, "gpu0": {**gpus["gpu0"], "sm_occupancy": None}}
    assert only(judge(activity(HUNG, nodes=1, **unmeasured))).value["culprits"] == []


def test_stuck_occupancy_ratio_must_be_above_one():
    assert any("stuck_occupancy_ratio" in p for p in jj.validate({**jj.DEFAULTS, "stuck_occupancy_ratio": 0.5}))
    assert not jj.validate(dict(jj.DEFAULTS))


def test_one_gpu_computing_alone_while_its_peers_wait_is_a_pause_then_a_hang():
    train = TICKS[1]["activity"]["gpus"][0]  # a real training GPU's samples
    alone = {**ALL_SPIN, "gpu2": {k: train[k] for k in ("gpu_util", "mem_util", "power_w")}}
    first = judge(activity(HUNG, **alone), now=2000.0)
    r = only(first)
    assert r.status is Status.PASS and r.value["signature"] == "pause" and "gpu2 computes alone" in r.message
    later = only(judge(activity(HUNG, **alone), now=2010.0, prev=first.state, pause_max_s=20))
    assert later.status is Status.WARN and later.value["culprits"] == ["gpu2"]


@pytest.mark.parametrize("nodes,words", [(2, "spins: on another node)"), (None, "its node count is not known")])
def test_a_job_with_other_nodes_or_unknown_still_points_elsewhere(nodes, words):
    r = only(judge(activity(HUNG, nodes=nodes, **ALL_SPIN)))
    assert r.status is Status.WARN and words in r.message


# -------------------------------------------------------------------------- software stragglers
def test_the_real_straggler_says_how_long_its_peers_wait():
    r = only(judge(activity(STRAGGLER[1]), now=STRAGGLER[1]["time"]))
    assert r.status is Status.WARN and r.value["culprits"] == ["gpu2"]
    assert "peers wait 58 % of each step for gpu2" in r.message


def test_one_rank_doing_1_5x_the_work_is_a_straggler_a_job_within_noise_is_not():
    base = TICKS[1]["activity"]["gpus"][0]  # a real training GPU: util 97-99 %, memory 44 %
    def gpus(mem):
        return {f"gpu{i}": {"mem_util": [m] * len(base["mem_util"])} for i, m in enumerate(mem)}
    slow = only(judge(activity(TICKS[1], **gpus((29.3, 29.3, 44.0, 29.3)))))
    assert slow.status is Status.WARN and "peers wait 33 % of each step for gpu2" in slow.message
    even = only(judge(activity(TICKS[1], **gpus((42.0, 44.0, 43.0, 44.0)))))
    assert even.value["signature"] == "running"


def test_a_job_named_in_straggler_skip_names_is_not_called_slowed():
    act = activity(STRAGGLER[1])
    act["job_names"] = {"4242": "gpt-pp4-stage"}
    r = only(judge(act, straggler_skip_names=["*-pp*"]))
    assert r.status is Status.PASS and r.value["signature"] == "running" and "straggler_skip_names" in r.message
    assert only(judge(act, straggler_skip_names=["other*"])).status is Status.WARN


# ------------------------------------------------------------------------------ since and breaks
def stalled(cpu_total: float) -> dict:
    return activity(HUNG, gpu3={"pids": [4711], "host_state": "S", "host_cpu_total_s": cpu_total})


def test_two_pauses_five_minutes_apart_are_two_not_one_long_hang():
    first = judge(stalled(100.0), now=2000.0)
    second = only(judge(stalled(400.0), now=2300.0, prev=first.state))  # the rank trained in between
    assert second.value["lasted_s"] < 20 and second.value["since"] > 2200


def test_a_rank_stuck_all_along_keeps_its_since():
    first = judge(stalled(100.0), now=2000.0)
    second = only(judge(stalled(100.3), now=2300.0, prev=first.state))
    assert second.value["since"] == only(first).value["since"] and second.value["lasted_s"] > 300


def test_runs_closer_than_the_window_carry_since_and_new_processes_do_not():
    first = judge(stalled(100.0), now=2000.0)
    assert only(judge(stalled(150.0), now=2012.0, prev=first.state)).value["since"] == only(first).value["since"]
    other = stalled(100.0)
    other["gpus"][3]["pids"] = [5000]
    assert only(judge(other, now=2300.0, prev=first.state)).value["since"] > 2200


def test_checkpoint_pauses_caught_by_health_checks_minutes_apart_never_add_up_to_pause_max_s():
    busy = activity(HUNG, gpu3=host("writer-2", "writer-1"))
    prev: dict = {}
    for now in (2000.0, 2300.0, 2600.0, 2900.0, 3200.0):  # every health check lands in a checkpoint
        out = judge(busy, now=now, prev=prev, pause_max_s=600)
        prev = out.state
        assert only(out).status is Status.PASS and only(out).value["lasted_s"] < 20
    watcher = judge(busy, now=3212.0, prev=prev, pause_max_s=600)  # overlapping runs do carry it
    assert only(watcher).value["lasted_s"] == 26.0
