"""A node drained by the release before the reason led with check, code and GPU (``gpuhc: xid
Xid 79 on gpu3 ...``, docs/slurm.md "The drain reason") keeps that reason across the upgrade; the
new release must still treat it as its own in every place a reason is read: the health check
resumes it, a failed retest cycles and retires it, the breaker counts it, drain-report, fleet
stats and the lemon record give its check, and the rejudging names it (issue 50, point 7)."""

from __future__ import annotations

from gpuhc.fleet.history import classify_reason
from gpuhc.slurm.act.actuator import Actuator
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.slurm.policy import breaker
from gpuhc.slurm.policy.drain import Act, Verdict, rejudge
from gpuhc.slurm.policy.reason import build_reason, parse_reason
from gpuhc.slurm.read.nodes import Node, parse_state
from gpuhc.slurm.repair.admin import release
from gpuhc.slurm.repair.lemons import fault_of
from gpuhc.slurm.repair.quarantine import listing, plan_retest
from gpuhc.slurm.report.build import classify
from gpuhc.state.node import StateStore
from tests.helpers.minislurm import OK, XID, MiniSlurm, memory, run

# What the previous release wrote for the real xid check's "fallen off the bus" (its message,
# gpuhc/checks/xid.py, put after "xid"): the shape of the reasons on nodes drained before an upgrade.
OLD = "gpuhc: xid Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus"


def node(reason: str, raw: str = "IDLE+DRAIN", name: str = "n1") -> Node:
    base, flags = parse_state(raw)
    return Node(name, base, flags, reason, "root", 1_700_000_000.0, ("gpu",), raw)


def test_the_new_release_writes_the_new_shape_for_the_same_failure():
    new = build_reason([XID])
    assert new == "gpuhc: xid79 gpu3 GPU has fallen off the bus" and new != OLD


def drained_by_the_old_release(tmp_path, monkeypatch) -> MiniSlurm:
    """Slurm's reason and the node's state directory as the old release left them: its drain,
    remembered with the reason it wrote."""
    s = MiniSlurm({"n1": ("IDLE", None)})
    assert run(tmp_path, monkeypatch, "passive", s, [XID]).decision.act is Act.DRAIN
    s.nodes["n1"][1] = OLD
    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc["slurm"]["nodes"]["n1"]["reason"] = OLD
    assert memory(tmp_path)["reason"] == OLD
    return s


def test_the_health_check_resumes_a_node_the_old_release_drained(tmp_path, monkeypatch):
    s = drained_by_the_old_release(tmp_path, monkeypatch)
    acts = [run(tmp_path, monkeypatch, "passive", s, [OK]).decision.act for _ in range(3)]
    assert acts == [Act.WAIT, Act.WAIT, Act.RESUME] and s.nodes["n1"] == ["IDLE", None], (acts, s.nodes)


def test_a_failing_run_keeps_the_old_reason_as_written(tmp_path, monkeypatch):
    s = drained_by_the_old_release(tmp_path, monkeypatch)
    s.calls.clear()
    out = run(tmp_path, monkeypatch, "passive", s, [XID])
    assert out.decision.act is Act.KEEP and s.updates() == [] and s.nodes["n1"][1] == OLD
    assert out.decision.why.startswith("already drained by gpuhc"), out.decision.why  # not another's reason


def test_retest_cycles_then_retires_an_old_reason():
    plan = plan_retest(node(OLD), Verdict.FAIL, build_reason([XID]), 3)
    assert (plan.act, plan.reason) == ("requarantine", f"{OLD} [q1]")
    plan = plan_retest(node(f"{OLD} [q2] : reboot complete"), Verdict.FAIL, build_reason([XID]), 3)
    assert (plan.act, plan.reason) == ("retire", f"gpuhc: RETIRED {OLD[len('gpuhc: '):]}")
    assert plan_retest(node(f"{OLD} [q1]"), Verdict.PASS, None, 3).act == "resume"
    assert [(r.phase, r.cycle) for r in listing([node(f"{OLD} [q2]")])] == [("quarantine", 2)]


def test_release_and_the_breaker_treat_it_as_gpuhcs():
    s = MiniSlurm({"n1": ("IDLE+DRAIN", OLD)})
    (res,) = release(Actuator(Scontrol(run=s)), ["n1"])
    assert res.ok and s.nodes["n1"] == ["IDLE", None]
    assert breaker.held_by_gpuhc(node(OLD)) and breaker.counted(node(OLD))
    assert breaker.retired(node(f"gpuhc: RETIRED {OLD[len('gpuhc: '):]}"))


def test_every_reader_gives_its_check():
    assert classify(node(OLD)) == ("xid", "gpuhc")  # drain-report's cause
    assert classify_reason(OLD, "IDLE+DRAIN") == ("xid", "gpuhc", False)  # fleet stats
    assert rejudge(node(OLD)) == ("xid",)
    assert fault_of([XID], None, "n1", OLD, 0.0).check == "xid"  # the lemon record
    assert parse_reason(OLD).check == parse_reason(build_reason([XID])).check == "xid"
