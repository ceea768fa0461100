"""Localizing a bad node (or link) from failing groups: isolate, bisect, confirm, never guess.

The rules (gpuhc/sweep/localize.py): a failure counts against a node only when every other
member of that group is cleared (passed somewhere); a node is named after 3 such failures in at
least 2 different member sets; a set whose members are all cleared is re-run until it failed 3
times (a link) or passed once (a transient)."""

from __future__ import annotations

from gpuhc.sweep.localize import Outcome, assess, next_round
from gpuhc.sweep.plan import Group


def out(gid, nodes, status, rnd=0, evidence="slow"):
    return Outcome(Group(gid, list(nodes), rnd, "probe", "", 8), status, evidence if status == "fail" else "")


ROUND0 = [out("r0g0", "ab", "fail"), out("r0g1", "cd", "pass"), out("r0g2", "ef", "pass"), out("r0g3", "gh", "pass")]


def plan_of(plan):
    return [(g.nodes, g.purpose, g.suspects) for g in plan.groups]


def test_one_failing_pair_gets_two_isolates_per_member_with_distinct_known_good_helpers():
    f = assess(ROUND0)
    assert f.suspects == ["a", "b"] and not f.culprits
    plan = next_round(ROUND0, f, 1, helpers="abcdefgh")
    assert plan_of(plan) == [(["a", "c"], "isolate", ["a"]), (["a", "d"], "isolate", ["a"]),
                             (["b", "e"], "isolate", ["b"]), (["b", "f"], "isolate", ["b"])]
    assert all(g.round == 1 and g.shape == "2x8" for g in plan.groups)
    assert [g.id for g in plan.groups] == ["r1g0000", "r1g0001", "r1g0002", "r1g0003"]


def test_bad_node_is_named_after_one_follow_up_round_and_its_partner_cleared():
    outs = ROUND0 + [out("r1g0", "ac", "fail", 1, "busbw 100 GB/s < 350 at 2 GiB"), out("r1g1", "ad", "fail", 1),
                     out("r1g2", "be", "pass", 1), out("r1g3", "bf", "pass", 1)]
    f = assess(outs)
    # a failed with b (cleared now), c and d: 3 failures in 3 sets.
    assert [(c.kind, c.nodes, c.group) for c in f.culprits] == [("node", ["a"], "r1g0")]
    assert f.suspects == [] and not f.to_confirm and "b" in f.cleared


def test_one_isolated_failure_is_not_enough_to_name_a_node():
    """The reviewer's case: a's first group failed, one isolate failed (a transient), the
    other passed: a is cleared, and the two failing sets are re-run, not blamed on a."""
    outs = ROUND0 + [out("r1g0", "ac", "fail", 1), out("r1g1", "ad", "pass", 1), out("r1g2", "be", "pass", 1),
                     out("r1g3", "bf", "pass", 1)]
    f = assess(outs)
    assert not f.culprits and f.suspects == []
    assert sorted(g.nodes for g in f.to_confirm) == [["a", "b"], ["a", "c"]]
    plan = next_round(outs, f, 2, helpers="abcdefgh")
    # Each confirm set failed once: re-run twice (3 runs in all) so that one transient in the
    # re-runs cannot turn into a link culprit either.
    assert sorted((g.nodes, g.purpose) for g in plan.groups) == [(["a", "b"], "confirm")] * 2 + [(["a", "c"], "confirm")] * 2
    done = outs + [Outcome(g, "pass") for g in plan.groups]
    f = assess(done)
    assert not f.culprits and sorted(f.transient) == ["r0g0", "r1g0"]


def test_a_failure_explained_by_a_bad_mate_never_counts_against_the_good_one():
    """g shares its first group with the bad node x; x never passes, so that failure is x's.
    A transient in one of g's isolates leaves g with one failure of its own: not named."""
    outs = [out("r0g0", "xg", "fail"), out("r0g1", "cd", "pass"), out("r0g2", "ef", "pass"), out("r0g3", "hi", "pass"),
            out("r1g0", "xc", "fail", 1), out("r1g1", "xd", "fail", 1), out("r1g2", "ge", "fail", 1),
            out("r1g3", "gf", "fail", 1)]
    f = assess(outs)
    # Neither x nor g has anything but sets shared with the other suspect: both still suspects.
    assert not f.culprits and f.suspects == ["x", "g"]
    assert [len(f.evidence[n]) for n in ("x", "g")] == [2, 2]
    plan = next_round(outs, f, 2, helpers="cdefhi")
    assert sorted(g.nodes for g in plan.groups) == [["g", "e"], ["g", "f"], ["x", "c"], ["x", "d"]]
    assert all(g.purpose == "confirm" for g in plan.groups)
    res = {"x": "fail", "g": "pass"}
    done = outs + [Outcome(g, res[g.nodes[0]], "slow") for g in plan.groups]
    f = assess(done)
    assert [c.nodes for c in f.culprits] == [["x"]] and "g" in f.cleared


