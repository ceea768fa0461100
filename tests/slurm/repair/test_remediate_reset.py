"""The ladder's reset rung in the health check (gpuhc/slurm/repair/remediate.py) with the scontrol runner
injected (tests/helpers/minislurm.py) and the reset procedure at its boundary: the rung is counted
before it acts, a killed run moves the ladder on, a hung NVML sends the node to the reboot rung,
what the reset raises is not acknowledged away, a refused reboot is remembered, the reset
count ends with the episode (issue 30); every climb answers one record, and the acts after a
slow step get only what is left of the run's one deadline (issue 49)."""

from __future__ import annotations

import time

import pytest

from gpuhc.model.result import Action, Result, Status
from gpuhc.slurm.flows import entry
from gpuhc.slurm.repair.ladder import LadderMemory
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.flows.frame import SLURM_RESERVE_S
from gpuhc.slurm.repair import remediate
from gpuhc.slurm.repair.remediate import RESET_KEEP_S, Climb, Done
from gpuhc.slurm.repair.reset_run import Outcome as ResetOutcome
from gpuhc.state.node import StateStore
from tests.helpers.minislurm import RebootingSlurm, config, flow

REMAP = Result("ecc", Status.FAIL, "gpu1 row remap pending (reset needed)", "gpu1", action=Action.RESET_GPU)
HELD = "gpuhc: ecc gpu1 row remap pending (reset needed)"
XID_AFTER = Result("xid", Status.FAIL, "Xid 79 on gpu1: GPU has fallen off the bus", "gpu1",
                   action=Action.DRAIN_TICKET)
PASS = Result("ecc", Status.PASS, "no errors", "gpu1")


@pytest.fixture(autouse=True)
def climbs(monkeypatch):
    """Every climb of every test here, which must each answer a :class:`Climb` (one type on every
    path: no step, a step taken, a fallthrough, a refusal, an error)."""
    seen: list = []
    real = remediate.climb

    def recorded(*a, **k):
        seen.append(real(*a, **k))
        return seen[-1]

    monkeypatch.setattr(remediate, "climb", recorded)  # entry.judge_and_act imports it at call time
    yield seen
    assert all(isinstance(c, Climb) and isinstance(c.done, Done) and c.why for c in seen), seen


def ladder(tmp_path, node="n1") -> LadderMemory:
    doc = StateStore(str(tmp_path / "state")).read()
    return LadderMemory.from_dict(doc.get("slurm", {}).get("ladder", {}).get(node))


def healthcheck(tmp_path, monkeypatch, s, results, now=1_000_000.0, retest=None):
    """One health check of n1 at ``now``; ``retest``: what the checks find after a reset."""
    _, f = flow(tmp_path, monkeypatch, "passive", s, results,
                cfg=config(tmp_path, remediation={"enabled": True}))
    f.opts.now = now
    if retest is not None:
        calls = []

        def run_stage(opts):
            from gpuhc.run.report import RunReport

            calls.append(1)
            got = results if len(calls) == 1 else retest
            return RunReport(node="n1", stage="passive", started=0.0, duration_s=0.01, results=list(got))

        monkeypatch.setattr("gpuhc.run.runner.run_stage", run_stage)
    monkeypatch.setattr("gpuhc.slurm.repair.remediate.busy_of", lambda node, fl: None)  # the GPUs are idle
    return f, entry.healthcheck(f)


def test_a_run_killed_mid_reset_has_counted_it_and_the_third_goes_to_the_reboot_rung(tmp_path, monkeypatch):
    # slurmd kills the health check at 60 s; before, the count was written after the step, so
    # a run killed in the middle left resets=0 and the reset was tried every interval.
    s = RebootingSlurm({"n1": ("IDLE+DRAIN", HELD)})

    def killed(*a, **k):
        raise SystemExit(137)  # what the run sees of slurmd's kill: nothing after this point

    monkeypatch.setattr("gpuhc.slurm.repair.reset_run.procedure", killed)
    for attempt in (1, 2):
        with pytest.raises(SystemExit):
            healthcheck(tmp_path, monkeypatch, s, [REMAP], now=1_000_000.0 + 600 * attempt)
        assert ladder(tmp_path).resets == attempt
        assert s.nodes["n1"][1] == f"{HELD} [reset {attempt}/2]"  # the tag went ahead of the reset
    _, out = healthcheck(tmp_path, monkeypatch, s, [REMAP], now=1_002_000.0)
    assert out.extra["remediation"]["step"] == "reboot", out.extra
    assert [c for c in s.calls if c[1] == "reboot"]


