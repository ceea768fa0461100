"""A GPU a little slower than its siblings (gpu-speed's ``straggler_warn_fraction``, 0.95) is
evidence that must stay: a FAIL of class ``gpu-straggler`` that the runner holds over epilogs
(``evidence.straggler``: three in a row, at most 7 days apart; gpuhc/run/hold.py) before it
drains. Below ``straggler_fraction`` (0.90) it drains at once, as before. Healthy siblings, at the
ends of the range measured on four H200s (docs/verification.md, "Active checks", run 7), pass."""

from __future__ import annotations

import pytest

from gpuhc.active import speed
from gpuhc.active.registry import CHECK
from gpuhc.active.thresholds import thresholds_for
from gpuhc.catalog.evidence import HOLDS, by_id, counts_toward_lemon
from gpuhc.model.result import Action, Status
from gpuhc.run.hold import hold
from tests.helpers.active_results import healthy_burnin

THR = thresholds_for("h200-sxm")["gpu-speed"]
DAY = 86400.0


def burn(bf16: list[float], tf32: list[float]) -> dict:
    data = healthy_burnin(len(bf16))
    for dt, rates in (("bf16", bf16), ("tf32", tf32)):
        for i, v in enumerate(rates):
            data["dtypes"][dt]["gpus"][f"gpu{i}"]["tflops"] = v
    return data


def slow(share: float) -> dict:
    """Four GPUs at the top of the measured range, gpu3 ``share`` below them."""
    return burn([681.0] * 3 + [681.0 * (1 - share)], [353.0] * 3 + [353.0 * (1 - share)])


def test_healthy_siblings_at_the_ends_of_the_measured_range_pass():
    # run 7: bf16 672-681, tf32 345-353 TFLOP/s over four GPUs; the slowest against the fastest
    res = speed.judge(burn([681.0, 681.0, 681.0, 672.0], [353.0, 353.0, 353.0, 345.0]), THR)
    assert {r.status for r in res} == {Status.PASS}, [r.message for r in res]


def test_a_gpu_a_little_slow_is_a_held_fail_and_one_much_slower_acts_at_once():
    (r,) = [r for r in speed.judge(slow(0.06), THR) if r.subject == "gpu3"]
    assert r.status is Status.FAIL and r.evidence == "gpu-straggler" and r.action is Action.DRAIN_REBOOT
    assert "bf16 640 TFLOP/s 94.0% of siblings' 681 (a little slow: below 95%)" in r.message
    (r,) = [r for r in speed.judge(slow(0.12), THR) if r.subject == "gpu3"]
    assert r.status is Status.FAIL and r.evidence is None and "straggler below 90%" in r.message


def test_a_hardware_throttle_beside_it_acts_at_once():
    data = slow(0.06)
    data["nvml"]["gpu3"]["reasons"] = {"hw_thermal_slowdown": 0.5}
    (r,) = [r for r in speed.judge(data, THR) if r.subject == "gpu3"]
    assert r.status is Status.FAIL and r.evidence is None and r.action is Action.DRAIN_TICKET


def epilogs(datas, times, section=None):
    stored, out = None, []
    for data, t in zip(datas, times):
        results, stored = hold(speed.judge(data, THR), stored, t, section)
        out.append({r.subject: r for r in results}["gpu3"])
    return out


def test_three_epilogs_in_a_row_days_apart_drain_and_say_so():
    out = epilogs([slow(0.06)] * 3, [0.0, 2 * DAY, 5 * DAY])
    assert [r.status for r in out] == [Status.WARN, Status.WARN, Status.FAIL]
    assert out[0].action is Action.NONE and "drains when held 3 runs in a row, at most 7 d apart: " \
        "evidence.straggler" in out[0].message
    assert out[2].action is Action.DRAIN_REBOOT and out[2].message.endswith("held 3 runs over 5 d")
    assert counts_toward_lemon(out[2].check, out[2].evidence)  # a slow GPU is the GPU's


def test_a_fast_epilog_between_or_a_week_apart_starts_again():
    # another process or a hot spell slowed one job's burn-in: the GPU is fast again at the next
    out = epilogs([slow(0.06), slow(0.06), slow(0.0), slow(0.06), slow(0.06)], [0, 3600, 7200, 10800, 14400])
    assert {r.status for r in out} <= {Status.WARN, Status.PASS}
    out = epilogs([slow(0.06)] * 3, [0.0, 8 * DAY, 9 * DAY])
    assert out[-1].status is Status.WARN


def test_the_site_sets_the_line_and_the_hold():
    thr = {**THR, "straggler_warn_fraction": None}  # off
    assert Status.FAIL not in {r.status for r in speed.judge(slow(0.06), thr)}  # the profile's WARN stays
    out = epilogs([slow(0.06)], [0.0], {"straggler": {"runs": 1}})
    assert out[0].status is Status.FAIL
    bad = CHECK["gpu-speed"].validate({**THR, "straggler_warn_fraction": 0.85})
    assert bad == ["straggler_warn_fraction: must not be below straggler_fraction (0.9), got 0.85"]


def test_the_table_row_says_what_it_buys():
    row = by_id("gpu-straggler")
    assert row.kind == "hardware" and row.lemon and row.hold == "straggler" and row.act is Action.DRAIN_REBOOT
    assert HOLDS["straggler"].gap_s == 7 * DAY and row.drain_text().startswith("when held 3 runs in a row")


@pytest.mark.parametrize("share", [0.05, 0.10])
def test_the_lines_edges(share):
    (r,) = [r for r in speed.judge(slow(share + 0.001), THR) if r.subject == "gpu3"]
    assert r.status is Status.FAIL
