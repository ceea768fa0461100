"""Localizing a bad node (or link) from failing groups: isolate, bisect, confirm, never guess."""

from __future__ import annotations

from gpuhc.sweep.localize import Outcome, assess, next_round
from gpuhc.sweep.plan import Group


def out(gid, nodes, status, rnd=0, evidence="slow"):
    return Outcome(Group(gid, list(nodes), rnd, "probe", "", 8), status, evidence if status == "fail" else "")


ROUND0 = [out("r0g0", "ab", "fail"), out("r0g1", "cd", "pass"), out("r0g2", "ef", "pass"), out("r0g3", "gh", "pass")]


def test_one_failing_pair_is_tested_member_by_member_with_known_good_helpers():
    f = assess(ROUND0)
    assert f.suspects == ["a", "b"] and not f.culprits
    plan = next_round(ROUND0, f, 1, helpers="abcdefgh")
    assert [(g.nodes, g.purpose, g.suspects) for g in plan.groups] == [
        (["a", "c"], "isolate", ["a"]), (["b", "d"], "isolate", ["b"])]
    assert all(g.round == 1 and g.shape == "2x8" for g in plan.groups)


def test_isolated_second_failure_names_the_node_and_clears_its_partner():
    outs = ROUND0 + [out("r1g0", "ac", "fail", 1, "busbw 100 GB/s < 350 at 2 GiB"), out("r1g1", "bd", "pass", 1)]
    f = assess(outs)
    assert [(c.kind, c.nodes, c.evidence, c.group) for c in f.culprits] == [
        ("node", ["a"], "busbw 100 GB/s < 350 at 2 GiB", "r1g0")]
    assert f.suspects == [] and not f.to_confirm and "b" in f.cleared


def test_two_bad_nodes_in_one_group_are_both_named():
    outs = ROUND0 + [out("r1g0", "ac", "fail", 1), out("r1g1", "bd", "fail", 1)]
    assert sorted(c.nodes[0] for c in assess(outs).culprits) == ["a", "b"]


def test_a_single_failure_never_accuses_anyone():
    f = assess([out("r0g0", "ab", "fail"), out("r1g0", "ac", "error", 1), out("r1g1", "bd", "pass", 1),
                out("r0g1", "cd", "pass")])
    assert not f.culprits and f.suspects == ["a"]  # a's isolation errored: test again


def test_failure_that_no_member_explains_is_confirmed_then_named_as_a_link():
    outs = ROUND0 + [out("r1g0", "ac", "pass", 1), out("r1g1", "bd", "pass", 1)]
    f = assess(outs)
    assert not f.culprits and [g.nodes for g in f.to_confirm] == [["a", "b"]]
    plan = next_round(outs, f, 2, helpers="abcdefgh")
    assert [(g.nodes, g.purpose) for g in plan.groups] == [(["a", "b"], "confirm")]
    again = assess(outs + [out("r2g0", "ab", "fail", 2)])
    assert [(c.kind, c.nodes) for c in again.culprits] == [("link", ["a", "b"])]
    transient = assess(outs + [out("r2g0", "ab", "pass", 2)])
    assert not transient.culprits and transient.transient == ["r0g0"] and not transient.to_confirm


def test_bisect_halves_a_big_group_when_helpers_are_short():
    outs = [out("r0g0", "abcd", "fail"), out("r0g1", "efgh", "pass")]
    f = assess(outs)
    # Isolating 4 suspects needs 12 helpers; 4 are known good: bisect into halves + 2 helpers each.
    plan = next_round(outs, f, 1, helpers="efgh")
    assert [(g.nodes, g.purpose) for g in plan.groups] == [(["a", "b", "e", "f"], "bisect"), (["c", "d", "g", "h"], "bisect")]
    outs += [Outcome(plan.groups[0], "pass"), Outcome(plan.groups[1], "fail", "slow")]
    f = assess(outs)
    assert f.suspects == ["c", "d"]
    plan = next_round(outs, f, 2, helpers="abefgh", strategy="bisect")
    assert [g.suspects for g in plan.groups] == [["c"], ["d"]] and all(len(g.nodes) == 4 for g in plan.groups)
    outs += [Outcome(plan.groups[0], "pass"), Outcome(plan.groups[1], "fail", "slow")]
    assert [c.nodes for c in assess(outs).culprits] == [["d"]]


def test_no_helpers_defers_instead_of_testing_suspects_with_each_other():
    outs = [out("r0g0", "ab", "fail")]
    plan = next_round(outs, assess(outs), 1, helpers="ab")
    assert plan.groups == [] and plan.deferred == ["a", "b"]


def test_helpers_come_from_the_suspects_leaf_switch():
    leaf = {"a": "L1", "b": "L1", "c": "L2", "d": "L2", "e": "L1", "f": "L1"}
    outs = [Outcome(Group("r0g0", ["a", "b"], 0, "probe", "leaf", 8), "fail", "slow"), out("r0g1", "cd", "pass"),
            out("r0g2", "ef", "pass")]
    plan = next_round(outs, assess(outs), 1, helpers="cdef", leaf_of=leaf)
    assert [g.nodes for g in plan.groups] == [["a", "e"], ["b", "f"]]
    assert all(g.span == "leaf" for g in plan.groups)
    plan = next_round(outs, assess(outs), 1, helpers="cd", leaf_of=leaf)
    assert [g.span for g in plan.groups] == ["cross", "cross"]
