"""Hooks: every event reaches the hook exactly once, with its JSON on stdin; a hook that hangs is
killed (with what it started) at its timeout; a failing or unsafe hook is logged and changes
nothing. The hooks are real executables started by gpuhc.export.hooks, nothing is mocked."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuhc.model.deadline import Deadline
from gpuhc.export.hooks import EVENTS, fire, fire_outcome, outcome_events
from gpuhc.slurm.policy.breaker import BreakerState
from gpuhc.slurm.policy.drain import Act, Decision, Memory
from tests.helpers.hooks import _events, _script, recorder  # noqa: F401 - recorder: a fixture


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, bool]] = []

    def __call__(self, text: str, loud: bool = False) -> None:
        self.lines.append((text, loud))


def test_each_event_reaches_the_hook_exactly_once_with_its_payload(recorder):
    hook, out = recorder
    settings = {"commands": [[hook, "--channel", "ops"]], "timeout_s": 10.0}
    for i, event in enumerate(EVENTS):
        fire(event, {"node": f"gpu{i:03d}", "reason": "gpuhc: xid79 gpu3"}, settings)
    got = _events(out)
    assert [e["event"] for e in got] == list(EVENTS)
    for i, e in enumerate(got):
        assert e["node"] == f"gpu{i:03d}" and e["reason"] == "gpuhc: xid79 gpu3"
        assert e["_env_event"] == e["event"] and e["_argv"] == ["--channel", "ops"]
        assert isinstance(e["time"], float) and e["gpuhc_version"]


def test_events_filter_and_no_commands(recorder):
    hook, out = recorder
    fire("drain", {"node": "a"}, {"commands": [], "timeout_s": 5.0})
    fire("resume", {"node": "b"}, {"commands": [[hook]], "events": ["drain"], "timeout_s": 5.0})
    fire("drain", {"node": "c"}, {"commands": [[hook]], "events": ["drain"], "timeout_s": 5.0})
    assert [e["node"] for e in _events(out)] == ["c"]


def test_hanging_hook_is_killed_at_its_timeout_with_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    hook = _script(tmp_path / "hang", f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open({str(pidfile)!r}, "w").write(str(child.pid))
print("posting to the webhook ...", flush=True)
time.sleep(600)
""")
    log = Lines()
    started = time.monotonic()
    fire("drain", {"node": "n1"}, {"commands": [[hook]], "timeout_s": 1.5}, log)
    took = time.monotonic() - started
    assert took < 1.5 + 5.0  # the timeout, then TERM and at most a short wait for KILL
    (text, loud), = log.lines
    assert loud and "killed after 1.5s (timeout)" in text and "posting to the webhook" in text
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the hook's child outlived the hook's timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_deadline_cuts_the_timeout(tmp_path):
    hook = _script(tmp_path / "slow", "import time; time.sleep(600)\n")
    log = Lines()
    started = time.monotonic()
    fire("drain", {}, {"commands": [[hook]], "timeout_s": 60.0}, log, deadline=Deadline.after(1.0))
    assert time.monotonic() - started < 8.0
    assert "killed after" in log.lines[0][0]
    log2 = Lines()
    fire("drain", {}, {"commands": [[hook]], "timeout_s": 60.0}, log2, deadline=Deadline.after(-1))
    assert "no time left" in log2.lines[0][0]


def test_failing_hook_is_logged_and_fire_returns(tmp_path, recorder):
    bad = _script(tmp_path / "bad", "import sys; sys.stdin.read(); print('HTTP 500 from hooks.slack.com\\n"
                                    "forged: line\\x1b[31m'); sys.exit(7)\n")
    good, out = recorder
    log = Lines()
    fire("retire", {"node": "n9"}, {"commands": [[bad], [good]], "timeout_s": 5.0}, log)
    (text, loud), = [line for line in log.lines if "exited 7" in line[0]]
    assert loud and "HTTP 500 from hooks.slack.com forged: line\\x1b[31m" in text  # one line, no escape sequence
    assert [e["node"] for e in _events(out)] == ["n9"]  # the next hook still ran


