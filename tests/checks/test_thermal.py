"""thermal: absolute GPU/HBM limits from the profile, and the spread across busy GPUs."""

from __future__ import annotations

from tests.helpers.snapshots import healthy_node, idle_node, no_nvml, problems, results_of, with_gpu

from gpuhc.checks.thermal import CHECKS
from gpuhc.model.result import Action, Status

CHECK = CHECKS[0]


def judge(snapshot, **kw):
    return results_of(CHECK, snapshot, **kw)


def test_healthy_node_passes():
    results = judge(healthy_node())
    assert [r.status for r in results] == [Status.PASS] * 8
    assert results[0].message == "gpu0 GPU 62 C, memory 70 C"


def test_gpu_temperature_warn_and_fail_at_h100_limits():
    # Neighbours heated up too, so only the absolute limits speak.
    hot = healthy_node(temp_gpu_c=80)
    (w,) = problems(judge(with_gpu(hot, 3, temp_gpu_c=86)))
    assert w.status is Status.WARN and w.message == "gpu3 GPU temperature 86 C >= 85 C" and not w.action.drains
    (f,) = problems(judge(with_gpu(hot, 3, temp_gpu_c=89)))
    assert f.status is Status.FAIL and f.action is Action.DRAIN_TICKET and f.subject == "gpu3"
    assert f.message == "gpu3 GPU temperature 89 C >= 89 C"


def test_memory_temperature_limits():
    (w,) = problems(judge(with_gpu(healthy_node(), 1, temp_mem_c=91)))
    assert w.status is Status.WARN and w.message == "gpu1 memory temperature 91 C >= 90 C"
    (f,) = problems(judge(with_gpu(healthy_node(), 1, temp_mem_c=95)))
    assert f.status is Status.FAIL and f.action is Action.DRAIN_TICKET


def test_profiles_set_the_limits():
    snap = with_gpu(healthy_node(temp_gpu_c=80), 3, temp_gpu_c=89)
    assert problems(judge(snap, profile="generic"))[0].status is Status.WARN  # generic fails at 90
    a100 = with_gpu(healthy_node(temp_gpu_c=80), 3, temp_gpu_c=84)
    assert problems(judge(a100, profile="a100-sxm"))[0].status is Status.WARN  # A100 warns at 83


def test_one_busy_gpu_much_hotter_than_its_siblings_warns():
    (w,) = problems(judge(with_gpu(healthy_node(), 5, temp_gpu_c=78)))
    assert w.status is Status.WARN and not w.action.drains and w.subject == "gpu5"
    assert w.message == "gpu5 78 C is 16 C above its busy siblings' median 62 C"


def test_a_much_larger_gradient_fails():
    snap = with_gpu(healthy_node(temp_gpu_c=55), 5, temp_gpu_c=82)
    (f,) = problems(judge(snap))
    assert f.status is Status.FAIL and f.action is Action.DRAIN_TICKET and "27 C above" in f.message


def test_gradient_ignores_idle_gpus():
    # A busy GPU next to idle ones is naturally hotter.
    snap = idle_node()
    snap = with_gpu(snap, 0, temp_gpu_c=70, utilization_gpu=100, clock_event_samples=[0, 0, 0])
    assert not problems(judge(snap))
    # An idle GPU warmer than its idle siblings (it just finished a job) is not judged either.
    assert not problems(judge(with_gpu(idle_node(), 2, temp_gpu_c=55)))


def test_gradient_needs_enough_busy_gpus():
    two = with_gpu(healthy_node(2), 1, temp_gpu_c=80)
    assert not problems(judge(two))
    assert problems(judge(two, gradient_min_gpus=2))


def test_gradient_levels_can_be_disabled():
    snap = with_gpu(healthy_node(temp_gpu_c=55), 5, temp_gpu_c=82)
    assert not problems(judge(snap, gradient_warn_c=0, gradient_fail_c=0))


def test_prolog_subset_compares_with_the_whole_node():
    snap = with_gpu(healthy_node(), 5, temp_gpu_c=78)
    (w,) = problems(judge(snap, gpus=[5]))
    assert w.subject == "gpu5" and "median 62 C" in w.message
    assert not problems(judge(snap, gpus=[0, 1]))


def test_none_temperatures_are_na_and_skip_the_gradient():
    results = judge(with_gpu(healthy_node(), 2, temp_gpu_c=None, temp_mem_c=None))
    assert results[2].status is Status.NA and not problems(results)
    results = judge(with_gpu(healthy_node(), 2, temp_mem_c=None))
    assert results[2].status is Status.PASS and results[2].message == "gpu2 GPU 62 C"


def test_nvml_unavailable_is_na():
    (r,) = judge(no_nvml())
    assert r.status is Status.NA
