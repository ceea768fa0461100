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


def test_off_ladder_sizes_are_judged_at_the_nearest_measured_size_and_said_so():
    """`factor: 4` from 8 B measures 512 B and 2 KiB but not 1 KiB, 8 and 32 MiB but not
    16 MiB: the small and medium classes used to be skipped without a word."""
    from gpuhc.text.schema import defaults
    from gpuhc.sweep.campaign import judge_round, new_record, summary_lines
    from gpuhc.sweep.judge import on_ladder
    from gpuhc.sweep.plan import Group
    from gpuhc.sweep.settings import SCHEMA
    from gpuhc.sweep.stats import size_ladder

    ladder = size_ladder(8, 2 << 30, 4)
    assert 1024 not in ladder and (16 << 20) not in ladder
    th = on_ladder(NCCL, ladder)
    assert (th["small_bytes"], th["small_bytes_requested"]) == (512, 1024)  # a tie goes to the smaller size
    assert (th["medium_bytes"], th["medium_bytes_requested"]) == (8 << 20, 16 << 20)
    assert on_ladder(NCCL, size_ladder(8, 2 << 30)) == NCCL  # on the default ladder nothing moves

    section = defaults(SCHEMA)
    section["sizes"]["factor"] = 4
    groups = [Group(f"r0g{i}", [f"a{i}", f"b{i}"], 0, "probe", "", 8) for i in range(4)]
    rec = new_record("s", groups, section, now=0.0)

    def res(p95):
        rows = [{"bytes": 512, "time_us": p95, "p95_us": p95, "busbw_gbs": 0.01, "correct": True},
                {"bytes": 8 << 20, "time_us": 90.0, "busbw_gbs": 200.0, "correct": True},
                {"bytes": 2 << 30, "time_us": 9000.0, "busbw_gbs": 445.0, "correct": True}]
        # H100 names select the h100-sxm profile, whose absolute p95 bound is 250 us.
        return {"sizes": rows, "timeouts": [], "errors": [], "ranks": [{"rank": 0, "gpu": "NVIDIA H100 80GB HBM3"}]}

    verdicts = judge_round(rec, {"r0g0": res(900.0), "r0g1": res(100.0), "r0g2": res(100.0), "r0g3": res(100.0)},
                           section, {})
    assert verdicts["r0g0"].status == FAIL and "p95 900.0 us > 250 at 512 B" in verdicts["r0g0"].reasons
    assert verdicts["r0g1"].status == PASS and verdicts["r0g1"].metrics["small_p95_us"] == 100.0
    assert verdicts["r0g1"].metrics["medium_busbw_gbs"] == 200.0
    notes = summary_lines(rec)
    assert "small class judged at 512 B, the nearest measured size: small_bytes 1 KiB is not on the size ladder" in notes
    assert any(n.startswith("medium class judged at 8 MiB") for n in notes)


def test_submit_says_up_front_which_class_moves(tmp_path):
    from gpuhc.text.schema import defaults
    from gpuhc.sweep.plan import Group
    from gpuhc.sweep.settings import SCHEMA
    from gpuhc.sweep.submit import planned_size_notes

    section = defaults(SCHEMA)
    g = [Group("r0g0", ["a", "b"], 0, "probe", "", 8)]
    assert planned_size_notes(section, g) == []
    section["sizes"]["factor"] = 4
    assert [n.split(",")[0] for n in planned_size_notes(section, g)] == ["medium class judged at 8 MiB",
                                                                        "small class judged at 512 B"]