def test_hook_that_does_not_read_a_large_stdin_does_not_block(tmp_path):
    hook = _script(tmp_path / "deaf", "pass\n")
    log = Lines()
    started = time.monotonic()
    fire("drain", {"evidence": "x" * (1 << 20)}, {"commands": [[hook]], "timeout_s": 10.0}, log)
    assert time.monotonic() - started < 8.0 and "ok" in log.lines[0][0]


@pytest.mark.parametrize("make, why", [
    (lambda p: "relative/hook", "not an absolute path"),
    (lambda p: str(p / "missing"), "cannot stat"),
    (lambda p: _script(p / "noexec", "pass\n") and (p / "noexec").chmod(0o644) or str(p / "noexec"), "not executable"),
])
def test_unsafe_hooks_are_refused(tmp_path, make, why):
    log = Lines()
    fire("drain", {}, {"commands": [[make(tmp_path)]], "timeout_s": 5.0}, log)
    assert why in log.lines[0][0] and log.lines[0][1]


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply to root only")
def test_root_refuses_a_hook_others_can_write(tmp_path, recorder):
    hook, out = recorder
    os.chmod(hook, 0o777)
    log = Lines()
    fire("drain", {}, {"commands": [[hook]], "timeout_s": 5.0}, log)
    assert "is writable by group or others" in log.lines[0][0]
    assert not out.exists()
    os.chmod(hook, stat.S_IRWXU)


def test_bad_settings_never_raise(recorder):
    hook, out = recorder
    log = Lines()
    fire("drain", {}, {"commands": ["not-a-list"]}, log)
    fire("no-such-event", {}, {"commands": []}, log)
    fire("drain", {"node": "x"}, {"commands": [[hook]], "events": ["drains", "drain"]}, log)
    assert "hooks.commands[0]" in log.lines[0][0] and "unknown hook event" in log.lines[1][0]
    assert "unknown event(s) drains" in log.lines[2][0] and [e["node"] for e in _events(out)] == ["x"]


def _outcome(act: Act, acted: bool, breaker: BreakerState | None = None) -> SimpleNamespace:
    reason = "gpuhc: ecc gpu1 uncorrectable" if act is Act.DRAIN or act is Act.BLOCKED else None
    return SimpleNamespace(decision=Decision(act, "why", Memory(), reason), acted=acted, breaker=breaker)


def test_outcome_events_only_for_what_was_done():
    closed = BreakerState(False, 1, 10, 2, "partition gpu")
    opened = BreakerState(True, 2, 10, 2, "partition gpu")
    assert [e for e, _ in outcome_events(_outcome(Act.DRAIN, True, closed))] == ["drain"]
    assert outcome_events(_outcome(Act.DRAIN, False, closed)) == []  # not verified: not done
    assert [e for e, _ in outcome_events(_outcome(Act.RESUME, True))] == ["resume"]
    assert [e for e, _ in outcome_events(_outcome(Act.BLOCKED, False, opened))] == ["breaker_trip"]
    assert outcome_events(_outcome(Act.WAIT, False)) == []
    assert outcome_events(SimpleNamespace(decision=None, acted=False, breaker=None)) == []


def test_breaker_trip_fires_once_per_open_episode(tmp_path, recorder):
    hook, out = recorder
    settings = {"commands": [[hook]], "events": list(EVENTS), "timeout_s": 5.0}
    opened = BreakerState(True, 3, 10, 2, "partition gpu")
    closed = BreakerState(False, 1, 10, 2, "partition gpu")
    state = str(tmp_path / "state")
    for _ in range(3):  # three health checks withheld by the open breaker
        fire_outcome(_outcome(Act.BLOCKED, False, opened), "n1", "passive", settings, state)
    fire_outcome(_outcome(Act.DRAIN, True, closed), "n1", "passive", settings, state)  # closed again
    fire_outcome(_outcome(Act.BLOCKED, False, opened), "n1", "passive", settings, state)  # a new trip
    assert [e["event"] for e in _events(out)] == ["breaker_trip", "drain", "breaker_trip"]
    assert _events(out)[0]["breaker"]["open"] is True and _events(out)[0]["node"] == "n1"
