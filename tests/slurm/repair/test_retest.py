"""The admin's retests as flows (gpuhc/slurm/repair/retest.py), with the scontrol runner injected as in
test_policy_entry.py: the boot-time retest resumes a node that passes (and remembers gpuhc's
resume), re-quarantines one that fails; release --retest resumes only on a pass. Real Slurm:
tests/test_quarantine_reboot.py and the campaign's tests/test_campaign_slurm.py."""

from __future__ import annotations

from tests.helpers.hooks import _events, recorder  # noqa: F401 - the recording hook fixture
from tests.helpers.minislurm import OK, OUR_REASON, XID, MiniSlurm, config, flow

from gpuhc.slurm.flows.memory import load_memory, save_memory
from gpuhc.slurm.policy.drain import Memory
from gpuhc.slurm.repair.retest import release_after_retest, retest
from gpuhc.state.node import StateStore


def _bootstrap(tmp_path, monkeypatch, slurm, results, hook=None, **kw):
    cfg = config(tmp_path)
    if hook:
        cfg.data["hooks"] = {"commands": [[hook]], "events": ["resume", "retire", "drain"], "timeout_s": 5.0}
    _, f = flow(tmp_path, monkeypatch, "bootstrap", slurm, results, cfg=cfg, **kw)
    return f


def test_a_passing_retest_resumes_remembers_and_fires_once(tmp_path, monkeypatch, recorder):  # noqa: F811
    hook, got = recorder
    slurm = MiniSlurm({"n1": ("IDLE+DRAIN", OUR_REASON)})
    f = _bootstrap(tmp_path, monkeypatch, slurm, [OK], hook)
    save_memory(f, Memory(drained_at=1.0, reason=OUR_REASON, flaps=2), None)
    with StateStore(f.opts.state_dir).transaction() as doc:
        doc["checks"] = {"xid": {"held": [{"subject": "gpu3", "code": 79}]}}
    out = retest(f)
    assert (out.code, out.act) == (0, "resume") and slurm.nodes["n1"] == ["IDLE", None]
    m = load_memory(f)  # gpuhc's resume: the hold gone, the flaps kept, the resume's time noted
    assert m.flaps == 2 and m.last_resume is not None and not m.holding and m.drained_at is None
    assert StateStore(f.opts.state_dir).read()["checks"]["xid"]["held"] == []  # the retest acknowledged
    assert [(e["event"], e["node"], e["retest"]) for e in _events(got)] == [("resume", "n1", "pass")]


def test_a_failing_retest_requarantines_and_a_node_not_held_is_left_alone(tmp_path, monkeypatch):
    slurm = MiniSlurm({"n1": ("IDLE+DRAIN", OUR_REASON)})
    out = retest(_bootstrap(tmp_path, monkeypatch, slurm, [XID]))
    assert (out.code, out.act) == (1, "requarantine") and slurm.nodes["n1"][1].endswith("[q1]")
    free = MiniSlurm({"n1": ("IDLE", None)})
    assert retest(_bootstrap(tmp_path, monkeypatch, free, [XID])).act == "none" and free.updates() == []


def _asked_reboot(f, deadline, ladder_reason=None):
    from gpuhc.slurm.repair.ladder import REBOOT, LadderMemory
    from gpuhc.slurm.flows.memory import save_ladder

    save_memory(f, Memory(drained_at=1.0, reason=OUR_REASON + " [reboot]"), None)
    save_ladder(f, LadderMemory(step=REBOOT, since=0.0, deadline=deadline, reason=ladder_reason))


