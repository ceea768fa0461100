"""The GPU reset's undo, journaled (issue 45; gpuhc/slurm/repair/undo_journal.py): a run killed
with SIGKILL at any command of the reset leaves what undoes its changes on disk; the next run
(every hook entry, before anything else) puts every service and persistence back, and until it
has the drain policy keeps the node out. On the fakes of tests/helpers/reset_fakes.py, whose
tools kill the gpuhc run (their parent) at their k-th command."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

from gpuhc.model.deadline import Deadline
from gpuhc.slurm.policy.drain import Act, Memory, PolicySettings, Verdict, decide
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.repair.reset_run import procedure
from gpuhc.slurm.repair.undo_journal import Journal, pending_note, replay
from tests.helpers.reset_fakes import FakeNode, killed_at

DCGM = (4242, "nv-hostengine", "nvidia-dcgm", [f"/dev/nvidia{i}" for i in range(4)] + ["/dev/nvidiactl"])
PERSISTENCED = (1111, "nvidia-persiste", "nvidia-persistenced", [f"/dev/nvidia{i}" for i in range(4)])
FM = (2222, "nv-fabricmanage", "nvidia-fabricmanager", ["/dev/nvidiactl", "/dev/nvidia-nvswitchctl"])
NOW = 1_700_000_000.0
HELD = "gpuhc: row-remap gpu1 remapping pending [reset 1/2]"
SETTINGS = PolicySettings(resume_after=1, cooldown_s=0)
# Each node's own shape: a Hopper GPU alone (persistence, DCGM), and an Ampere baseboard reset as
# one (every GPU's persistence, every service).
SHAPES = {
    "hopper": dict(procs={p[0]: p[1:] for p in (DCGM, PERSISTENCED, FM)}),
    "baseboard": dict(model="NVIDIA A100-SXM4-80GB", fabric=None,
                      units={"nvidia-persistenced": True, "nvidia-fabricmanager": False, "nvidia-dcgm": True},
                      procs={p[0]: p[1:] for p in (DCGM, PERSISTENCED)}),
}


def whole(n: FakeNode, units: dict) -> bool:
    st = n.state()
    return st["units"] == units and all(g["pm"] == 1 for g in st["gpus"].values())


def reset(n: FakeNode, state_dir, targets=(1,)):
    return procedure(n.section(), targets, n.read_nvml, lambda line: None, Deadline.after(60),
                     state_dir=str(state_dir), read_procs=n.read_procs)


def held_node() -> Node:
    return Node("n1", "IDLE", frozenset({"DRAIN"}), HELD, "root", NOW - 9999, ("gpu",), "IDLE+DRAIN")


def may_resume(state_dir) -> Act:
    """What the drain policy does with a healthy run on the held node, given the journal."""
    memory = Memory(drained_at=NOW - 9999, reason=HELD, passes=5, cooldown_s=0)
    return decide(held_node(), Verdict.PASS, None, memory, NOW, SETTINGS, undo_pending=pending_note(str(state_dir))).act


def commands(shape: str, tmp_path) -> int:
    n = FakeNode(tmp_path / "count", **SHAPES[shape])
    _, out = reset(n, tmp_path / "count-state", (2,))
    assert out.ok
    return len(n.calls())


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_kill_at_every_command_of_the_reset_is_put_right_by_the_next_run_and_the_node_stays_out_until_then(
        tmp_path, shape):
    total = commands(shape, tmp_path)
    assert total >= 6  # show, persistence off, stop, reset, start, persistence on (more for a baseboard)
    seen_unwhole = 0
    for k in range(1, total + 1):
        for when in ("before", "after"):
            n = FakeNode(tmp_path / f"{k}-{when}", **SHAPES[shape])
            units = n.state()["units"]
            state = tmp_path / f"{k}-{when}-state"
            status = killed_at(n, k, when, lambda: reset(n, state, (2,)))
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, when, status)
            if not whole(n, units):
                seen_unwhole += 1
                # what the kill left changed is journaled: the node is not resumed meanwhile
                assert pending_note(str(state)) is not None, (k, when, n.calls())
                assert may_resume(state) is Act.KEEP
            lines: list[str] = []
            left = replay(str(state), n.section()["reset"], lambda text, loud=False: lines.append(text),
                          Deadline.after(30))
            assert left is None and whole(n, units), (k, when, n.calls(), lines)
            assert may_resume(state) is Act.RESUME
    assert seen_unwhole >= 4  # the kills did leave the node half-configured, at most steps


def test_the_next_hook_entry_replays_before_anything_else(tmp_path):
    """frame.run (health check, prolog, epilog): the flow's body finds the node whole."""
    from gpuhc.cli.common import SourceArgs, run_options_from
    from gpuhc.slurm.flows.frame import Flow, Outcome, run

    n = FakeNode(tmp_path / "node", **SHAPES["hopper"])
    units = n.state()["units"]
    state = tmp_path / "state"
    killed_at(n, 3, "after", lambda: reset(n, state))  # DCGM stopped, persistence of gpu1 off
    assert not whole(n, units) and pending_note(str(state))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({"slurm": {"remediation": n.section(), "log_file": str(tmp_path / "decisions.log"),
                                             "syslog": False, "scontrol": str(tmp_path / "no-scontrol")}}))
    opts = run_options_from(SourceArgs(config_path=str(cfg), state_dir=str(state), hostname="n1"), "prolog")
    seen = []

    def body(flow):
        seen.append(whole(n, units))
        return Outcome(0)

    out, code = run(Flow.for_command(opts, "gpuhc prolog", "prolog"), body, fail_open=True)
    assert seen == [True] and code == 0 and pending_note(str(state)) is None
    log = (tmp_path / "decisions.log").read_text()
    assert "reset undo: replaying what a killed reset left: start nvidia-dcgm: ok" in log
    assert "persistence-on 1: ok" in log


