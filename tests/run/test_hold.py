"""Evidence held over runs (gpuhc/run/hold.py): the node around the GPUs warns first and drains
only once its evidence stayed on consecutive runs spanning evidence.host (issue 43)."""

from __future__ import annotations

from gpuhc.catalog.evidence import HOLDS
from gpuhc.model.result import Action, Result, Status
from gpuhc.run.hold import MAX_ENTRIES, hold

HOST = HOLDS["host"]
DCGM_DOWN = Result("services", Status.FAIL, "DCGM host engine is running but not answering", "dcgm",
                   action=Action.DRAIN_REBOOT)
PASS = Result("services", Status.PASS, "running: DCGM host engine")


def runs(every_s: float, n: int, result=DCGM_DOWN, section=None, start=1_000_000.0):
    stored, out = None, []
    for i in range(n):
        got, stored = hold([result], stored, start + i * every_s, section)
        out.append(got[0])
    return out, stored


def test_a_service_down_warns_until_held_over_runs_and_span_then_fails_with_the_span():
    out, _ = runs(300.0, 4)  # the health check every 5 minutes
    assert [r.status for r in out] == [Status.WARN, Status.WARN, Status.WARN, Status.FAIL]
    # held, it buys its class's act, not the check's: a service is restarted by a person, not a reboot
    assert all(r.action is Action.NONE for r in out[:3]) and out[3].action is Action.DRAIN_TICKET
    assert out[0].message.endswith("(seen 1 run over 0 s; drains when held 3 runs over 15 min: evidence.host)")
    assert out[3].message == "DCGM host engine is running but not answering; held 4 runs over 15 min"
    assert out[3].evidence == "service"


def test_three_runs_in_a_minute_are_not_held():
    # an epilog and a health check a few seconds apart: runs enough, span not
    out, _ = runs(20.0, HOST.runs + 5)
    assert {r.status for r in out} == {Status.WARN}


def test_an_hour_of_a_silent_dcgm_fails():
    out, _ = runs(300.0, 12)
    assert out[-1].status is Status.FAIL and "held 12 runs over 55 min" in out[-1].message


def test_a_run_that_judged_the_check_without_the_finding_starts_it_again():
    t = 1_000_000.0
    _, stored = hold([DCGM_DOWN], None, t, None)
    _, stored = hold([DCGM_DOWN], stored, t + 300, None)
    _, stored = hold([PASS], stored, t + 600, None)
    assert stored == {}
    got, _ = hold([DCGM_DOWN], stored, t + 900, None)
    assert got[0].status is Status.WARN and "seen 1 run" in got[0].message


def test_a_run_that_could_not_judge_the_check_keeps_the_count():
    # gpuhc's own failure (the host reader timed out) is no evidence either way
    t = 1_000_000.0
    _, stored = hold([DCGM_DOWN], None, t, None)
    timed_out = Result("services", Status.ERROR, "timed out after 10.0s reading host")
    got, stored = hold([timed_out], stored, t + 300, None)
    assert got == [timed_out] and len(stored) == 1
    got, _ = hold([DCGM_DOWN], stored, t + 600, None)
    assert "seen 2 runs over 10 min" in got[0].message


def test_a_sighting_after_a_whole_span_unseen_starts_again():
    t = 1_000_000.0
    _, stored = hold([DCGM_DOWN], None, t, None)
    got, _ = hold([DCGM_DOWN], stored, t + HOST.span_s + 60, None)
    assert "seen 1 run over 0 s" in got[0].message


def test_hardware_evidence_acts_at_once_untouched():
    xid = Result("xid", Status.FAIL, "Xid 79 on gpu3", "gpu3", action=Action.DRAIN_REBOOT)
    got, stored = hold([xid], None, 1.0, None)
    assert got == [xid] and stored == {}


def test_the_config_sets_the_hold():
    out, _ = runs(60.0, 2, section={"host": {"runs": 2, "span_s": 60.0}})
    assert [r.status for r in out] == [Status.WARN, Status.FAIL]


def test_a_damaged_count_starts_again_and_the_count_is_bounded():
    got, stored = hold([DCGM_DOWN], {"services|dcgm|service": {"first": "x"}, 7: 1}, 5.0, None)
    assert got[0].status is Status.WARN and list(stored) == ["services|dcgm|service"]
    many = [Result("host", Status.FAIL, f"mount /m{i}: hung", f"/m{i}", action=Action.DRAIN_REBOOT, evidence="mount")
            for i in range(MAX_ENTRIES + 10)]
    got, stored = hold(many, None, 5.0, None)
    assert len(stored) == MAX_ENTRIES and all(r.status is Status.WARN for r in got)


def test_each_held_class_buys_its_own_act_whatever_the_check_asked():
    """A reboot only where it is the cure: a process wedged in the GPU driver; a hung mount's
    server and a silent service need a person (gpuhc/catalog/evidence.py's ``act``)."""
    wedged = Result("host", Status.FAIL, "process 700 stuck in os_acquire_rwlock_write, holding a GPU", "pid700",
                    action=Action.NONE, evidence="stuck-process")
    hung = Result("host", Status.FAIL, "mount /home: no answer within 5s", "/home", action=Action.DRAIN_REBOOT,
                  evidence="mount")
    for r, act in ((wedged, Action.DRAIN_REBOOT), (hung, Action.DRAIN_TICKET), (DCGM_DOWN, Action.DRAIN_TICKET)):
        out, _ = runs(300.0, 4, result=r)
        assert out[3].status is Status.FAIL and out[3].action is act, r