def test_an_xid_the_reset_raised_is_not_acknowledged_away_and_the_node_stays_drained(tmp_path, monkeypatch):
    # Before, the kernel log was acknowledged with the time after the reset: an Xid the reset
    # itself raised fell before it, and the node resumed after one passing retest.
    s = RebootingSlurm({"n1": ("IDLE+DRAIN", HELD)})
    acked = []
    monkeypatch.setattr("gpuhc.slurm.flows.handover.acknowledge_kernel_log", lambda state_dir, now, node=None: acked.append(now))
    box = {}

    def reset_takes_20s(remediation, targets, read, log, deadline, read_mig=None, state_dir=None, read_procs=None):
        box["flow"].opts.now += 20.0  # the reset's time passes, and the driver logs an Xid in it
        return None, ResetOutcome(True, False, "reset gpu1: every step ok")

    monkeypatch.setattr("gpuhc.slurm.repair.reset_run.procedure", reset_takes_20s)
    _, f = flow(tmp_path, monkeypatch, "passive", s, [REMAP], cfg=config(tmp_path, remediation={"enabled": True}))
    f.opts.now = 1_000_000.0
    box["flow"] = f
    calls = []

    def run_stage(opts):
        from gpuhc.run.report import RunReport

        calls.append(1)
        return RunReport(node="n1", stage="passive", started=0.0, duration_s=0.01,
                         results=[REMAP] if len(calls) == 1 else [XID_AFTER])

    monkeypatch.setattr("gpuhc.run.runner.run_stage", run_stage)
    monkeypatch.setattr("gpuhc.slurm.repair.remediate.busy_of", lambda node, fl: None)
    out = entry.healthcheck(f)
    assert acked == [1_000_000.0], acked  # the time taken before the reset, not 1_000_020
    assert len(calls) == 2 and s.nodes["n1"][0].endswith("DRAIN"), s.nodes  # retest failed: not resumed
    assert not any(c[1] == "update" and "State=RESUME" in c for c in s.calls)
    assert not out.extra["remediation"].get("resumed")


def test_a_run_whose_nvml_timed_out_goes_straight_to_the_reboot_rung(tmp_path, monkeypatch):
    s = RebootingSlurm({"n1": ("IDLE+DRAIN", HELD)})
    monkeypatch.setattr("gpuhc.slurm.repair.reset_run.procedure",
                        lambda *a, **k: pytest.fail("a reset was tried with NVML hanging"))
    _, f = flow(tmp_path, monkeypatch, "passive", s, [REMAP], cfg=config(tmp_path, remediation={"enabled": True}))
    f.opts.now = 1_000_000.0

    def run_stage(opts):
        from gpuhc.run.report import RunReport

        return RunReport(node="n1", stage="passive", started=0.0, duration_s=0.01, results=[REMAP],
                         timed_out=["ecc"])

    monkeypatch.setattr("gpuhc.run.runner.run_stage", run_stage)
    monkeypatch.setattr("gpuhc.slurm.repair.remediate.busy_of", lambda node, fl: None)
    out = entry.healthcheck(f)
    assert out.extra["remediation"]["step"] == "reboot" and "ecc timed out" in out.extra["remediation"]["why"]
    assert ladder(tmp_path).resets == 2  # the rung is spent for the episode: the next run reboots too


def test_a_reset_whose_nvml_hung_reboots_in_the_same_run_and_leaves_with_os_exit(tmp_path, monkeypatch, climbs):
    s = RebootingSlurm({"n1": ("IDLE+DRAIN", HELD)})
    monkeypatch.setattr("gpuhc.slurm.repair.reset_run.procedure", lambda *a, **k: (None, ResetOutcome(
        False, True, "wait-fabric all failed; the driver does not answer (wedged)", wedged=True)))
    _, out = healthcheck(tmp_path, monkeypatch, s, [REMAP])
    rec = out.extra["remediation"]
    assert rec["wedged"] and rec["fallthrough"] == "reboot" and out.hard_exit, rec
    assert [c for c in s.calls if c[1] == "reboot"]
    assert ladder(tmp_path).resets == 2 and ladder(tmp_path).step == "reboot"
    assert (climbs[-1].step.label, climbs[-1].done) == ("reboot", Done.DONE)


class RefusingSlurm(RebootingSlurm):
    """No RebootProgram: slurmctld refuses ``scontrol reboot``."""

    def __call__(self, argv, timeout):
        if argv[1] == "reboot":
            self.calls.append(argv)
            return 1, "", "scontrol: error: RebootProgram isn't defined\n"
        return super().__call__(argv, timeout)


def test_a_refused_reboot_is_said_remembered_and_not_asked_every_interval(tmp_path, monkeypatch):
    s = RefusingSlurm({"n1": ("IDLE+DRAIN", f"{HELD} [reset 2/2]")})
    with StateStore(str(tmp_path / "state")).transaction() as doc:  # both resets tried: the reboot rung
        doc.setdefault("slurm", {}).setdefault("ladder", {})["n1"] = LadderMemory(resets=2).to_dict()
    _, out = healthcheck(tmp_path, monkeypatch, s, [REMAP])
    rec = out.extra["remediation"]
    assert "RebootProgram" in rec["error"] and not rec["ok"], rec
    assert any(e == "remediation" and "RebootProgram" in p["error"] for e, p in out.events)
    _, out = healthcheck(tmp_path, monkeypatch, s, [REMAP], now=1_000_300.0)  # the next interval
    assert out.extra["remediation"]["step"] == "wait" and "refused" in out.extra["remediation"]["why"]
    assert sum(1 for c in s.calls if c[1] == "reboot") == 1


