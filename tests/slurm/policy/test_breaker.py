"""The circuit breaker: what counts as drained by gpuhc, scope, caps, and the message."""

from __future__ import annotations

import pytest

from gpuhc.model.deadline import Deadline
from gpuhc.slurm.policy.breaker import BreakerSettings, cap_for, evaluate, held_by_gpuhc
from gpuhc.slurm.read.nodes import Node, parse_state


def n(name, raw="IDLE", reason=None, parts=("gpu",)):
    base, flags = parse_state(raw)
    return Node(name, base, flags, reason, "root" if reason else None, None, parts, raw)


def cluster(total=100, gpuhc=0, admin=0, parts=("gpu",)):
    nodes = [n(f"g{i:03d}", parts=parts) for i in range(total)]
    for i in range(gpuhc):
        nodes[i] = n(nodes[i].name, "IDLE+DRAIN", f"gpuhc: xid gpu{i % 8} Xid 79", parts)
    for i in range(gpuhc, gpuhc + admin):
        nodes[i] = n(nodes[i].name, "IDLE+DRAIN", "bad fan", parts)
    return nodes


def test_message_matches_the_documented_shape():
    st = evaluate(cluster(100, gpuhc=12), "g050", BreakerSettings(max_drained=10, max_drained_percent=None))
    assert st.open
    assert st.message == "circuit breaker open: 12/100 nodes drained by gpuhc >= cap 10 (partition gpu)"


@pytest.mark.parametrize("drained,open_", [(0, False), (9, False), (10, True), (11, True)])
def test_open_at_or_over_the_cap(drained, open_):
    st = evaluate(cluster(100, gpuhc=drained), "g099", BreakerSettings(max_drained_percent=10.0))
    assert (st.open, st.cap, st.drained) == (open_, 10, drained)


def test_admin_drains_do_not_count_quarantined_do_retired_have_their_own_cap():
    nodes = cluster(10, admin=5)
    nodes[6] = n("g006", "DOWN+DRAIN", "gpuhc: RETIRED xid79 gpu1")
    nodes[7] = n("g007", "IDLE+DRAIN", "gpuhc: xid79 gpu1 [q2]")
    nodes[8] = n("g008", "IDLE", "gpuhc: stale reason on a node in service")
    st = evaluate(nodes, "g009", BreakerSettings(max_drained=3, max_drained_percent=None))
    assert (st.drained, st.retired, st.retired_cap) == (1, 1, 1) and not st.open
    assert not held_by_gpuhc(nodes[8])
    assert "ALERT: 1 retired nodes >= their cap 1" in st.message


def test_a_retired_node_never_switches_draining_off_in_a_small_partition():
    # Issue 30: 10 nodes, cap 1; a retired node used to hold the one place for good.
    nodes = cluster(10)
    nodes[0] = n("g000", "DOWN+DRAIN", "gpuhc: RETIRED lemon node g000: 3 drains in 30d (xid)")
    st = evaluate(nodes, "g005", BreakerSettings())
    assert (st.cap, st.drained, st.open, st.retired) == (1, 0, False, 1)
    nodes[1] = n("g001", "IDLE+DRAIN", "gpuhc: xid79 gpu1")
    assert evaluate(nodes, "g005", BreakerSettings()).open  # a held node still fills it


def test_held_nodes_rank_by_when_gpuhc_first_held_them_not_by_a_retag():
    # Issue 30: a node held for days, re-tagged [reset 1/2] during a storm, got a newer reason
    # stamp than the storm's drains, ranked past the cap, and never recounted: cap+1 stayed.
    from gpuhc.slurm.policy.breaker import survey

    def held(name, reason, t):
        base, flags = parse_state("IDLE+DRAIN")
        return Node(name, base, flags, reason, "root", t, ("gpu",), "IDLE+DRAIN")

    nodes = cluster(20)
    nodes[0] = held("g000", "gpuhc: xid79 gpu1 [reset 1/2]", 1000.0)  # re-tagged last
    nodes[1] = held("g001", "gpuhc: xid79 gpu2", 990.0)  # the storm's drains
    nodes[2] = held("g002", "gpuhc: xid79 gpu3", 995.0)
    s = survey(nodes, "g002", BreakerSettings(max_drained=2, max_drained_percent=None))
    assert [x.name for x in s.held] == ["g000", "g001", "g002"]
    assert s.past_cap("g002") and not s.past_cap("g000")
    from gpuhc.slurm.policy import ledger

    entry = ledger.snapshot(s.in_scope, s.held, "gpu", 2, 1001.0, "ab12")
    assert ledger.past_cap(entry, 995.0, "g002") and not ledger.past_cap(entry, 990.0, "g001")


def test_percent_cap_rounds_up_so_a_small_cluster_can_drain_one():
    assert cap_for(4, BreakerSettings(max_drained_percent=10.0)) == 1
    assert cap_for(100, BreakerSettings(max_drained_percent=10.0)) == 10
    assert cap_for(101, BreakerSettings(max_drained_percent=10.0)) == 11
    assert cap_for(0, BreakerSettings(max_drained_percent=10.0)) == 0