def test_an_undo_that_fails_keeps_the_node_out_until_a_later_run_carries_it_out(tmp_path):
    n = FakeNode(tmp_path / "node", **SHAPES["hopper"])
    units = n.state()["units"]
    state = tmp_path / "state"
    killed_at(n, 4, "after", lambda: reset(n, state))  # killed right after the reset itself
    n.change(fail=["start nvidia-dcgm"])  # the unit does not come back this time
    lines: list[str] = []
    log = lambda text, loud=False: lines.append(text)  # noqa: E731
    left = replay(str(state), n.section()["reset"], log, Deadline.after(30))
    assert left == "a GPU reset's undo is pending (start nvidia-dcgm)", lines
    assert n.state()["gpus"]["1"]["pm"] == 1  # what could be put back was
    memory = Memory(drained_at=NOW - 9999, reason=HELD, passes=5, cooldown_s=0)
    d = decide(held_node(), Verdict.PASS, None, memory, NOW, SETTINGS, undo_pending=left)
    assert d.act is Act.KEEP and d.why == "a GPU reset's undo is pending (start nvidia-dcgm): not resuming until it has run"
    n.change(fail=[])
    assert replay(str(state), n.section()["reset"], log, Deadline.after(30)) is None and whole(n, units)
    assert may_resume(state) is Act.RESUME


def test_a_reset_that_ends_by_itself_leaves_nothing_pending_on_success_and_on_failure(tmp_path):
    for name, fail in (("ok", []), ("failed", ["-r -i 1"])):
        n = FakeNode(tmp_path / name, **SHAPES["hopper"])
        n.change(fail=fail)
        state = tmp_path / f"{name}-state"
        _, out = reset(n, state)
        assert out.ok is (not fail) and pending_note(str(state)) is None
        assert json.loads((state / "reset-undo.json").read_text()) == {"entries": []}


def test_a_journal_that_cannot_be_written_changes_nothing_and_is_no_reason_to_reboot(tmp_path):
    n = FakeNode(tmp_path / "node", **SHAPES["hopper"])
    state = tmp_path / "state"
    state.write_text("")  # not a directory: the journal cannot be written there
    _, out = reset(n, state)
    assert not out.ok and out.retry and not out.fallthrough, out.detail
    assert not any(" -pm " in c or " stop " in c or " -r " in c for c in n.calls())


def test_a_replay_leaves_alone_the_entries_of_a_reset_still_running(tmp_path):
    """Another process's reset in progress (alive, same start time): not undone under it."""
    import subprocess

    state = tmp_path / "state"
    other = subprocess.Popen(["sleep", "30"])
    try:
        j = Journal(str(state))
        j.add("start", "nvidia-dcgm")
        with j.transaction() as doc:  # as that process wrote it
            from gpuhc.slurm.repair.nvml_yield import start_time

            doc["entries"][0].update(pid=other.pid, start=start_time("/proc", other.pid))
        lines: list[str] = []
        n = FakeNode(tmp_path / "node", **SHAPES["hopper"])
        left = replay(str(state), n.section()["reset"], lambda text, loud=False: lines.append(text),
                      Deadline.after(10))
        assert left and n.calls() == [] and "belongs to a reset still running" in lines[0]
    finally:
        other.kill()
        other.wait()


def test_entries_are_names_not_commands(tmp_path):
    """What is run comes from the config, never from the file: an entry that is not an undo gpuhc
    writes (a unit name with a slash, an argv) is not run and not pending."""
    state = tmp_path / "state"
    Journal(str(state)).add("start", "nvidia-dcgm")
    doc = json.loads((state / "reset-undo.json").read_text())
    doc["entries"] += [{"kind": "start", "target": "../../bin/sh"}, {"kind": "argv", "target": "rm -rf /"}]
    (state / "reset-undo.json").write_text(json.dumps(doc))
    assert pending_note(str(state)) == "a GPU reset's undo is pending (start nvidia-dcgm)"
    with pytest.raises(ValueError):
        Journal(str(state)).add("start", "-.mount; reboot")
