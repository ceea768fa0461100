"""ecc: uncorrectable errors, row remapping and page retirement, with the right action each."""

from __future__ import annotations

import pytest
from tests.helpers.snapshots import healthy_node, no_nvml, problems, results_of, with_gpu

from gpuhc.checks.ecc import CHECKS
from gpuhc.model.result import Action, Status

CHECK = CHECKS[0]


def judge(snapshot, **kw):
    return results_of(CHECK, snapshot, **kw)


def test_runs_in_the_prolog():
    assert "prolog" in CHECK.stages


def test_healthy_node_passes_one_result_per_gpu():
    results = judge(healthy_node())
    assert [r.status for r in results] == [Status.PASS] * 8
    assert [r.subject for r in results] == [f"gpu{i}" for i in range(8)]


@pytest.mark.parametrize(
    "changes, message, action",
    [
        ({"ecc_volatile_uncorrected": 2}, "gpu3 2 uncorrectable ECC error(s) since driver load (reset needed)",
         Action.RESET_GPU),
        ({"remap_pending": True}, "gpu3 row remap pending (reset needed)", Action.RESET_GPU),
        ({"remap_failure": True}, "gpu3 row remap failure (spare rows exhausted)", Action.DRAIN_TICKET),
        ({"remap_uncorrectable": 8}, "gpu3 8 rows remapped for uncorrectable errors (limit 8)", Action.DRAIN_TICKET),
        ({"retired_pages_sbe": 40, "retired_pages_dbe": 20}, "gpu3 60 retired pages (limit 60)", Action.DRAIN_TICKET),
        ({"retired_pages_pending": True}, "gpu3 page retirement pending (reset needed)", Action.RESET_GPU),
    ],
)
def test_each_fault_fails_with_its_action(changes, message, action):
    results = judge(with_gpu(healthy_node(), 3, **changes))
    (bad,) = problems(results)
    assert bad.status is Status.FAIL and bad.message == message and bad.action is action and bad.subject == "gpu3"
    assert bad.action.drains
    assert len([r for r in results if r.status is Status.PASS]) == 7


def test_below_the_limits_passes():
    snap = with_gpu(healthy_node(), 1, remap_uncorrectable=7, remap_correctable=30, ecc_volatile_corrected=1000,
                    retired_pages_sbe=30, retired_pages_dbe=29, ecc_aggregate_uncorrected=5)
    assert not problems(judge(snap))


def test_several_faults_on_one_gpu_each_reported():
    snap = with_gpu(healthy_node(), 4, ecc_volatile_uncorrected=1, remap_pending=True)
    assert {r.action for r in problems(judge(snap))} == {Action.RESET_GPU}
    assert len(problems(judge(snap))) == 2


def test_limits_come_from_thresholds():
    snap = with_gpu(healthy_node(), 0, remap_uncorrectable=2)
    assert problems(judge(snap, remap_uncorrectable_fail=2))
    assert not problems(judge(snap, remap_uncorrectable_fail=0))  # 0 disables


def test_ecc_disabled_warns_unless_allowed():
    snap = with_gpu(healthy_node(), 5, ecc_mode=False)
    (w,) = problems(judge(snap))
    assert w.status is Status.WARN and w.message == "gpu5 ECC disabled" and not w.action.drains
    assert not problems(judge(snap, require_ecc=False))


def test_none_fields_are_na_never_fail():
    none = dict(ecc_mode=None, ecc_volatile_uncorrected=None, ecc_aggregate_uncorrected=None,
                ecc_volatile_corrected=None, remap_correctable=None, remap_uncorrectable=None,
                remap_pending=None, remap_failure=None, retired_pages_sbe=None, retired_pages_dbe=None,
                retired_pages_pending=None)
    results = judge(with_gpu(healthy_node(), 2, **none))
    assert results[2].status is Status.NA and results[2].subject == "gpu2"
    # Only one retired-pages count known: not judged.
    results = judge(with_gpu(healthy_node(), 2, retired_pages_sbe=100, retired_pages_dbe=None))
    assert not problems(results)


def test_nvml_unavailable_is_na():
    (r,) = judge(no_nvml())
    assert r.status is Status.NA


def test_prolog_subset_judges_only_the_jobs_gpus():
    snap = with_gpu(healthy_node(), 3, remap_pending=True)
    results = judge(snap, gpus=[0, 1])
    assert [r.subject for r in results] == ["gpu0", "gpu1"] and not problems(results)
    assert problems(judge(snap, gpus=[3]))
