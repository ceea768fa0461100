"""One Slurm-flow run per node at a time (gpuhc/slurm/flows/runlock.py): a second run waits for the
first, within its own deadline, and then starts from what the first did; a lock that cannot be
made is said and never stops a drain. The real-Slurm proof (20 health checks at once, one DRAIN)
is tests/slurm_real/test_concurrent.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpuhc.model.deadline import Deadline
from gpuhc.slurm.flows import entry, runlock
from gpuhc.slurm.policy.drain import Act
from tests.helpers.minislurm import config, OUR_REASON, XID, MiniSlurm, flow, last_count

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def _released():
    yield
    runlock.release()


def holder(state_dir, seconds):
    """Another gpuhc run on this node, holding its turn for ``seconds``."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", HOLD, os.path.join(state_dir, runlock.LOCK_FILE), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_run_waits_its_turn(tmp_path):
    d = str(tmp_path / "state")
    p = holder(d, 0.6)
    said = []
    t = time.monotonic()
    turn = runlock.take(d, Deadline.after(runlock.RESERVE_S + 20), lambda m, **k: said.append(m))
    assert turn.ok and turn.waited and time.monotonic() - t >= 0.3
    assert said == ["another gpuhc run is acting on this node: waiting for its turn"]
    p.wait()


def test_the_wait_ends_at_the_runs_deadline(tmp_path):
    d = str(tmp_path / "state")
    p = holder(d, 30)
    try:
        said = []
        t = time.monotonic()
        turn = runlock.take(d, Deadline.after(runlock.RESERVE_S + 0.5), lambda m, **k: said.append(m))
        # The holder keeps the lock 30 s: a wait that ignored the deadline would end with the turn taken.
        assert not turn.ok and time.monotonic() - t >= 0.3
        assert "leaving Slurm to it" in said[-1]
    finally:
        p.kill()
        p.wait()


def test_the_turn_belongs_to_the_process(tmp_path):
    d = str(tmp_path / "state")
    assert runlock.take(d, Deadline.after(60), print).ok
    assert runlock.take(d, Deadline.after(60), print).waited is False  # held already: no wait
    runlock.release(d)
    p = holder(d, 0)  # released: another process gets it at once
    p.wait()


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_a_planted_lock_file_is_refused_and_the_run_goes_on(tmp_path, plant):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    path = d / runlock.LOCK_FILE
    if plant == "fifo":
        os.mkfifo(path)
    else:
        os.symlink(tmp_path / "elsewhere", path)
    said = []
    turn = runlock.take(str(d), Deadline.after(60), lambda m, **k: said.append(m))
    assert turn.ok and turn.problem and "going on without it" in said[0]
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("stage, known, code", [("passive", None, 1), ("prolog", "closed", 0), ("prolog", None, 0),
                                               ("prolog", "off", 1)])
def test_a_run_that_never_gets_its_turn_keeps_its_fail_and_sends_nothing(tmp_path, monkeypatch, stage, known, code):
    # The prolog fails the job only where Slurm's own drain passes no cap: the breaker off
    # (issues 30 and 45, entry.may_fail_job). The health check's exit code drains nothing.
    if known == "closed":
        last_count(tmp_path, open_=False)
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    cfg = config(tmp_path, breaker={"enabled": False}) if known == "off" else None
    name, f = flow(tmp_path, monkeypatch, stage, s, [XID], env={"SLURM_JOB_ID": "7"}, cfg=cfg)
    f.started = time.monotonic() - float(f.slurm["deadline_s"][stage]) + runlock.RESERVE_S + 0.5
    p = holder(f.opts.state_dir, 30)
    try:
        out = getattr(entry, name)(f)
    finally:
        p.kill()
        p.wait()
    assert out.exit_code == code and s.calls == [] and out.decision is None
    assert any("leaving Slurm to it" in line for line in out.lines)


def test_a_run_that_waited_starts_from_what_the_other_did(tmp_path, monkeypatch):
    """The first run drained while the second waited: the second reads again, finds gpuhc's
    drain and keeps it (no second DRAIN, no breaker count)."""
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    name, f = flow(tmp_path, monkeypatch, "passive", s, [XID])
    p = holder(f.opts.state_dir, 0.5)
    s.nodes["n1"] = ["IDLE+DRAIN", OUR_REASON]  # what the holder did meanwhile
    out = entry.healthcheck(f)
    p.wait()
    assert out.decision.act is Act.KEEP and s.updates() == [] and out.exit_code == 1
    assert not any(c for c in s.calls if "-p" in c)  # no count
