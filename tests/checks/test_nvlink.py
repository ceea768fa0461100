"""nvlink: active link count vs profile/baseline, and per-link error growth across runs."""

from __future__ import annotations

import json

from tests.helpers.snapshots import baseline_for, context, healthy_node, later, no_nvml, problems, with_gpu, with_link

from gpuhc.checks.base import Context
from gpuhc.checks.nvlink import CHECKS, counter_kind
from gpuhc.model.nvml import NvLinkState
from gpuhc.model.result import Action, Status

CHECK = CHECKS[0]


def run(snapshot, **kw):
    return CHECK.judge(snapshot, context(CHECK, **kw))


def test_runs_in_the_prolog():
    assert "prolog" in CHECK.stages


def test_healthy_node_passes_and_records_every_counter():
    out = run(healthy_node())
    assert [r.status for r in out.results] == [Status.PASS] * 8
    assert out.results[0].message == "gpu0 18 NVLinks active, no error growth"
    assert len(out.state) == 8 * 18 * 3
    json.dumps(out.state)  # persisted as JSON


def test_link_down_fails_with_drain_reboot_and_names_the_link():
    out = run(with_link(healthy_node(), 2, 5, active=False))
    (r,) = problems(out)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.subject == "gpu2"
    assert r.message == "gpu2 17/18 NVLinks active (down: 5)" and (r.value, r.threshold) == (17, 18)


def test_baseline_count_overrides_the_profile():
    broken = with_link(healthy_node(), 2, 5, active=False)
    base = baseline_for(broken)  # this node was commissioned with gpu2 at 17 links
    assert not problems(run(broken, baseline=base))
    worse = with_link(broken, 2, 6, active=False)
    (r,) = problems(run(worse, baseline=base))
    assert r.message == "gpu2 16/17 NVLinks active (down: 5, 6)"


def test_generic_profile_has_no_expected_count():
    assert not problems(run(with_link(healthy_node(), 2, 5, active=False), profile="generic"))


def test_a100_profile_expects_twelve():
    a100 = healthy_node(name="NVIDIA A100-SXM4-80GB", links=12)
    assert not problems(run(a100, profile="a100-sxm"))
    assert problems(run(a100, profile="h100-sxm"))


def test_first_run_only_records_then_growth_is_judged():
    first = with_link(healthy_node(), 1, 3, replay=5_000_000, crc=9_000_000)
    out1 = run(first)
    assert not problems(out1)  # big lifetime totals mean nothing on first sight
    second = with_link(later(first), 1, 3, replay=5_000_150, crc=9_000_050)
    out2 = run(second, prev=out1.state)
    (r,) = problems(out2)
    assert r.status is Status.WARN and not r.action.drains and r.subject == "gpu1"
    assert r.message == "gpu1 NVLink replay errors +150 since last run (link 3)"
    assert r.value == {"3": 150}


def test_large_growth_fails_with_a_ticket():
    out1 = run(healthy_node())
    snap = with_link(later(healthy_node()), 4, 0, crc=20_000)
    snap = with_link(snap, 4, 9, crc=15_000)
    (r,) = problems(run(snap, prev=out1.state))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert r.message == "gpu4 NVLink crc errors +20000 since last run (links 0, 9)"


def test_recovery_is_judged_strictly():
    out1 = run(healthy_node())
    (w,) = problems(run(with_link(healthy_node(), 0, 1, recovery=1), prev=out1.state))
    assert w.status is Status.WARN and "recovery" in w.message
    (f,) = problems(run(with_link(healthy_node(), 0, 1, recovery=5), prev=out1.state))
    assert f.status is Status.FAIL and f.action is Action.DRAIN_TICKET


def test_recovery_failed_fails_at_one_and_symbol_errors_are_ignored():
    snap = with_link(healthy_node(), 0, 1, link_recovery_failed=0, symbol_errors=0)
    out1 = run(snap)
    grown = with_link(snap, 0, 1, link_recovery_failed=1, symbol_errors=10**6)
    (f,) = problems(run(grown, prev=out1.state))
    assert f.status is Status.FAIL and "recovery_failed" in f.message


def test_other_counters_warn_only():
    snap = with_link(healthy_node(), 6, 2, rcv_errors=0)
    out1 = run(snap)
    (w,) = problems(run(with_link(snap, 6, 2, rcv_errors=10**6), prev=out1.state))
    assert w.status is Status.WARN


def test_small_growth_passes():
    out1 = run(healthy_node())
    assert not problems(run(with_link(healthy_node(), 0, 1, replay=99, crc=99), prev=out1.state))


def test_counter_reset_rebaselines_instead_of_judging():
    high = with_link(healthy_node(), 1, 3, replay=10_000)
    out1 = run(high)
    reset = with_link(healthy_node(), 1, 3, replay=20)  # driver reload: counters back near 0
    out2 = run(reset, prev=out1.state)
    assert not problems(out2)
    assert out2.state["GPU-00000000-0000-0000-0000-000000000001/3/replay"] == 20
    out3 = run(with_link(healthy_node(), 1, 3, replay=220), prev=out2.state)
    (w,) = problems(out3)
    assert "+200" in w.message


def test_prolog_subset_keeps_the_other_gpus_baselines():
    out1 = run(healthy_node())
    out2 = run(healthy_node(), prev=out1.state, gpus=[0])
    assert out2.state == out1.state and [r.subject for r in out2.results] == ["gpu0"]
    # A full run rewrites the state: baselines of GPUs no longer present are dropped.
    out3 = run(healthy_node(2), prev=out1.state)
    assert len(out3.state) == 2 * 18 * 3


def test_no_links_or_unknown_state_is_na():
    out = run(with_gpu(healthy_node(), 0, nvlinks=[]))
    assert out.results[0].status is Status.NA
    unknown = [NvLinkState(link=i, active=None) for i in range(18)]
    out = run(with_gpu(healthy_node(), 0, nvlinks=unknown))
    assert out.results[0].status is Status.NA


def test_nvml_unavailable_is_na():
    (r,) = run(no_nvml()).results
    assert r.status is Status.NA


def test_empty_prev_context_works():
    out = CHECK.judge(healthy_node(), Context(thresholds=dict(CHECK.defaults)))
    assert not problems(out)


def test_counter_kinds():
    assert [counter_kind(n) for n in ("crc", "crc_flit", "replay", "recovery", "link_recovery_failed", "xmit_discards")] == [
        "crc", "crc", "replay", "recovery", "recovery_failed", "other"]
