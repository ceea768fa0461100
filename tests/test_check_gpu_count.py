"""gpu-count: NVML reachable, every expected GPU present, none lost."""

from __future__ import annotations

import dataclasses

from snapshots import baseline_for, context, healthy_node, no_nvml, with_gpu, without_gpu

from gpuhc.checks.base import STAGES
from gpuhc.checks.gpu_count import CHECKS
from gpuhc.model import Action, Snapshot, Status

CHECK = CHECKS[0]


def judge(snapshot, **kw):
    return CHECK.judge(snapshot, context(CHECK, **kw)).results


def test_runs_in_every_stage_including_prolog():
    assert CHECK.id == "gpu-count" and set(CHECK.stages) == set(STAGES)


def test_healthy_node_with_expected_count_passes():
    (r,) = judge(healthy_node(), expected=8)
    assert r.status is Status.PASS and r.message == "8 of 8 GPUs visible" and r.action is Action.NONE


def test_nvml_unavailable_fails_with_drain_reboot():
    (r,) = judge(no_nvml("Driver Not Loaded"), expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    assert r.message == "NVML unavailable: Driver Not Loaded (driver not loaded / GPU lost)"


def test_no_nvml_reading_at_all_fails_too():
    (r,) = judge(Snapshot(hostname="n1", time=0.0, nvml=None))
    assert r.status is Status.FAIL and "NVML unavailable" in r.message


def test_missing_gpu_against_configured_count():
    (r,) = judge(without_gpu(healthy_node(), 3), expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    assert r.message == "7 of 8 GPUs visible" and (r.value, r.threshold) == (7, 8)


def test_missing_gpu_named_by_pci_from_the_baseline():
    base = baseline_for(healthy_node())
    (r,) = judge(without_gpu(healthy_node(), 3), baseline=base)
    assert r.status is Status.FAIL
    assert r.message == "7 of 8 GPUs visible; missing gpu3 (0000:5d:00.0)"


def test_configured_count_wins_over_the_baseline():
    base = baseline_for(healthy_node(4))
    (r,) = judge(healthy_node(8), expected=8, baseline=base)
    assert r.status is Status.PASS and r.message == "8 of 8 GPUs visible"
    (r,) = judge(healthy_node(8), baseline=base)  # no configured count: the baseline's 4
    assert r.status is Status.WARN and r.message == "8 GPUs visible, baseline count is 4"


def test_more_gpus_than_expected_only_warns():
    (r,) = judge(healthy_node(8), expected=4)
    assert r.status is Status.WARN and not r.action.drains
    assert r.message == "8 GPUs visible, configured count is 4"


def test_same_count_different_bus_ids_warns():
    base = baseline_for(healthy_node())
    snap = with_gpu(healthy_node(), 5, pci_bus_id="0000:ac:00.0")
    (r,) = judge(snap, baseline=base)
    assert r.status is Status.WARN and "gpu5 (0000:ab:00.0) not seen" in r.message


def test_gpu_lost_as_named_by_the_nvml_source_fails_with_ticket():
    snap = with_gpu(healthy_node(), 2, name="unknown (NVML: GPU is lost)", uuid="", pci_bus_id="")
    (r,) = judge(snap, expected=8)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET and r.subject == "gpu2"
    assert r.message == "gpu2 lost: GPU is lost"


def test_gpu_lost_flag_fails_and_keeps_bus_id():
    snap = healthy_node()
    snap.nvml.gpus[6].lost = True  # a source may mark the GPU instead of renaming it
    (r,) = judge(snap, expected=8)
    assert r.status is Status.FAIL and r.message == "gpu6 (0000:ba:00.0) lost: GPU is lost"


def test_without_expectation_any_gpus_pass_and_none_warns():
    (r,) = judge(healthy_node(2))
    assert r.status is Status.PASS and r.message == "2 GPUs visible"
    (r,) = judge(healthy_node(0))
    assert r.status is Status.WARN


def test_prolog_subset_still_counts_the_whole_node():
    (r,) = judge(without_gpu(healthy_node(), 7), expected=8, gpus=[0, 1])
    assert r.status is Status.FAIL and r.message.startswith("7 of 8")


def test_results_are_json_able():
    import json

    for r in judge(without_gpu(healthy_node(), 1), baseline=baseline_for(healthy_node())):
        json.dumps(dataclasses.asdict(r), default=str)
        json.dumps(r.to_dict())
