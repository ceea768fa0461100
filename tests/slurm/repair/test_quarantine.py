"""Quarantine lifecycle: retest plans, listing, admin release/retire/reboot (scontrol injected)."""

from __future__ import annotations

import pytest

from gpuhc.slurm.read.nodes import Node, parse_state
from gpuhc.slurm.policy.drain import Verdict
from gpuhc.slurm.act.actuator import Actuator
from gpuhc.slurm.repair.admin import reboot_for_retest, release, retire
from gpuhc.slurm.repair.quarantine import listing, phase, plan_retest, returned_before_retest
from gpuhc.slurm.act.scontrol import Scontrol
from tests.helpers.minislurm import MiniSlurm

EVID = "gpuhc: xid79 gpu3"


def node(raw="IDLE+DRAIN", reason=EVID, name="n1"):
    base, flags = parse_state(raw)
    return Node(name, base, flags, reason, "root" if reason else None, 1.7e9 if reason else None, ("gpu",), raw)


@pytest.mark.parametrize("reason,want", [
    (EVID, "drained"), (EVID + " [q2]", "quarantine"), ("gpuhc: RETIRED xid79 gpu3", "retired"),
    ("bad fan", None), (None, None),
])
def test_phase(reason, want):
    assert phase(node(reason=reason)) == want


def test_phase_needs_the_node_out_of_service():
    assert phase(node("IDLE", EVID)) is None


@pytest.mark.parametrize("reason,verdict,act,new", [
    (EVID, Verdict.PASS, "resume", None),
    (EVID + " [q2]", Verdict.WARN, "resume", None),
    (EVID, Verdict.FAIL, "requarantine", EVID + " [q1]"),
    (EVID + " [q1]", Verdict.FAIL, "requarantine", EVID + " [q2]"),
    (EVID + " [q2]", Verdict.FAIL, "retire", "gpuhc: RETIRED xid79 gpu3"),
    (EVID + " [q1]", Verdict.ERROR, "none", None),
    ("gpuhc: RETIRED xid79 gpu3", Verdict.PASS, "none", None),
    ("gpuhc: RETIRED xid79 gpu3", Verdict.FAIL, "none", None),
    ("bad fan", Verdict.PASS, "none", None),
    ("bad fan", Verdict.FAIL, "none", None),
])
def test_retest_plan(reason, verdict, act, new):
    plan = plan_retest(node(reason=reason), verdict, "gpuhc: pcie gpu1 x8" if verdict is Verdict.FAIL else None, 3)
    assert (plan.act, plan.reason) == (act, new), plan.why


def test_retest_keeps_the_original_evidence_not_the_new_one():
    plan = plan_retest(node(reason=EVID), Verdict.FAIL, "gpuhc: pcie gpu1 x8", 3)
    assert plan.reason == EVID + " [q1]" and "failed retest 1 of 3" in plan.why


REBOOTED = EVID + " [reboot] : reboot issued : reboot complete"


def test_a_node_slurm_returned_to_service_after_its_reboot_is_still_retested():
    """Slurm 24.11 (ReturnToService=1, once in CI; always with ReturnToService=2) can put a node
    gpuhc rebooted back in service before the boot-time retest: the retest still decides."""
    early = node("IDLE", REBOOTED)
    assert returned_before_retest(early) and phase(early) is None
    fail = plan_retest(early, Verdict.FAIL, "gpuhc: pcie gpu1 x8", 3)
    assert (fail.act, fail.reason) == ("requarantine", EVID + " [q1]"), fail.why
    ok = plan_retest(early, Verdict.PASS, None, 3)
    assert ok.act == "none" and "already returned the node to service" in ok.why
    # Not that: in service with gpuhc's reason but no reboot (24.11 keeps a resumed node's
    # reason), a retired node, someone else's reason, a node still held.
    for other in (node("IDLE", EVID), node("IDLE", "gpuhc: RETIRED xid79 gpu3 : reboot complete"),
                  node("IDLE", "bad fan : reboot complete"), node("DOWN", REBOOTED)):
        assert not returned_before_retest(other)
    assert plan_retest(node("IDLE", EVID), Verdict.FAIL, "gpuhc: pcie gpu1 x8", 3).act == "none"


