"""The breaker ledger (gpuhc/slurm/policy/ledger.py and the actuator's use of it): the format, what a
count writes, and that a decision taken from another node's count is the decision this node's
own count would have taken. The real-Slurm storm with a ledger is in tests/slurm_real/test_storm.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhc.slurm.policy import ledger
from gpuhc.slurm.act.actuator import Actuator
from gpuhc.slurm.policy.breaker import BreakerSettings, jitter_for, survey
from gpuhc.slurm.policy.drain import Act, Decision, Memory
from tests.helpers.ledger import BS, claims, entry, LedgerSlurm, n, T0, table
from tests.helpers.ledger import held


# ---------------------------------------------------------------------------- the format


def test_entries_survive_render_and_parse():
    a = entry()
    b = entry(scope="p=debug+gpu", id="12345678", held=12, cut=(T0 - 9, "g007"))
    c = entry(scope="cluster", id="ffffffff", t=T0 - 100)
    text = ledger.render([c, a, b])
    assert text.startswith(ledger.PREFIX + " ")
    assert ledger.parse(text) == {"p=gpu": a, "p=debug+gpu": b, "cluster": c}
    a2 = entry(held=4, id="0000abce")
    assert ledger.parse(ledger.merged(text, a2)) == {"p=gpu": a2, "p=debug+gpu": b, "cluster": c}


def test_places_on_their_way_survive_render_and_parse_and_count():
    """A count that did not see a claimer drained keeps its place, by name (issue 18)."""
    e = entry(held=2, cap=5, pending=("g7", "g3"), claimers=("g9",))
    assert ledger.parse(ledger.render([e]))["p=gpu"] == entry(held=2, cap=5, pending=("g7", "g3"))
    assert e.taken == 4 and e.open and e.within("g7") and e.within("g3") and e.within("g9")
    assert not entry(held=2, cap=5, pending=("g7", "g3"), claimers=("g9", "g8")).within("g8")
    assert not entry(held=4, cap=5, pending=("g7", "g3")).within("g3")  # the count saw the cap taken
    assert "pending" not in entry().render()  # the format of a count with none is unchanged


def test_a_count_carries_the_claimers_it_did_not_see_drained():
    nodes = [held("g000", T0), held("g001", T0 + 1)] + [n(f"g{i:03d}") for i in range(2, 10)]
    s = survey(nodes, "g000", BreakerSettings(max_drained=5, max_drained_percent=None))
    e = ledger.snapshot(s.in_scope, s.held, "p=gpu", s.cap, T0 + 5, "0000abcd", claimed=("g001", "g004", "g006", "g004"))
    assert (e.held, e.pending, e.claimers) == (2, ("g004", "g006"), ())


def test_a_claimer_carried_into_a_new_count_drains_on_its_place(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 10)
    sc = LedgerSlurm(table(), ledger.render([entry(total=10, cap=3, held=2, pending=("g009",))]))
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert not state.open and state.drained == 2 and "write" not in sc.asked and "scope" not in sc.asked


def test_publish_carries_the_claims_of_the_entry_it_replaces(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 100)
    old = entry(total=10, cap=5, held=1, claimers=("g001", "g007"))
    sc = LedgerSlurm(table(k=2), ledger.render([old]), extra=claims(old), now=T0 + 99)
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])  # the old entry is stale: a count
    new = ledger.parse(sc.comment)["p=gpu"]
    assert state.source == "count" and (new.held, new.pending) == (2, ("g007",))  # g001 is held


def test_claims_belong_to_one_entry():
    a, b = entry(), entry(scope="cluster", id="12345678")
    extra = ledger.claimed(ledger.claimed("", a, "g1"), a, "g2")
    extra = ledger.claimed(extra, b, "g3")
    joined = ledger.with_claims({"p=gpu": a, "cluster": b}, extra)
    assert joined["p=gpu"].claimers == ("g1", "g2") and joined["cluster"].claimers == ("g3",)
    # A newer count of the scope (new id) saw the claimed drains: the old claims are void.
    newer = entry(id="0000ffff", held=5)
    assert ledger.with_claims({"p=gpu": newer}, extra)["p=gpu"].claimers == ()
    assert ledger.claimed(extra, joined["p=gpu"], "g1") == extra  # claiming twice changes nothing


@pytest.mark.parametrize("extra", [
    "gpuhc-claims/1 p=gpu@0000abcd:a+a", "gpuhc-claims/1 p=gpu@0000abc:a", "gpuhc-claims/1 p=gpu:a",
    "gpuhc-claims/1 p=gpu@0000abcd:a/b", "gpuhc-claims/1 p=g;pu@0000abcd:a", "other text",
])
def test_malformed_claims_are_void(extra):
    assert ledger.with_claims({"p=gpu": entry()}, extra)["p=gpu"].claimers == ()


def test_scope_keys():
    assert ledger.scope_key(["gpu", "debug", "gpu"]) == "p=debug+gpu"
    assert ledger.scope_key(None) == ledger.scope_key([]) == "cluster"


@pytest.mark.parametrize("item", [
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2",  # no newest
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=x",
    "p=gpu:t=1,held=1,total=10,cap=2,newest=1",  # no id
    "p=gpu:id=xyz,t=1,held=1,total=10,cap=2,newest=1",
    "p=gpu:id=0000abcd,t=1,held=11,total=10,cap=2,newest=1",  # more held than nodes
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=20,newest=1",  # a cap above the node count
    "p=gpu:id=0000abcd,t=-1,held=1,total=10,cap=2,newest=1",
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,evil=1",
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,cut=5",
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,cut=5@bad/name",
    "p=gpu:id=0000abcd,t=1,held=1,held=2,total=10,cap=2,newest=1",
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,cut=5@g1",  # a cut under the cap
    "p=gpu:id=0000abcd,t=1,held=3,total=10,cap=2,newest=1,cut=\u00b2@g1",  # a digit Python's int() takes, not ASCII
    "p=gpu:id=0000abcd,t=1,held=3,total=10,cap=2,newest=1",  # over the cap without a cut
    "p=gp;u:t=1,held=1,total=10,cap=2,newest=1",
    "gpu:t=1,held=1,total=10,cap=2,newest=1",
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,pending=g1+g1",  # one node twice
    "p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,pending=g1+bad/name",
    "p=gpu:id=0000abcd,t=1,held=8,total=10,cap=9,newest=1,pending=g1+g2+g3",  # more than the nodes left
])
def test_a_malformed_entry_is_skipped_and_the_rest_kept(item):
    good = entry()
    assert ledger.parse(f"{ledger.PREFIX} {item} {good.render()}") == {"p=gpu": good}


def test_malformed_entries_never_decide():
    text = f"{ledger.PREFIX} p=gpu:id=0000abcd,t=1,held=1,total=10,cap=2,newest=1,cut="
    assert ledger.parse(text) == {}


@pytest.mark.parametrize("comment, foreign", [
    ("", False), ("(null)", False), (ledger.PREFIX, False), ("spare chassis, do not use", True),
])
def test_someone_elses_comment_is_foreign(comment, foreign):
    assert ledger.foreign(comment) is foreign
    assert ledger.parse(comment) == {}


def test_the_ledger_stays_bounded():
    many = [entry(scope=f"p=part{i}", t=T0 + i) for i in range(200)]
    text = ledger.render(many)
    assert len(text) <= ledger.MAX_BYTES
    kept = ledger.parse(text)
    assert 0 < len(kept) <= ledger.MAX_ENTRIES
    assert "p=part199" in kept  # newest first
    assert ledger.parse(ledger.PREFIX + " x" * 5000) == {}


# ---------------------------------------------------------------------------- what a count writes


def test_a_count_writes_the_cut_at_the_cap_and_the_newest_stamp():
    nodes = [held(f"g{i:03d}", T0 + i) for i in range(5)] + [n(f"g{i:03d}") for i in range(5, 20)]
    nodes.append(n("g099", "IDLE+DRAIN", "bad fan", T0 + 30))  # an admin drain: not held, but a stamp
    s = survey(nodes, "g000", BreakerSettings(max_drained=3, max_drained_percent=None))
    e = ledger.snapshot(s.in_scope, s.held, "p=gpu", s.cap, T0 + 40, "0000abcd")
    assert (e.held, e.total, e.cap, e.newest, e.cut, e.claimers) == (5, 21, 3, T0 + 30, (T0 + 2, "g002"), ())
    assert e.open
    # The clock tick read back before the count counts as a stamp the count saw.
    assert ledger.snapshot(s.in_scope, s.held, "p=gpu", s.cap, T0 + 40, "0000abcd", tick=T0 + 41).newest == T0 + 41


def test_no_entry_for_a_zero_cap():
    s = survey([held("a", T0)], "a", BreakerSettings(max_drained=0, max_drained_percent=None))
    assert ledger.snapshot(s.in_scope, s.held, "p=gpu", s.cap, T0, "0000abcd") is None


@settings(max_examples=300, deadline=None)
@given(stamps=st.lists(st.integers(0, 6), min_size=1, max_size=30), cap=st.integers(1, 12),
       pick=st.integers(0, 29), tick=st.integers(0, 8))
def test_a_covering_entry_decides_as_the_nodes_own_recount(stamps, cap, pick, tick):
    """For any held set and any node in it: when the entry covers the node's drain, the ledger's
    verdict (past the cap or not) is the one must_yield gives on the same table."""
    nodes = [held(f"g{i:03d}", T0 + s) for i, s in enumerate(stamps)] + [n("spare")]
    me = nodes[pick % len(stamps)]
    bs = BreakerSettings(max_drained=cap, max_drained_percent=None)
    s = survey(nodes, me.name, bs)
    e = ledger.snapshot(s.in_scope, s.held, "p=gpu", s.cap, T0, "0000abcd", tick=T0 + tick)
    if ledger.covers(e, me.reason_time):
        assert ledger.past_cap(e, me.reason_time, me.name) == s.past_cap(me.name)
    assert ledger.covers(e, T0 + max(max(stamps), tick)) is False  # the newest second never covers


def test_coverage_and_freshness():
    e = entry(newest=T0)
    assert ledger.covers(e, T0 - 1) and not ledger.covers(e, T0) and not ledger.covers(e, None)
    assert ledger.fresh(e, T0 + 30, 30) and not ledger.fresh(e, T0 + 31, 30)
    assert not ledger.fresh(e, T0 - 60, 30)  # written by a clock far ahead of ours
    assert entry(held=8, claimers=("a", "b")).open and not entry(held=8, claimers=("a",)).open


def test_a_claim_counts_only_under_the_cap():
    e = entry(held=8, claimers=("a", "b", "c"))  # cap 10: a and b got places, c raced past
    assert e.within("a") and e.within("b") and not e.within("c") and not e.within("z")
    full = entry(held=0, cap=100, claimers=tuple(f"n{i}" for i in range(ledger.MAX_CLAIMERS)))
    assert ledger.claimed(claims(full), full, "z") is None


def test_the_post_drain_wait_is_spread_apart_from_the_jitter():
    waits = [ledger.wait_for(f"gpu{i:04d}", 2.0) for i in range(1000)]
    assert all(0 <= w < 2.0 for w in waits) and ledger.wait_for("gpu0001", 2.0) == waits[1]
    assert sum(w < 1.0 for w in waits) in range(400, 600)
    assert [ledger.wait_for(f"g{i}", 2.0) for i in range(5)] != [jitter_for(f"g{i}", 2.0) for i in range(5)]
    assert ledger.wait_for("g1", 0) == 0.0


# ---------------------------------------------------------------------------- the actuator


def test_a_fresh_open_entry_opens_the_breaker_without_a_count(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 10)
    sc = LedgerSlurm(table(), ledger.render([entry(total=10, cap=3, held=3)]))
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert state.open and state.source == "ledger" and "scope" not in sc.asked and "write" not in sc.asked


def test_a_fresh_entry_with_room_is_claimed_without_a_count(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 10)
    sc = LedgerSlurm(table(), ledger.render([entry(total=10, cap=3, held=2)]))
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert not state.open and "scope" not in sc.asked
    assert ledger.with_claims(ledger.parse(sc.comment), sc.extra)["p=gpu"].claimers == ("g009",)


def test_a_claim_is_one_write_and_never_a_count(monkeypatch):
    """A place is one write, read back: the node drains on it without counting the table."""
    monkeypatch.setattr("time.time", lambda: T0 + 10)
    e = entry(total=10, cap=3, held=1, claimers=("g007",))
    sc = LedgerSlurm(table(), ledger.render([e]), extra=claims(e))
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert not state.open and state.drained == 2 and sc.asked.count("write") == 1 and "scope" not in sc.asked


def test_without_a_fresh_entry_a_count_under_way_is_waited_for(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 10)
    monkeypatch.setattr("gpuhc.slurm.act.ledger_client.POLL_S", 0.01)
    sc = LedgerSlurm(table())
    sc.stamped = T0 + 9  # another node stamped the record for its count a second ago
    fresh = ledger.render([entry(total=10, cap=3, held=3)])
    reads = iter(["", "", fresh])
    sc.ledger = lambda name: (sc.asked.append("ledger"), (next(reads, fresh), "", sc.stamped, "unknown"))[1]
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert state.open and state.source == "ledger" and "scope" not in sc.asked


def test_after_a_drain_a_count_under_way_is_waited_for_then_given_up(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 100)
    monkeypatch.setattr("gpuhc.slurm.act.ledger_client.POLL_S", 0.01)
    monkeypatch.setattr("gpuhc.slurm.act.ledger_client.PENDING_S", 0.1)
    sc = LedgerSlurm(table(k=1), now=T0 + 50)
    act = Actuator(sc, BS)
    reason = "gpuhc: xid79 gpu0"
    assert act.carry_out("g005", Decision(Act.DRAIN, "x", Memory(), reason))
    sc.stamped = T0 + 52  # a count began after our drain ... and never wrote its entry
    sc.asked.clear()
    state, undone = act.recount("g005", reason, sc.nodes["g005"])
    assert sc.asked.count("ledger") > 3 and "scope" in sc.asked and state.source == "count"


def test_a_claim_raced_past_the_cap_opens_the_breaker(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 10)
    e = entry(total=10, cap=3, held=2, claimers=("g007", "g009"))
    sc = LedgerSlurm(table(), ledger.render([e]), extra=claims(e))
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert state.open and state.source == "ledger" and "write" not in sc.asked


def test_a_stale_entry_means_a_count_with_a_tick_written_back(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 100)
    sc = LedgerSlurm(table(), ledger.render([entry(total=10, cap=3, held=0)]), now=T0 + 99)
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert state.source == "count" and state.drained == 2
    assert sc.asked.index("stamp") < sc.asked.index("scope") < sc.asked.index("write")
    e = ledger.parse(sc.comment)["p=gpu"]
    assert (e.held, e.total, e.newest, e.claimers) == (2, 10, T0 + 99, ())


def test_after_a_drain_a_covering_entry_decides_and_past_the_cap_undoes(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 100)
    nodes = table(k=3)  # g000..g002 held at T0..T0+2; the cap is 3
    sc = LedgerSlurm(nodes, now=T0 + 50)
    act = Actuator(sc, BS)
    reason = "gpuhc: xid79 gpu0"
    assert act.carry_out("g005", Decision(Act.DRAIN, "x", Memory(), reason))
    cover = entry(total=10, cap=3, held=4, newest=T0 + 51, cut=(T0 + 2, "g002"))
    sc.comment = ledger.render([cover])
    sc.asked.clear()
    state, undone = act.recount("g005", reason, sc.nodes["g005"])
    assert undone and state.source == "ledger" and "scope" not in sc.asked
    assert not sc.nodes["g005"].drained


def test_after_a_drain_without_a_covering_entry_the_node_counts(monkeypatch):
    monkeypatch.setattr("time.time", lambda: T0 + 100)
    sc = LedgerSlurm(table(k=1), now=T0 + 50)
    act = Actuator(sc, BS)
    reason = "gpuhc: xid79 gpu0"
    assert act.carry_out("g005", Decision(Act.DRAIN, "x", Memory(), reason))
    sc.comment = ledger.render([entry(total=10, cap=3, held=2, newest=T0 + 50)])  # saw no later second
    state, undone = act.recount("g005", reason, sc.nodes["g005"])
    assert not undone and state.source == "count" and "scope" in sc.asked


def test_a_foreign_comment_is_never_overwritten_and_the_node_counts(monkeypatch, capsys):
    said = []
    sc = LedgerSlurm(table(), "spare chassis, do not use")
    state = Actuator(sc, BS, log=lambda m, **k: said.append(m)).count("g009", sc.nodes["g009"])
    assert state.source == "count" and sc.comment == "spare chassis, do not use" and "write" not in sc.asked
    assert len(said) == 1 and "not gpuhc's" in said[0]


def test_a_foreign_extra_field_is_left_alone_too():
    sc = LedgerSlurm(table(), ledger.render([entry(total=10, cap=3, held=2)]), extra="rack=12")
    state = Actuator(sc, BS).count("g009", sc.nodes["g009"])
    assert state.source == "count" and sc.extra == "rack=12" and "write" not in sc.asked


def test_an_unreadable_ledger_means_counting_said_once():
    said = []
    sc = LedgerSlurm(table())
    sc.broken = True
    state = Actuator(sc, BS, log=lambda m, **k: said.append(m)).count("g009", sc.nodes["g009"])
    assert state.source == "count" and "write" not in sc.asked and len(said) == 1


@pytest.mark.parametrize("state, ok", [
    ("down+drain+not_responding", True), ("unknown", True), ("idle+drain", True), ("down*", True),
    ("idle", False), ("allocated", False), ("mixed+completing", False),
])
def test_a_ledger_node_in_service_is_refused_never_stamped(state, ok):
    assert ledger.out_of_service(state) is ok
    sc = LedgerSlurm(table())
    sc.state = state
    said = []
    Actuator(sc, BS, log=lambda m, **k: said.append(m)).count("g009", sc.nodes["g009"])
    assert ("stamp" in sc.asked) is ok
    assert ok or ("in service" in said[0] and "write" not in sc.asked)


def test_without_a_ledger_node_nothing_changes():
    sc = LedgerSlurm(table())
    state = Actuator(sc, BreakerSettings(max_drained=3, max_drained_percent=None)).count("g009", sc.nodes["g009"])
    assert state.source == "count" and sc.asked == ["scope"]
