"""Judging one group's sweep: absolute thresholds per size class, the fleet, hangs, wrong sums."""

from __future__ import annotations

import pytest

from gpuhc.errors import ConfigError
from gpuhc.sweep.judge import ERROR, FAIL, PASS, Fleet, fleet_key, judge_group, metrics_of
from gpuhc.sweep.settings import DEFAULT_THRESHOLDS, thresholds_for, validate_thresholds

NCCL = thresholds_for({}, "nccl", "2x8")
MPI = thresholds_for({}, "mpi", "2x1")


def result(large_busbw=445.0, small_p95=120.0, medium_busbw=200.0, large=2 << 30, correct=True, timeouts=()):
    rows = [
        {"bytes": 1024, "time_us": small_p95 * 0.8, "p95_us": small_p95, "busbw_gbs": 0.01, "correct": True},
        {"bytes": 16 << 20, "time_us": 100.0, "busbw_gbs": medium_busbw, "correct": True},
        {"bytes": large, "time_us": 9000.0, "busbw_gbs": large_busbw, "correct": correct},
    ]
    return {"sizes": rows, "timeouts": list(timeouts), "errors": []}


def test_healthy_multinode_h100_group_passes():
    v = judge_group(result(), NCCL)
    assert v.status == PASS and v.reasons == []
    assert v.metrics["large_busbw_gbs"] == 445.0 and v.metrics["small_p95_us"] == 120.0


def test_large_busbw_below_350_fails_with_evidence():
    v = judge_group(result(large_busbw=300.0), NCCL)
    assert v.status == FAIL
    assert v.reasons == ["busbw 300.0 GB/s < 350 at 2 GiB"]


def test_small_p95_above_250us_fails():
    v = judge_group(result(small_p95=400.0), NCCL)
    assert v.status == FAIL and "p95 400.0 us > 250 at 1 KiB" in v.reasons[0]


def test_absolute_large_floor_needs_a_large_enough_sweep():
    """A sweep that stopped at 1 MiB says nothing against a 2 GiB busbw floor."""
    v = judge_group(result(large_busbw=5.0, large=1 << 20), NCCL)
    assert v.status == PASS


def test_wrong_sum_and_hang_fail_outright():
    v = judge_group(result(correct=False), NCCL)
    assert v.status == FAIL and v.reasons[0] == "wrong sum at 2 GiB"
    hung = result(timeouts=[{"bytes": 65536, "silent_nodes": ["n3"]}])
    v = judge_group(hung, NCCL)
    assert v.status == FAIL and "hung at 64 KiB (silent: n3)" in v.reasons
    assert v.silent_nodes == ["n3"]


def test_no_results_is_error_not_failure():
    assert judge_group(None, NCCL).status == ERROR
    assert judge_group({"sizes": [], "timeouts": [], "errors": ["no GPU"]}, NCCL).status == ERROR


def test_fleet_catches_a_group_that_meets_absolute_numbers():
    fleet = Fleet([{"large_busbw_gbs": 445.0 + i, "small_p95_us": 120.0, "medium_busbw_gbs": 200.0} for i in range(5)])
    ok = judge_group(result(large_busbw=440.0), NCCL, fleet)
    assert ok.status == PASS
    slow = judge_group(result(large_busbw=351.0, medium_busbw=120.0), NCCL, fleet)
    assert slow.status == FAIL
    assert any("0.7x fleet" in r and "16 MiB" in r for r in slow.reasons)


def test_fleet_needs_enough_groups():
    fleet = Fleet([{"large_busbw_gbs": 445.0}])  # nccl default wants 3 others
    assert judge_group(result(large_busbw=351.0), NCCL, fleet).status == PASS


def test_fleet_median_leaves_the_group_itself_out():
    """Two groups, one slow: with the group left out, each is judged against the other."""
    good = result(large_busbw=3.0, small_p95=50.0)
    slow = result(large_busbw=0.05, small_p95=20000.0)
    fleet = Fleet([metrics_of(good, MPI), metrics_of(slow, MPI)])
    assert judge_group(good, MPI, fleet, own_in_fleet=True).status == PASS
    v = judge_group(slow, MPI, fleet, own_in_fleet=True)
    assert v.status == FAIL and len(v.reasons) == 2  # p95 and large against the fleet (no 64 KiB row)


def test_mpi_backend_has_no_absolute_numbers():
    assert judge_group(result(large_busbw=0.001, small_p95=1e6), MPI).status == PASS


def test_thresholds_merge_most_specific_last():
    table = {"nccl": {"default": {"large_busbw_gbs": 300.0}, "2x8": {"small_p95_us": 200.0},
                      "2x8-cross": {"large_busbw_gbs": 250.0}}}
    th = thresholds_for(table, "nccl", "2x8", "cross")
    assert th["large_busbw_gbs"] == 250.0 and th["small_p95_us"] == 200.0
    assert thresholds_for(table, "nccl", "4x8")["large_busbw_gbs"] == 300.0
    assert thresholds_for(table, "nccl", "2x8", "leaf")["large_busbw_gbs"] == 300.0


@pytest.mark.parametrize("table, key", [
    ({"rccl": {}}, "sweep.thresholds.rccl"),
    ({"nccl": {"2by8": {}}}, "sweep.thresholds.nccl.2by8"),
    ({"nccl": {"2x8": {"busbw": 3}}}, "sweep.thresholds.nccl.2x8.busbw"),
    ({"nccl": {"2x8": {"large_busbw_gbs": "fast"}}}, "sweep.thresholds.nccl.2x8.large_busbw_gbs"),
])
def test_bad_thresholds_name_the_key(table, key):
    with pytest.raises(ConfigError) as e:
        validate_thresholds(table, "/etc/gpuhc/gpuhc.yaml", {("sweep", "thresholds"): 7})
    assert key in str(e.value) and "/etc/gpuhc/gpuhc.yaml:7" in str(e.value)


def test_default_thresholds_are_valid_and_fleet_keys_separate_kinds():
    validate_thresholds(DEFAULT_THRESHOLDS)
    assert fleet_key("nccl", "2x8", "leaf", 2 << 30) != fleet_key("nccl", "2x8", "cross", 2 << 30)
    assert fleet_key("nccl", "2x8", "", 1 << 20) != fleet_key("nccl", "2x8", "", 2 << 30)