def test_a_node_slurm_returned_with_no_reason_is_retested_when_it_asked_for_its_reboot():
    """Slurm 26.05 (ReturnToService=2, once in CI) returned a node the ladder rebooted with no
    reason at all: the node's memory of the reboot it asked for (``asked``) still holds it."""
    bare = node("IDLE", None)
    assert returned_before_retest(bare, EVID + " [reboot]") and not returned_before_retest(bare)
    fail = plan_retest(bare, Verdict.FAIL, "gpuhc: pcie gpu1 x8", 3, asked=EVID + " [reboot]")
    assert (fail.act, fail.reason) == ("requarantine", EVID + " [q1]"), fail.why
    ok = plan_retest(bare, Verdict.PASS, None, 3, asked=EVID + " [reboot]")
    assert ok.act == "none" and "already returned the node to service" in ok.why
    # Not that: no memory, a retired memory, someone else's reason, a node still out of service.
    assert plan_retest(bare, Verdict.FAIL, "gpuhc: pcie gpu1 x8", 3).act == "none"
    assert not returned_before_retest(bare, "gpuhc: RETIRED xid79 gpu3")
    assert not returned_before_retest(node("IDLE", "bad fan"), EVID + " [reboot]")
    assert not returned_before_retest(node("DOWN", None), EVID + " [reboot]")


def test_retest_of_an_unregistered_node_does_not_resume():
    assert plan_retest(node("UNKNOWN+DRAIN"), Verdict.PASS, None, 3).act == "none"


def test_cycle_count_retires_after_max_cycles():
    reason, cycles = EVID, 0
    while True:
        plan = plan_retest(node(reason=reason), Verdict.FAIL, EVID, 3)
        cycles += 1
        if plan.act == "retire":
            break
        reason = plan.reason
    assert cycles == 3 and plan.reason.startswith("gpuhc: RETIRED ")


def test_listing_shows_only_gpuhc_holds_sorted():
    nodes = [node(name="n3", reason=EVID + " [q1]"), node(name="n1"), node(name="n2", reason="bad fan"),
             node("IDLE", None, "n4"), node("DOWN+DRAIN", "gpuhc: RETIRED x", "n0")]
    rows = listing(nodes)
    assert [(r.node, r.phase, r.cycle) for r in rows] == [("n0", "retired", 0), ("n1", "drained", 0), ("n3", "quarantine", 1)]
    assert rows[0].to_dict()["state"] == "DOWN+DRAIN"


def test_release_resumes_gpuhc_holds_including_retired_and_refuses_others():
    s = MiniSlurm({"n1": ("IDLE+DRAIN", "gpuhc: RETIRED xid"), "n2": ("IDLE+DRAIN", "bad fan"), "n3": ("IDLE", None)})
    res = release(Actuator(Scontrol(run=s)), ["n1", "n2", "n3"])
    assert [(r.node, r.ok) for r in res] == [("n1", True), ("n2", False), ("n3", True)]
    assert s.nodes["n1"] == ["IDLE", None] and s.nodes["n2"] == ["IDLE+DRAIN", "bad fan"]
    assert "--force" in res[1].message and "nothing to release" in res[2].message
    res = release(Actuator(Scontrol(run=s)), ["n2"], force=True)
    assert res[0].ok and s.nodes["n2"] == ["IDLE", None]


def test_retire_keeps_evidence_or_takes_a_note_and_respects_foreign_reasons():
    s = MiniSlurm({"n1": ("IDLE+DRAIN", EVID + " [q1]"), "n2": ("IDLE+DRAIN", "bad fan"), "n3": ("IDLE", None)})
    res = retire(Actuator(Scontrol(run=s)), ["n1", "n2", "n3"])
    assert [r.ok for r in res] == [True, False, True]
    assert s.nodes["n1"] == ["IDLE+DRAIN", "gpuhc: RETIRED xid79 gpu3"]
    assert s.nodes["n3"] == ["IDLE+DRAIN", "gpuhc: RETIRED retired by admin"]
    assert retire(Actuator(Scontrol(run=s)), ["n1"])[0].message == "already retired"
    retire(Actuator(Scontrol(run=s)), ["n2"], note="fan replaced twice", force=True)
    assert s.nodes["n2"][1] == "gpuhc: RETIRED fan replaced twice"


def test_reboot_keeps_the_gpuhc_reason_and_skips_what_is_not_ours():
    s = MiniSlurm({"n1": ("IDLE+DRAIN", EVID + " [q1]"), "n2": ("IDLE+DRAIN", "bad fan")})
    calls = []

    def run(argv, timeout):
        if argv[1] == "reboot":
            calls.append(argv)
            return 0, "", ""
        return s(argv, timeout)

    res = reboot_for_retest(Actuator(Scontrol(run=run)), ["n1", "n2"], "DOWN")
    assert [r.ok for r in res] == [True, False]
    assert calls == [["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={EVID} [q1]", "n1"]]


def test_release_reports_slurm_errors_per_node():
    s = MiniSlurm({"n1": ("IDLE+DRAIN", EVID)}, fail={"show": (1, "", "Unable to contact slurm controller")})
    res = release(Actuator(Scontrol(run=s)), ["n1"])
    assert not res[0].ok and "Unable to contact" in res[0].message