def test_a_bare_return_keeps_the_quarantine_cycle_the_ladder_rebooted_in(tmp_path, monkeypatch):
    """The second cycle's reboot, Slurm's reason cleared (26.05, CI): the retest counts cycle 2
    from the ladder's memory of the reason it wrote ([q1] [reboot]) and retires at max_cycles,
    not cycle 1 again from the first drain's reason."""
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    f = _bootstrap(tmp_path, monkeypatch, slurm, [XID])
    f.slurm["quarantine"]["max_cycles"] = 2
    _asked_reboot(f, f.now() + 600, ladder_reason=OUR_REASON + " [q1] [reboot]")
    out = retest(f)
    assert out.act == "retire" and slurm.nodes["n1"][1].startswith("gpuhc: RETIRED"), slurm.nodes


def test_a_node_slurm_returned_bare_is_retested_from_its_own_memory(tmp_path, monkeypatch, recorder):  # noqa: F811
    """Slurm cleared the reason of a node its ladder rebooted (26.05, ReturnToService=2): the
    boot-time retest still runs; a failure holds the node again, a pass ends the episode."""
    hook, got = recorder
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    f = _bootstrap(tmp_path, monkeypatch, slurm, [XID], hook)
    _asked_reboot(f, f.now() + 600)
    out = retest(f)
    assert (out.code, out.act) == (1, "requarantine") and slurm.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON + " [q1]"]
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    f = _bootstrap(tmp_path, monkeypatch, slurm, [OK], hook)
    _asked_reboot(f, f.now() + 600)
    out = retest(f)
    assert out.act == "none" and slurm.updates() == [] and not load_memory(f).holding
    assert [e["event"] for e in _events(got)] == ["resume"]
    # The ladder's deadline passed (or it never asked): nothing to retest, as before.
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    f = _bootstrap(tmp_path, monkeypatch, slurm, [XID])
    _asked_reboot(f, f.now() - 1)
    assert retest(f).act == "none" and slurm.updates() == []


def test_release_after_retest_resumes_only_on_a_pass(tmp_path, monkeypatch):
    slurm = MiniSlurm({"n1": ("IDLE+DRAIN", OUR_REASON)})
    results, least = release_after_retest(_bootstrap(tmp_path, monkeypatch, slurm, [XID]), force=False)
    assert least == 0 and [r.ok for r in results] == [False] and "not released" in results[0].message
    assert slurm.updates() == []
    results, least = release_after_retest(_bootstrap(tmp_path, monkeypatch, slurm, [OK]), force=False)
    assert least == 0 and [r.ok for r in results] == [True] and slurm.nodes["n1"] == ["IDLE", None]


def test_a_failed_retest_in_a_job_drains_again(tmp_path, monkeypatch):
    """In a job on a node an admin put in service behind a reservation: back out, through the
    actuator, with gpuhc's reason."""
    slurm = MiniSlurm({"n1": ("MIXED", None)})
    f = _bootstrap(tmp_path, monkeypatch, slurm, [XID], env={"SLURM_JOB_ID": "42"})
    results, least = release_after_retest(f, force=False)
    assert least == 1 and "drained again" in results[0].message and slurm.nodes["n1"] == ["MIXED+DRAIN", OUR_REASON]


def test_after_a_retire_the_hook_fires_per_node_and_the_evidence_is_sought_here_only(tmp_path, monkeypatch,
                                                                                    recorder):  # noqa: F811
    from gpuhc.slurm.repair.admin import AdminResult, after_retire

    hook, got = recorder
    f = _bootstrap(tmp_path, monkeypatch, None, [OK], hook)
    f.opts.config.data["slurm"]["retire_bundle"]["enabled"] = False
    asked = []
    results = [AdminResult("n1", True, "retired: gpuhc: RETIRED admin"), AdminResult("n2", True, "retired: x"),
               AdminResult("n3", False, "drain sent, but Slurm shows another reason"),
               AdminResult("n4", True, "already retired")]
    said = after_retire(results, f.opts.config, "n1", lambda: asked.append(1) or f)
    assert [(e["event"], e["node"]) for e in _events(got)] == [("retire", "n1"), ("retire", "n2")]
    assert asked == [1] and said == ["retire bundle: not written (see the log)"]
