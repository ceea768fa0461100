"""clocks: persistent HW/SW slowdown fails, intermittent warns, normal reasons pass."""

from __future__ import annotations

import pytest
from tests.helpers.snapshots import healthy_node, idle_node, no_nvml, problems, results_of, with_gpu

from gpuhc.checks.clocks import (
    CHECKS,
    GPU_IDLE,
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL,
    SW_POWER_CAP,
    SW_THERMAL,
    is_busy,
)
from gpuhc.model.result import Action, Status

CHECK = CHECKS[0]
APP_CLOCKS, SYNC_BOOST = 0x2, 0x10


def judge(snapshot, **kw):
    return results_of(CHECK, snapshot, **kw)


def test_healthy_busy_and_idle_nodes_pass():
    assert [r.status for r in judge(healthy_node())] == [Status.PASS] * 8
    results = judge(idle_node())
    assert not problems(results) and results[0].message == "gpu0 clocks: idle"


@pytest.mark.parametrize("mask", [GPU_IDLE, APP_CLOCKS, SW_POWER_CAP, SYNC_BOOST, SW_POWER_CAP | APP_CLOCKS])
def test_normal_reasons_pass(mask):
    assert not problems(judge(with_gpu(healthy_node(), 1, clock_event_samples=[mask] * 3)))


@pytest.mark.parametrize(
    "mask, words",
    [
        (HW_SLOWDOWN | HW_THERMAL, "HW thermal slowdown"),
        (HW_SLOWDOWN | HW_POWER_BRAKE, "HW power brake"),
        (HW_SLOWDOWN, "HW slowdown"),
        (SW_THERMAL, "SW thermal slowdown"),
    ],
)
def test_persistent_slowdown_fails_with_ticket(mask, words):
    (r,) = problems(judge(with_gpu(healthy_node(), 4, clock_event_samples=[mask | SW_POWER_CAP] * 3)))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET and r.subject == "gpu4"
    assert r.message == f"gpu4 clocks held down by {words} (3/3 samples)"


def test_intermittent_slowdown_warns():
    (r,) = problems(judge(with_gpu(healthy_node(), 4, clock_event_samples=[0, HW_SLOWDOWN | HW_THERMAL, 0])))
    assert r.status is Status.WARN and not r.action.drains
    assert r.message == "gpu4 intermittent HW thermal slowdown (1/3 samples)"


def test_persistent_umbrella_bit_fails_even_if_the_cause_is_intermittent():
    samples = [HW_SLOWDOWN | HW_THERMAL, HW_SLOWDOWN, HW_SLOWDOWN]
    found = problems(judge(with_gpu(healthy_node(), 0, clock_event_samples=samples)))
    assert {(r.status, r.message) for r in found} == {
        (Status.WARN, "gpu0 intermittent HW thermal slowdown (1/3 samples)"),
        (Status.FAIL, "gpu0 clocks held down by HW slowdown (3/3 samples)"),
    }


def test_reason_outside_fail_on_only_warns_when_persistent():
    snap = with_gpu(healthy_node(), 2, clock_event_samples=[SW_THERMAL] * 3)
    (r,) = problems(judge(snap, fail_on=["hw_thermal", "hw_power_brake", "hw_slowdown"]))
    assert r.status is Status.WARN and r.message == "gpu2 persistent SW thermal slowdown (3/3 samples)"


def test_single_sample_counts_as_all_samples():
    (r,) = problems(judge(with_gpu(healthy_node(), 2, clock_event_samples=[HW_SLOWDOWN | HW_POWER_BRAKE])))
    assert r.status is Status.FAIL and "(1/1 samples)" in r.message


def test_no_samples_is_na():
    results = judge(with_gpu(healthy_node(), 7, clock_event_samples=[]))
    assert results[7].status is Status.NA and results[7].subject == "gpu7"


def test_nvml_unavailable_is_na():
    (r,) = judge(no_nvml())
    assert r.status is Status.NA


def test_subset_of_gpus():
    snap = with_gpu(healthy_node(), 4, clock_event_samples=[SW_THERMAL] * 3)
    assert not problems(judge(snap, gpus=[0, 1]))


def test_is_busy():
    gpu = healthy_node().nvml.gpus[0]
    assert is_busy(gpu) is True
    assert is_busy(idle_node().nvml.gpus[0]) is False
    gpu.clock_event_samples = [0, GPU_IDLE, 0]
    assert is_busy(gpu) is False  # idle for part of the run: not judged as busy
    gpu.clock_event_samples, gpu.utilization_gpu = [], None
    assert is_busy(gpu) is None
    gpu.utilization_gpu = 0
    assert is_busy(gpu) is False
    gpu.clock_event_samples, gpu.utilization_gpu = [SW_POWER_CAP], None
    assert is_busy(gpu) is True


def test_unknown_fail_on_name_is_reported_not_ignored():
    results = judge(healthy_node(), fail_on=["hw_termal", "hw_thermal"])
    (err,) = [r for r in results if r.status is Status.ERROR]
    assert "hw_termal" in err.message and not err.action.drains
    assert len([r for r in results if r.status is Status.PASS]) == 8
