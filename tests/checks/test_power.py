"""power: enforced limit vs the model's rated limit; persistence mode."""

from __future__ import annotations

from tests.helpers.snapshots import healthy_node, no_nvml, problems, results_of, with_gpu

from gpuhc.checks.power import CHECKS
from gpuhc.model.result import Action, Status

CHECK = CHECKS[0]


def judge(snapshot, **kw):
    return results_of(CHECK, snapshot, **kw)


def test_healthy_node_passes():
    results = judge(healthy_node())
    assert [r.status for r in results] == [Status.PASS] * 8
    assert results[0].message == "gpu0 power limit 700 W"


def test_capped_gpu_fails_with_drain_reboot():
    (r,) = problems(judge(with_gpu(healthy_node(), 3, power_limit_w=400.0)))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.subject == "gpu3"
    assert r.message == "gpu3 power limit 400 W < expected 700 W" and (r.value, r.threshold) == (400.0, 700)


def test_within_tolerance_passes():
    assert not problems(judge(with_gpu(healthy_node(), 3, power_limit_w=670.0)))  # > 665 W
    assert problems(judge(with_gpu(healthy_node(), 3, power_limit_w=660.0)))
    assert not problems(judge(with_gpu(healthy_node(), 3, power_limit_w=660.0), tolerance_pct=10.0))


def test_default_limit_is_the_expectation_without_a_profile_value():
    snap = healthy_node(name="NVIDIA L40S", power_limit_w=350.0, power_default_limit_w=350.0, nvlinks=[])
    assert not problems(judge(snap, profile="generic"))
    (r,) = problems(judge(with_gpu(snap, 1, power_limit_w=250.0), profile="generic"))
    assert r.message == "gpu1 power limit 250 W < expected 350 W"


def test_a100_with_a_higher_oem_limit_passes():
    a100 = healthy_node(name="NVIDIA A100-SXM4-80GB", power_limit_w=500.0, power_default_limit_w=500.0)
    assert not problems(judge(a100, profile="a100-sxm"))
    assert problems(judge(with_gpu(a100, 0, power_limit_w=300.0), profile="a100-sxm"))


def test_persistence_off_warns():
    (w,) = problems(judge(with_gpu(healthy_node(), 6, persistence_mode=False)))
    assert w.status is Status.WARN and not w.action.drains
    assert w.message == "gpu6 persistence mode off (slow NVML init)"
    assert not problems(judge(with_gpu(healthy_node(), 6, persistence_mode=False), require_persistence=False))


def test_none_fields_are_na_never_fail():
    results = judge(with_gpu(healthy_node(), 2, power_limit_w=None, persistence_mode=None))
    assert results[2].status is Status.NA and not problems(results)
    only_persistence = judge(with_gpu(healthy_node(), 2, power_limit_w=None))
    assert only_persistence[2].status is Status.PASS
    no_expectation = with_gpu(healthy_node(), 2, power_default_limit_w=None, power_limit_w=10.0)
    assert not problems(judge(no_expectation, profile="generic"))


def test_nvml_unavailable_is_na():
    (r,) = judge(no_nvml())
    assert r.status is Status.NA


def test_subset_of_gpus():
    snap = with_gpu(healthy_node(), 3, power_limit_w=400.0)
    assert [r.subject for r in judge(snap, gpus=[3])] == ["gpu3"]
    assert not problems(judge(snap, gpus=[0]))