def test_stricter_cap_wins():
    assert cap_for(1000, BreakerSettings(max_drained=5, max_drained_percent=10.0)) == 5
    assert cap_for(20, BreakerSettings(max_drained=5, max_drained_percent=10.0)) == 2


def test_partition_scope_ignores_other_partitions():
    nodes = cluster(10, gpuhc=3, parts=("cpu",)) + cluster(10, parts=("gpu",))
    nodes[10:] = [n(f"h{i}", parts=("gpu",)) for i in range(10)]
    st = evaluate(nodes, "h1", BreakerSettings(max_drained=1, max_drained_percent=None))
    assert (st.open, st.drained, st.total, st.scope) == (False, 0, 10, "partition gpu")
    st = evaluate(nodes, "h1", BreakerSettings(max_drained=1, max_drained_percent=None, scope="cluster"))
    assert (st.open, st.drained, st.total, st.scope) == (True, 3, 20, "cluster")


def test_node_in_two_partitions_counts_both():
    nodes = [n("a", parts=("gpu", "debug")), n("b", "IDLE+DRAIN", "gpuhc: x", ("debug",)),
             n("c", parts=("cpu",))]
    st = evaluate(nodes, "a", BreakerSettings(max_drained=1, max_drained_percent=None))
    assert (st.total, st.drained, st.open, st.scope) == (2, 1, True, "partition debug,gpu")


def test_unknown_node_or_no_partition_falls_back_to_cluster():
    nodes = cluster(5, gpuhc=1, parts=())
    st = evaluate(nodes, "zzz", BreakerSettings(max_drained=2, max_drained_percent=None))
    assert st.scope == "cluster" and st.total == 5 and not st.open


def test_disabled_or_uncapped_breaker_never_opens():
    nodes = cluster(10, gpuhc=10)
    for s in (BreakerSettings(enabled=False), BreakerSettings(max_drained=None, max_drained_percent=None)):
        st = evaluate(nodes, "g001", s)
        assert not st.open and st.cap is None and "disabled" in st.message


def test_from_section_defaults():
    s = BreakerSettings.from_section({})
    assert (s.enabled, s.max_drained, s.max_drained_percent, s.scope) == (True, None, 10.0, "partition")


# ------------------------------------------------------------------ jitter


def test_jitter_is_deterministic_bounded_and_spread():
    from gpuhc.slurm.policy.breaker import jitter_for

    names = [f"s{i:05d}" for i in range(1, 10001)]
    waits = [jitter_for(n, 10.0) for n in names]
    assert waits == [jitter_for(n, 10.0) for n in names]  # the same node always waits the same
    assert all(0.0 <= w < 10.0 for w in waits)
    # Sequential names spread evenly: every second of the window holds about a tenth of them.
    per_second = [sum(1 for w in waits if s <= w < s + 1) for s in range(10)]
    assert min(per_second) > 850 and max(per_second) < 1150, per_second
    assert jitter_for("n1", 0.0) == 0.0


def test_actuator_cuts_the_jitter_to_the_deadline(monkeypatch):
    """The jitter leaves JITTER_RESERVE_S free after settle_s: in the prolog (20 s) what a place,
    a drain and its recount need there; in a long stage less, so that a node the deadline cut
    ends too late to claim (docs/slurm.md, "Time to verify")."""
    import time

    from gpuhc.slurm.act.actuator import JITTER_RESERVE_S, Actuator
    from gpuhc.slurm.policy.breaker import BreakerSettings, jitter_for
    from gpuhc.slurm.act.scontrol import Scontrol

    slept = []
    monkeypatch.setattr("gpuhc.slurm.act.actuator.time.sleep", slept.append)
    bs = BreakerSettings(jitter_s=30.0, settle_s=1.0)
    name = next(n for n in (f"n{i}" for i in range(100)) if jitter_for(n, 30.0) > 20.0)
    assert Actuator(Scontrol(), bs).wait_jitter(name) and slept[-1] == jitter_for(name, 30.0)
    assert Actuator(Scontrol(), bs, stage_s=55.0).needs == (10.0, 5.0)
    assert Actuator(Scontrol(), bs, stage_s=20.0).needs == (5.0, 2.0) and JITTER_RESERVE_S >= 7.0
    tight = Scontrol(deadline=Deadline.after(1.0 + JITTER_RESERVE_S + 5.0))  # 5 s of room
    assert Actuator(tight, bs).wait_jitter(name) and 4.0 < slept[-1] <= 5.0
    none_left = Scontrol(deadline=Deadline.after(JITTER_RESERVE_S))
    assert not Actuator(none_left, bs).wait_jitter(name) and len(slept) == 2
    assert not Actuator(Scontrol(), bs, spread=False).wait_jitter(name)
