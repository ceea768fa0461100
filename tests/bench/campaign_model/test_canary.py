"""gpuhc's known-answer canary in the campaign (bench/campaign_model/canary.py, docs/campaign.md
"The silent-corruption canary in the campaign"): what it catches that the epilog's burn-in cannot
where a site turned the burn-in's correctness pass off (bf16 and tf32 only: policies.NO_PASS,
these tests' default), on idle nodes and on nodes that never idle, that the shipped pass catches
such a fault without the canary, what an unconfirmed mismatch does to its cadence,
that a real job preempts it, and the metric of GPU-hours run on a corrupting GPU. Each test
places its fault by hand and holds one rule; each can fail."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import faults as F  # noqa: E402
from campaign_model.canary import SUBMIT_S  # noqa: E402
from campaign_model.metrics import compute  # noqa: E402
from campaign_model.policies import NO_PASS, config_for  # noqa: E402
from campaign_model.sim import T0, Campaign  # noqa: E402

H = 3600.0
PERIOD_H = 24.0  # canary.period_h's default (gpuhc/canary/settings.py)
RUN_H = 300.0 / H  # canary.max_seconds's default: a canary job's length in the model


def campaign(tmp_path, inject, nodes=1, days=1.0, jobs=None, canary=True, policy="shipped", burnin_pass=False, **kw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    return Campaign(config_for(policy, tmp_path, None if burnin_pass else NO_PASS), tmp_path, nodes=nodes, days=days, seed=3, inject=inject,
                    load=0.0, jobs=jobs, noise=False, canary=canary, **kw).run()


def corrupting(monkeypatch, *precisions, trigger=1.0):
    real = F.strength
    monkeypatch.setattr(F, "strength", lambda cls, rng: {"precisions": precisions, "trigger": trigger}
                        if cls.active == "sdc" else real(cls, rng))


def never_idle(hours: float, job_h: float = 10.0):
    """One pinned job after another on gpu001, each arriving as the last one ends."""
    return [(k * job_h * H, 1, job_h * H, ("gpu001",)) for k in range(int(hours // job_h) + 1)]


def sdc(c):
    return compute(c)["silent_corruption"]


def test_without_the_canary_corruption_in_fp64_alone_is_never_caught_and_its_gpu_hours_grow(tmp_path, monkeypatch):
    # A burn-in without its correctness pass computes bf16 and tf32 only: a GPU that corrupts
    # fp64 passes every one, and every job on it computes with it for as long as the campaign lasts.
    corrupting(monkeypatch, "fp64")
    hours = []
    for days in (1.0, 3.0):
        c = campaign(tmp_path / str(days), [(600, "sdc", "gpu001", False)], days=days, jobs=never_idle(days * 24),
                     canary=False)
        m = sdc(c)
        assert m["caught_by"] == {"never": 1} and not [e for e in c.slurm.events if e[2] == "drain"]
        hours.append(m["job_gpu_hours_before_caught"])
    assert hours[0] > 0.9 * 8 * 23 and hours[1] > 2.5 * hours[0]  # 8 GPUs busy all the time


@pytest.mark.parametrize("precision", ["fp16", "fp32", "fp64"])
def test_the_shipped_burn_in_catches_corruption_in_a_precision_it_does_not_time(tmp_path, monkeypatch, precision):
    # The shipped burn-in's correctness pass computes fp16, fp32 and fp64 after every job: the
    # same never-idle node, no canary, is drained by the first epilog after the fault arises.
    corrupting(monkeypatch, precision)
    c = campaign(tmp_path, [(600, "sdc", "gpu001", False)], days=1.0, jobs=never_idle(24), canary=False,
                 burnin_pass=True)
    m = sdc(c)
    drains = [r for _, _, w, r in c.slurm.events if w == "drain"]
    assert m["caught_by"] == {"burn-in": 1} and len(drains) == 1, (m, drains)
    assert drains[0].startswith("gpuhc: burn-in gpu5") and precision in drains[0]
    assert 9.8 < m["hours_to_catch"]["max"] < 10.0  # the first job's end (10 h) less the fault's 600 s


def test_with_the_canary_an_idle_node_is_caught_within_the_cadence(tmp_path, monkeypatch):
    # The first canary job runs at the first submit step; the fault arises after it, so the
    # next one, a cadence later, meets it; the admin side drains the node RETIRED at its next step.
    corrupting(monkeypatch, "fp64")
    c = campaign(tmp_path, [(2 * H, "sdc", "gpu001", False)], days=1.5)
    m = sdc(c)
    assert m["caught_by"] == {"canary": 1}
    drains = [r for _, _, w, r in c.slurm.events if w == "drain"]
    assert len(drains) == 1 and drains[0].startswith("gpuhc: RETIRED canary gpu5 ") and "fp64" in drains[0]
    assert PERIOD_H - 2 < m["hours_to_catch"]["max"] <= PERIOD_H + RUN_H + 2 * SUBMIT_S / H
    assert m["canary"]["runs"] == 2 and m["canary"]["preempted"] == 0


def test_with_the_canary_a_node_that_never_idles_is_caught_by_the_epilog_slice(tmp_path, monkeypatch):
    # No submit step ever finds the node idle: the slice after a job's epilog, once the node's
    # last canary is a cadence old, meets the fault.
    corrupting(monkeypatch, "fp64")
    c = campaign(tmp_path, [(12 * H, "sdc", "gpu001", False)], days=2.5, jobs=never_idle(60))
    m = sdc(c)
    assert m["caught_by"] == {"canary": 1} and m["canary"]["runs"] == 0 and m["canary"]["epilog_slices"] >= 2
    slices = [(t - T0) / H for t, _, kind, _ in c.canary_stats.log]
    assert slices[:2] == [10.0, 40.0]  # the first job's end (never ran), then the first job end a cadence on
    assert m["hours_to_catch"]["max"] <= PERIOD_H + 10 + SUBMIT_S / H


def test_the_slice_all_what_if_meets_fp16_on_a_node_that_never_idles(tmp_path, monkeypatch):
    corrupting(monkeypatch, "fp16")
    c = campaign(tmp_path, [(12 * H, "sdc", "gpu001", False)], days=2.5, jobs=never_idle(60), policy="slice-all")
    assert sdc(c)["caught_by"] == {"canary": 1} and c.canary_stats.runs == 0


def test_the_epilog_slice_computes_no_fp16_so_a_node_that_never_idles_keeps_such_a_fault(tmp_path, monkeypatch):
    # canary.epilog.cases are bf16, fp32 and fp64 products; the burn-in's, without its pass, bf16
    # and tf32: a GPU that corrupts fp16 alone is met only by a canary job, which a node that never idles gets none of.
    corrupting(monkeypatch, "fp16")
    c = campaign(tmp_path, [(12 * H, "sdc", "gpu001", False)], days=2.5, jobs=never_idle(60))
    assert sdc(c)["caught_by"] == {"never": 1} and c.canary_stats.slices >= 2
    idle = campaign(tmp_path / "idle", [(2 * H, "sdc", "gpu001", False)], days=1.5)
    assert sdc(idle)["caught_by"] == {"canary": 1}  # the canary job's own cases include fp16


def test_an_unconfirmed_mismatch_makes_the_gpu_suspect_and_its_canary_comes_every_two_hours(tmp_path, monkeypatch):
    # The first run shows the fault, the immediate retest does not: a warning, and gpuhc's
    # schedule gives the GPU suspect_period_h (2 h) instead of period_h (24 h); the healthy
    # node beside it keeps the day.
    corrupting(monkeypatch, "fp64", trigger=0.5)  # fp64: the canary job's epilog burn-in cannot meet it
    dice = iter([True, False])
    monkeypatch.setattr(Campaign, "canary_shows", lambda self, trigger: next(dice, False))
    c = campaign(tmp_path, [(100, "sdc", "gpu001", False)], nodes=2, days=1.0)
    runs = {n: [(t - T0) / H for t, node, kind, _ in c.canary_stats.log if node == n] for n in ("gpu001", "gpu002")}
    assert [v for *_, v in c.canary_stats.log if _[1] == "gpu001"][0] == "warn"
    assert c.canary_fleet["gpus"]["gpu001/gpu5"]["status"] == "suspect"
    assert len(runs["gpu002"]) == 1 and len(runs["gpu001"]) >= 10
    gaps = [b - a for a, b in zip(runs["gpu001"], runs["gpu001"][1:])]
    assert all(2.0 <= g <= 2.0 + RUN_H + SUBMIT_S / H + 1e-6 for g in gaps)
    assert not [e for e in c.slurm.events if e[2] == "drain"]


def test_a_confirmed_mismatch_counts_once_the_retest_shows_it_too(tmp_path, monkeypatch):
    corrupting(monkeypatch, "fp64", trigger=0.5)
    dice = iter([True, True])
    monkeypatch.setattr(Campaign, "canary_shows", lambda self, trigger: next(dice, False))
    c = campaign(tmp_path, [(30, "sdc", "gpu001", False)], days=0.2)
    assert c.canary_stats.log[0][3] == "fail" and sdc(c)["caught_by"] == {"canary": 1}


def test_a_real_job_preempts_a_canary_at_once_and_the_canary_leaves_no_result(tmp_path):
    # The first canary job starts at the first submit step (60 s) and lasts 300 s: a job
    # arriving at 120 s starts then, and the canary is cancelled without a result.
    c = campaign(tmp_path, [], days=0.1, jobs=[(120, 1, 3 * H, ("gpu001",))])
    assert c.jobs[1].start == T0 + 120
    assert c.canary_stats.preempted == 1 and c.canary_stats.runs == 0 and "gpu001" not in c.canary_last
    assert 0 < c.canary_stats.gpu_s <= 60 * 8 + 1e-6


@pytest.mark.parametrize("canary", [False, True])
def test_corruption_the_burn_in_computes_is_counted_as_the_burn_ins_catch(tmp_path, monkeypatch, canary):
    # A busy node's job ends before any canary reaches it: its epilog's burn-in drains it.
    corrupting(monkeypatch, "bf16")
    c = campaign(tmp_path, [(30, "sdc", "gpu001", False)], days=0.5, jobs=[(0, 1, 2 * H, ("gpu001",))],
                 canary=canary)
    m = sdc(c)
    assert m["caught_by"] == {"burn-in": 1} and 1.9 < m["hours_to_catch"]["max"] < 2.0
    assert 15.0 < m["job_gpu_hours_before_caught"] < 16.0  # 8 GPUs for the job's 2 h less the 30 s


def test_the_canary_needs_the_campaigns_own_clock(tmp_path):
    with pytest.raises(ValueError, match="time_scale 1"):
        Campaign(config_for("shipped", tmp_path), tmp_path, nodes=1, days=0.1, canary=True, time_scale=1 / 60)


def test_the_cli_sweeps_one_class_at_a_rate_scale_with_and_without_the_canary(tmp_path, capsys):
    # `--classes sdc --rate-scale` reach every seed of a sweep (the sweep dropped --rate-scale
    # before), and each seed's record carries the silent corruption's numbers and the canary's cost.
    import json

    import campaign

    docs = {}
    for flag in ([], ["--canary"]):
        out = tmp_path / f"sdc{len(flag)}.json"
        argv = ["--seeds", "1-2", "--nodes", "8", "--days", "1", "--classes", "sdc", "--rate-scale", "10000",
                "--no-noise", "--json", str(out)] + flag
        assert campaign.main(argv) == 0
        docs[bool(flag)] = json.loads(out.read_text())
    for doc in docs.values():
        assert doc["classes"] == ["sdc"] and doc["rate_scale"] == 10000 and doc["noise"] is False
        assert all(set(s["faults"]) == {"sdc"} and s["sdc_faults"] == s["faults"]["sdc"] > 0 for s in doc["seeds"])
        assert sum(s["sdc_job_gpu_hours_before_caught"] for s in doc["seeds"]) > 0
    assert [s["sdc_faults"] for s in docs[False]["seeds"]] == [s["sdc_faults"] for s in docs[True]["seeds"]]
    assert all(s["canary_runs"] == 0 and s["canary_gpu_hours"] == 0 for s in docs[False]["seeds"])
    assert all(s["canary_runs"] + s["canary_epilog_slices"] > 0 and s["canary_gpu_hours"] > 0 for s in docs[True]["seeds"])
    with pytest.raises(SystemExit) as e:
        campaign.main(["--classes", "sdc,nosuch"])
    assert e.value.code == 2 and "--classes nosuch: not a fault class" in capsys.readouterr().err