def test_two_bad_nodes_in_one_group_are_both_named():
    outs = ROUND0 + [out("r1g0", "ac", "fail", 1), out("r1g1", "ad", "fail", 1), out("r1g2", "be", "fail", 1),
                     out("r1g3", "bf", "fail", 1)]
    f = assess(outs)
    assert not f.culprits  # 2 failures each of their own so far; their shared group counts for neither
    plan = next_round(outs, f, 2, helpers="cdefgh")
    done = outs + [Outcome(g, "fail", "slow") for g in plan.groups]
    assert sorted(c.nodes[0] for c in assess(done).culprits) == ["a", "b"]


def test_a_single_failure_never_accuses_anyone():
    f = assess([out("r0g0", "ab", "fail"), out("r1g0", "ac", "error", 1), out("r1g1", "bd", "pass", 1),
                out("r0g1", "cd", "pass")])
    assert not f.culprits and f.suspects == ["a"]  # a's isolation errored: test again


def test_failure_that_no_member_explains_is_confirmed_then_named_as_a_link():
    outs = ROUND0 + [out("r1g0", "ac", "pass", 1), out("r1g1", "ad", "pass", 1), out("r1g2", "be", "pass", 1),
                     out("r1g3", "bf", "pass", 1)]
    f = assess(outs)
    assert not f.culprits and [g.nodes for g in f.to_confirm] == [["a", "b"]]
    plan = next_round(outs, f, 2, helpers="abcdefgh")
    assert [(g.nodes, g.purpose) for g in plan.groups] == [(["a", "b"], "confirm")] * 2
    again = assess(outs + [out("r2g0", "ab", "fail", 2), out("r2g1", "ab", "fail", 2)])
    assert [(c.kind, c.nodes) for c in again.culprits] == [("link", ["a", "b"])]
    transient = assess(outs + [out("r2g0", "ab", "fail", 2), out("r2g1", "ab", "pass", 2)])
    assert not transient.culprits and sorted(transient.transient) == ["r0g0", "r2g0"] and not transient.to_confirm


def test_bisect_halves_a_big_group_when_helpers_are_short():
    outs = [out("r0g0", "abcd", "fail"), out("r0g1", "efgh", "pass")]
    f = assess(outs)
    # Isolating 4 suspects twice needs 24 helper places; 4 helpers serve at most 2 jobs each: bisect.
    plan = next_round(outs, f, 1, helpers="efgh")
    assert [(g.nodes, g.purpose) for g in plan.groups] == [(["a", "b", "e", "f"], "bisect"), (["c", "d", "g", "h"], "bisect")]
    outs += [Outcome(plan.groups[0], "pass"), Outcome(plan.groups[1], "fail", "slow")]
    f = assess(outs)
    assert f.suspects == ["c", "d"]
    plan = next_round(outs, f, 2, helpers="abefgh", strategy="bisect")
    assert [g.suspects for g in plan.groups] == [["c"], ["c"], ["d"], ["d"]] and all(len(g.nodes) == 4 for g in plan.groups)
    outs += [Outcome(g, "fail" if g.suspects == ["d"] else "pass", "slow") for g in plan.groups]
    # d: its first group and its bisect half (their other members now cleared) and two isolates.
    assert [c.nodes for c in assess(outs).culprits] == [["d"]]


def test_no_helpers_defers_instead_of_testing_suspects_with_each_other():
    outs = [out("r0g0", "ab", "fail")]
    plan = next_round(outs, assess(outs), 1, helpers="ab")
    assert plan.groups == [] and plan.deferred == ["a", "b"]


def test_short_of_helpers_each_serves_two_jobs_before_bisecting():
    outs = [out("r0g0", "ab", "fail"), out("r0g1", "cd", "pass")]
    plan = next_round(outs, assess(outs), 1, helpers="abcd")
    assert plan_of(plan) == [(["a", "c"], "isolate", ["a"]), (["a", "d"], "isolate", ["a"]),
                             (["b", "c"], "isolate", ["b"]), (["b", "d"], "isolate", ["b"])]


def test_helpers_come_from_the_suspects_leaf_switch():
    leaf = {"a": "L1", "b": "L1", "c": "L2", "d": "L2", "e": "L1", "f": "L1", "g": "L1", "h": "L1"}
    outs = [Outcome(Group("r0g0", ["a", "b"], 0, "probe", "leaf", 8), "fail", "slow"), out("r0g1", "cd", "pass"),
            out("r0g2", "ef", "pass"), out("r0g3", "gh", "pass")]
    plan = next_round(outs, assess(outs), 1, helpers="cdefgh", leaf_of=leaf)
    assert [g.nodes for g in plan.groups] == [["a", "e"], ["a", "f"], ["b", "g"], ["b", "h"]]
    assert all(g.span == "leaf" for g in plan.groups)
    plan = next_round(outs, assess(outs), 1, helpers="cd", leaf_of=leaf)
    assert [g.span for g in plan.groups] == ["cross"] * 4
