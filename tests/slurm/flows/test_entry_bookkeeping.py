"""A certain local fault is never turned into "let the job run" by a failure of gpuhc's own
bookkeeping (issue 18; docs/slurm.md, "Bookkeeping failures"): the breaker's count, the ledger,
the log, or gpuhc raising while it acts. The FAIL keeps exit 1 (the prolog holds the job back),
the drain the breaker allows is still tried, and the run says what failed. Exit 1 in a prolog or
an epilog needs the breaker known closed, though (issue 30; docs/slurm.md, "No exit 1 without
the breaker"): where this run could not count, the node's last count decides, and with none the
job runs, said."""

from __future__ import annotations

import types

import pytest

from gpuhc.slurm.flows import entry
from gpuhc.slurm.policy.drain import Verdict
from gpuhc.slurm.act.scontrol import Scontrol
from tests.helpers.minislurm import OUR_REASON, XID, MiniSlurm, config, flow, last_count, memory, run

JOB = {"SLURM_JOB_ID": "7"}
DECODE = UnicodeDecodeError("utf-8", b"bad \xfc fan", 4, 5, "invalid start byte")


def healthy_pair():
    return {"n1": ("IDLE", None), "n2": ("IDLE", None)}


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog"])
@pytest.mark.parametrize("broken", ["slurm", "gpuhc"])
def test_a_failed_breaker_count_keeps_the_fail_and_says_so(tmp_path, monkeypatch, stage, broken):
    last_count(tmp_path, open_=False)  # the breaker known closed from this node's last count
    s = MiniSlurm(healthy_pair())
    if broken == "slurm":
        s.fail = {"show-all": (1, "", "slurm_load_partitions: Unable to contact slurm controller")}
    else:  # bytes nobody expected in another node's record
        monkeypatch.setattr(Scontrol, "scope", lambda self, parts: (_ for _ in ()).throw(DECODE))
    out = run(tmp_path, monkeypatch, stage, s, [XID], env=JOB)
    # The health check's FAIL stays 1; a prolog's or an epilog's exit 1 would have Slurm drain the
    # node around the breaker that could not be asked: the job runs, said (entry.may_fail_job).
    assert out.exit_code == (1 if stage == "passive" else 0), out.lines
    assert (stage != "passive") == any("letting the job run" in line for line in out.lines)
    assert s.updates() == []  # the breaker could not be asked: no drain that takes capacity
    assert "the breaker's count failed" in out.slurm_error
    assert ("Unable to contact" if broken == "slurm" else "UnicodeDecodeError") in out.slurm_error
    assert any("not draining without it" in line for line in out.lines)
    assert not memory(tmp_path).get("drained_at")


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog"])
def test_a_failed_breaker_count_with_no_last_count_lets_the_job_run(tmp_path, monkeypatch, stage):
    s = MiniSlurm(healthy_pair())
    s.fail = {"show-all": (1, "", "slurm_load_partitions: Unable to contact slurm controller")}
    out = run(tmp_path, monkeypatch, stage, s, [XID], env=JOB)
    assert out.exit_code == (1 if stage == "passive" else 0), out.lines  # slurmd ignores the health check's
    assert s.updates() == []
    said = [line for line in out.lines if "letting the job run" in line]
    assert (len(said) == 1 and "breaker's state is unknown" in said[0]) == (stage != "passive"), out.lines


class WithLedger(MiniSlurm):
    """The node table plus a ledger record ``ledger`` whose read fails."""

    def __call__(self, argv, timeout):
        if "-n" in argv and argv[argv.index("-n") + 1] == "ledger":
            self.calls.append(argv)
            return 1, "", "sinfo: error: Unable to contact slurm controller"
        return super().__call__(argv, timeout)


@pytest.mark.parametrize("stage", ["passive", "prolog"])
@pytest.mark.parametrize("broken", ["slurm", "gpuhc"])
def test_an_unreadable_ledger_still_drains_by_counting(tmp_path, monkeypatch, stage, broken):
    s = WithLedger(healthy_pair())
    if broken == "gpuhc":
        monkeypatch.setattr(Scontrol, "ledger", lambda self, name: (_ for _ in ()).throw(DECODE))
    cfg = config(tmp_path, breaker={"ledger_node": "ledger"})
    out = run(tmp_path, monkeypatch, stage, s, [XID], env=JOB, cfg=cfg)
    assert out.exit_code == 1 and out.acted and s.nodes["n1"][1] == OUR_REASON
    assert out.breaker.source == "count"
    said = [line for line in out.lines if "breaker ledger ledger" in line]
    assert len(said) == 1 and "counting instead" in said[0], out.lines
    assert ("unreadable" if broken == "slurm" else "UnicodeDecodeError") in said[0]