def test_the_reset_count_ends_with_the_episode(tmp_path, monkeypatch):
    # A node resumed after its reboot kept resets=2, and its next fault skipped the reset rung.
    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc.setdefault("slurm", {}).setdefault("ladder", {})["n1"] = LadderMemory(resets=2).to_dict()
    s = RebootingSlurm({"n1": ("IDLE", None)})
    _, out = healthcheck(tmp_path, monkeypatch, s, [PASS])
    assert ladder(tmp_path) == LadderMemory()


def test_a_reset_is_not_started_when_slurm_shows_a_job_right_before_it(tmp_path, monkeypatch):
    # The ladder's read is seconds old by the reset; an admin's resume lets a job land meanwhile.
    class JobLands(RebootingSlurm):
        reads = 0

        def apply(self, argv):
            if self.verb(argv) == "show":
                self.reads += 1
                if self.reads == 3:  # the read right before the reset
                    self.nodes["n1"] = ["MIXED", None]
            return super().apply(argv)

    s = JobLands({"n1": ("IDLE+DRAIN", HELD)})
    monkeypatch.setattr("gpuhc.slurm.repair.reset_run.procedure", lambda *a, **k: pytest.fail("reset with a job there"))
    _, out = healthcheck(tmp_path, monkeypatch, s, [REMAP])
    assert ladder(tmp_path).resets == 0
    assert out.decision.act is Act.KEEP


def test_a_held_node_passing_in_its_hysteresis_keeps_its_reset_count(tmp_path, monkeypatch):
    # Still the same episode: only a node back in service forgets the count.
    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc.setdefault("slurm", {}).setdefault("ladder", {})["n1"] = LadderMemory(resets=1).to_dict()
        doc["slurm"].setdefault("nodes", {})["n1"] = {"drained_at": 999_000.0, "reason": HELD}
    s = RebootingSlurm({"n1": ("IDLE+DRAIN", HELD)})
    _, out = healthcheck(tmp_path, monkeypatch, s, [PASS])
    assert out.decision.act is Act.WAIT and ladder(tmp_path).resets == 1, (out.decision, ladder(tmp_path))


def test_the_acts_after_a_slow_step_get_only_what_is_left_and_none_runs_past_slurms_timeout(tmp_path, monkeypatch,
                                                                                           climbs):
    # One deadline for the run (gpuhc/model/deadline.py). Before it, the reset counted its room
    # before the Slurm calls that precede it (the re-read, the tag written ahead) and got the
    # whole room after them: a slow slurmctld pushed the reset into the time kept for Slurm.
    asked: list[tuple[float, float]] = []

    class SlowSlurm(RebootingSlurm):
        def __call__(self, argv, timeout):
            asked.append((time.monotonic(), timeout))
            time.sleep(0.4)  # a slurmctld under load: each answer costs time out of the run
            return super().__call__(argv, timeout)

    got = {}

    def reset(remediation, targets, read, log, deadline, read_mig=None, state_dir=None, read_procs=None):
        got["when"] = time.monotonic()
        got.update(at=deadline.at, left=deadline.left())
        return None, ResetOutcome(True, False, "reset gpu1: every step ok")

    s = SlowSlurm({"n1": ("IDLE+DRAIN", HELD)})
    monkeypatch.setattr("gpuhc.slurm.repair.reset_run.procedure", reset)
    _, f = flow(tmp_path, monkeypatch, "passive", s, [REMAP], cfg=config(tmp_path, remediation={"enabled": True}))
    f.opts.now = 1_000_000.0
    left = 11.0  # the checks were slow: 11 s of the health check's 55 are left
    f.started = time.monotonic() - 55.0 + left
    monkeypatch.setattr("gpuhc.slurm.repair.remediate.busy_of", lambda node, fl: None)
    out = entry.healthcheck(f)
    end = f.deadline.at
    assert out.extra["remediation"]["step"] == "reset 1/2" and got, out.extra
    # The reset ends where the run's deadline says, however long Slurm took before it ...
    assert got["at"] == pytest.approx(end - SLURM_RESERVE_S - RESET_KEEP_S, abs=1e-6)
    # ... and got only what was left when it started: less than its room by the slow calls' time.
    assert got["left"] <= end - got["when"] - SLURM_RESERVE_S - RESET_KEEP_S
    assert got["left"] < left - SLURM_RESERVE_S - RESET_KEEP_S - 0.4 * 2
    # Every Slurm call's timeout was cut to what the deadline left: none could run past it.
    assert len(asked) >= 4 and all(t0 + timeout <= end for t0, timeout in asked), [(round(end - t0, 2), t)
                                                                                  for t0, t in asked]
    own = float(f.slurm["timeout_s"])
    assert any(t < own for _, t in asked)  # late calls, whose own timeout the deadline cut
    assert climbs[-1].done in (Done.DONE, Done.RESUMED) and climbs[-1].step.label == "reset 1/2"
