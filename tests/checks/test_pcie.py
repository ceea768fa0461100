"""pcie: width always, generation only under load or vs the baseline, replay and AER growth."""

from __future__ import annotations

from tests.helpers.snapshots import IDLE, baseline_for, context, healthy_node, idle_node, later, no_nvml, problems, with_gpu

from gpuhc.checks.base import AER, NVML
from gpuhc.checks.pcie import CHECKS
from gpuhc.model.host import AerCounters
from gpuhc.model.result import Action, Status

CHECK = CHECKS[0]


def run(snapshot, **kw):
    return CHECK.judge(snapshot, context(CHECK, **kw))


def test_needs_nvml_and_aer_and_runs_in_prolog():
    assert set(CHECK.needs) == {NVML, AER} and "prolog" in CHECK.stages


def test_healthy_busy_and_idle_nodes_pass():
    out = run(healthy_node())
    assert [r.status for r in out.results] == [Status.PASS] * 8
    assert out.results[0].message == "gpu0 PCIe gen5 x16"
    idle = idle_node(pcie_gen=1)  # power-saving downtrain
    out = run(idle)
    assert not problems(out) and out.results[0].message == "gpu0 PCIe gen1 x16 (idle)"


def test_narrow_link_fails_even_when_idle():
    for snap in (healthy_node(), idle_node()):
        (r,) = problems(run(with_gpu(snap, 3, pcie_width=8)))
        assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.subject == "gpu3"
        assert r.message == "gpu3 PCIe link x8 < expected x16"


def test_generic_profile_expects_the_gpus_own_max_width():
    (r,) = problems(run(with_gpu(healthy_node(), 1, pcie_width=4), profile="generic"))
    assert r.message == "gpu1 PCIe link x4 < expected x16"


def test_low_generation_fails_only_under_load():
    (r,) = problems(run(with_gpu(healthy_node(), 2, pcie_gen=4)))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT
    assert r.message == "gpu2 PCIe gen4 < expected gen5 under load"
    assert not problems(run(with_gpu(idle_node(), 2, pcie_gen=4)))


def test_busy_is_read_from_samples_when_utilisation_is_unknown():
    busy = with_gpu(healthy_node(), 2, pcie_gen=3, utilization_gpu=None)
    assert problems(run(busy))
    unknown = with_gpu(healthy_node(), 2, pcie_gen=3, utilization_gpu=None, clock_event_samples=[])
    assert not problems(run(unknown))  # cannot tell: never fail
    partly_idle = with_gpu(healthy_node(), 2, pcie_gen=3, clock_event_samples=[0, IDLE, 0])
    assert not problems(run(partly_idle))


def test_max_generation_below_baseline_fails_even_when_idle():
    base = baseline_for(healthy_node())
    snap = with_gpu(idle_node(), 6, pcie_gen=1, pcie_gen_max=4)
    (r,) = problems(run(snap, baseline=base))
    assert r.status is Status.FAIL and r.message == "gpu6 PCIe max gen4 < baseline gen5"


def test_max_generation_below_profile_without_baseline_only_warns_once():
    snap = with_gpu(healthy_node(), 6, pcie_gen=4, pcie_gen_max=4)  # a gen4 host, busy
    (r,) = problems(run(snap))
    assert r.status is Status.WARN and r.message == "gpu6 PCIe max gen4 < expected gen5 (host limit?)"


def test_baseline_width_overrides_profile():
    base = baseline_for(with_gpu(healthy_node(), 0, pcie_width_max=8, pcie_width=8))
    assert not problems(run(with_gpu(healthy_node(), 0, pcie_width=8, pcie_width_max=8), baseline=base))


def test_replay_growth_warns_then_fails_with_ticket():
    first = with_gpu(healthy_node(), 5, pcie_replay=1_000)
    out1 = run(first)
    assert not problems(out1)  # first sight only records
    out2 = run(with_gpu(later(first), 5, pcie_replay=1_020), prev=out1.state)
    (w,) = problems(out2)
    assert w.status is Status.WARN and w.message == "gpu5 PCIe replays +20 since last run"
    (f,) = problems(run(with_gpu(later(first), 5, pcie_replay=2_000), prev=out1.state))
    assert f.status is Status.FAIL and f.action is Action.DRAIN_TICKET


def test_replay_counter_reset_rebaselines():
    out1 = run(with_gpu(healthy_node(), 5, pcie_replay=1_000))
    out2 = run(with_gpu(healthy_node(), 5, pcie_replay=3), prev=out1.state)
    assert not problems(out2) and out2.state["GPU-00000000-0000-0000-0000-000000000005/replay"] == 3


def _with_aer(snap, fatal=0, nonfatal=0, pci="0000:5D:00.0"):
    snap.aer = [AerCounters(pci=pci, correctable=0, nonfatal=nonfatal, fatal=fatal),
                AerCounters(pci="0000:00:01.0", correctable=0, nonfatal=99, fatal=99)]  # a root port
    return snap


def test_aer_growth_matched_by_pci_id():
    out1 = run(_with_aer(healthy_node()))
    assert not problems(out1)
    (f,) = problems(run(_with_aer(later(healthy_node()), fatal=1), prev=out1.state))
    assert f.status is Status.FAIL and f.action is Action.DRAIN_TICKET and f.subject == "gpu3"
    assert f.message == "gpu3 PCIe AER fatal errors +1 since last run"
    (w,) = problems(run(_with_aer(later(healthy_node()), nonfatal=2), prev=out1.state))
    assert w.status is Status.WARN and w.message == "gpu3 PCIe AER non-fatal errors +2 since last run"


def test_aer_first_sight_and_missing_source_pass():
    assert not problems(run(_with_aer(healthy_node(), fatal=5)))
    assert not problems(run(healthy_node()))  # snapshot.aer None: AER not read


def test_none_fields_are_na():
    none = dict(pcie_gen=None, pcie_gen_max=None, pcie_width=None, pcie_width_max=None, pcie_replay=None)
    out = run(with_gpu(healthy_node(), 4, **none))
    assert out.results[4].status is Status.NA
    partial = with_gpu(healthy_node(), 4, pcie_width=None, pcie_replay=None)
    assert not problems(run(partial))


def test_nvml_unavailable_is_na():
    (r,) = run(no_nvml()).results
    assert r.status is Status.NA


def test_prolog_subset_keeps_other_baselines():
    out1 = run(healthy_node())
    out2 = run(healthy_node(), prev=out1.state, gpus=[1])
    assert out2.state == out1.state and [r.subject for r in out2.results] == ["gpu1"]