@pytest.mark.parametrize("stage", ["passive", "prolog"])
def test_an_unwritable_log_still_drains_and_says_so(tmp_path, monkeypatch, stage):
    s = MiniSlurm(healthy_pair())
    name, f = flow(tmp_path, monkeypatch, stage, s, [XID], env=JOB)
    not_a_dir = tmp_path / "log-is-a-file"
    not_a_dir.write_text("")
    f.log = entry.Log(f"gpuhc {name} n1", str(not_a_dir / "decisions.log"), False, False)
    out = getattr(entry, name)(f)
    assert out.exit_code == 1 and out.acted and s.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]
    assert sum("not writing slurm.log_file" in line for line in out.lines) == 1


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog"])
def test_gpuhc_raising_while_acting_keeps_the_fail(tmp_path, monkeypatch, stage):
    def broken(self, *a, **k):
        raise DECODE

    monkeypatch.setattr("gpuhc.slurm.act.actuator.Actuator.apply", broken)
    last_count(tmp_path, open_=False)
    out = run(tmp_path, monkeypatch, stage, MiniSlurm(healthy_pair()), [XID], env=JOB)
    assert out.exit_code == (1 if stage == "passive" else 0), out.lines  # as above: no drain around the breaker
    assert "internal error: UnicodeDecodeError" in out.slurm_error
    assert any("gpuhc broke while acting on the node" in line for line in out.lines)
    assert not memory(tmp_path).get("drained_at")


@pytest.mark.parametrize("verdict, fail_open, known, code", [
    (Verdict.FAIL, True, "off", 1), (Verdict.FAIL, False, None, 1), (None, True, None, 0),
    (None, False, None, 3), (Verdict.PASS, True, None, 0),
    # exit 1 would have Slurm drain the node around the breaker, however it last counted
    (Verdict.FAIL, True, None, 0), (Verdict.FAIL, True, "open", 0), (Verdict.FAIL, True, "closed", 0),
])
def test_a_crash_after_a_fail_verdict_keeps_the_fail_where_no_cap_is_passed(verdict, fail_open, known, code):
    """The CLI's last resort, for a crash anywhere in the flow: a bug alone lets the job run
    (fail open); a bug after the node failed its checks does not, where Slurm's own drain passes
    no cap (the breaker off, or the site's prolog_fail_open: false)."""
    from gpuhc.slurm.policy.breaker import BreakerState
    from gpuhc.slurm.flows.frame import crash_exit

    said = []
    state = None if known in (None, "off") else BreakerState(known == "open", 1 if known == "open" else 0, 10, 1, "gpu")
    slurm = {"breaker": {"enabled": known != "off"}}
    f = types.SimpleNamespace(verdict=verdict, stage="prolog", log=lambda m, **k: said.append(m),
                              breaker_known=state, slurm=slurm)
    assert crash_exit(f, fail_open) == code
    assert bool(said) is (verdict is Verdict.FAIL)


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog"])
def test_too_late_to_verify_a_drain_is_a_fail_not_an_open_breaker(tmp_path, monkeypatch, stage):
    """Too little of the deadline left to verify a drain (docs/slurm.md, "Time to verify"): no
    drain. The health check's FAIL stays 1; with the breaker off, the prolog and the epilog exit 1
    too (Slurm drains the node with its own reason, and there is no cap to pass)."""
    monkeypatch.setattr("gpuhc.slurm.act.actuator.Actuator._too_late", lambda self, claim=False: True)
    s = MiniSlurm(healthy_pair())
    out = run(tmp_path, monkeypatch, stage, s, [XID], env=JOB, cfg=config(tmp_path, breaker={"enabled": False}))
    assert out.exit_code == 1, out.lines
    assert s.updates() == [] and not out.acted
    assert not any("letting the job run" in line for line in out.lines)


@pytest.mark.parametrize("stage", ["prolog", "epilog"])
def test_too_late_to_verify_with_a_recent_closed_count_still_lets_the_job_run(tmp_path, monkeypatch, stage):
    """Issue 45: 40 nodes failed at once with a cap of 4 and scontrol answering in 4 s: every
    prolog came too late, trusted its last count ("closed", up to 15 minutes old) and exited 1,
    and Slurm drained 8 nodes with "Prolog error". A count of this node's says nothing of the
    others that are just as late."""
    monkeypatch.setattr("gpuhc.slurm.act.actuator.Actuator._too_late", lambda self, claim=False: True)
    last_count(tmp_path, open_=False, age_s=1.0)
    s = MiniSlurm(healthy_pair())
    out = run(tmp_path, monkeypatch, stage, s, [XID], env=JOB)
    assert out.exit_code == 0 and s.updates() == [], out.lines
    said = [line for line in out.lines if "letting the job run" in line]
    assert len(said) == 1 and "too little to verify the drain" in said[0] and "circuit breaker closed" in said[0], said


@pytest.mark.parametrize("stage", ["prolog", "epilog"])
@pytest.mark.parametrize("known", [None, "open"])
def test_too_late_to_verify_with_the_breaker_open_or_unknown_lets_the_job_run(tmp_path, monkeypatch, stage, known):
    """Issue 30: the too-late path exited 1 without having read the breaker; at the cap Slurm then
    drained the node with "Prolog error", around the breaker."""
    monkeypatch.setattr("gpuhc.slurm.act.actuator.Actuator._too_late", lambda self, claim=False: True)
    if known:
        last_count(tmp_path, open_=True)
    s = MiniSlurm(healthy_pair())
    out = run(tmp_path, monkeypatch, stage, s, [XID], env=JOB)
    assert out.exit_code == 0 and s.updates() == [], out.lines
    said = [line for line in out.lines if "letting the job run" in line]
    assert len(said) == 1 and ("unknown" if known is None else "this node's last count") in said[0], said

