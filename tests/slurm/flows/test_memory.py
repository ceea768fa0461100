"""gpuhc/slurm/flows/memory.py owns ``slurm.nodes``, ``slurm.ladder`` and ``slurm.last`` in the node's
state document: what it stores reads back, a resume and a handover keep what they must, and no
other module touches those keys."""

from __future__ import annotations

import re
from types import SimpleNamespace

from gpuhc.slurm.repair.ladder import LadderMemory
from gpuhc.slurm.flows.memory import (
    forget_hold,
    load_ladder,
    load_memory,
    note_resumed,
    policy_memory,
    save_ladder,
    save_memory,
)
from gpuhc.slurm.policy.drain import Act, Decision, Memory
from gpuhc.state.node import StateStore
from tests.helpers.paths import REPO

ROOT = REPO / "gpuhc"


class Lines(list):
    def __call__(self, text, loud=False):
        self.append(text)


def _flow(tmp_path, now=1000.0, node="n1"):
    opts = SimpleNamespace(state_dir=str(tmp_path / "state"))
    return SimpleNamespace(opts=opts, node=node, stage="passive", log=Lines(), now=lambda: now)


HELD = Memory(drained_at=900.0, reason="gpuhc: xid79", passes=2, flaps=3, last_resume=100.0)


def test_memory_and_last_decision_read_back(tmp_path):
    f = _flow(tmp_path)
    save_memory(f, HELD, Decision(Act.KEEP, "still failing", HELD, HELD.reason))
    assert load_memory(f) == HELD
    doc = StateStore(f.opts.state_dir).read()
    assert doc["slurm"]["last"]["n1"] == {"stage": "passive", "time": 1000.0, "act": "keep", "why": "still failing"}
    assert load_memory(_flow(tmp_path, node="n2")) == Memory()  # per node


def test_a_resume_by_gpuhc_drops_the_hold_and_keeps_the_flaps(tmp_path):
    f = _flow(tmp_path, now=2000.0)
    save_memory(f, HELD, None)
    note_resumed(f)
    assert load_memory(f) == Memory(flaps=3, last_resume=2000.0)


def test_someone_elses_resume_keeps_gpuhcs_last_resume():
    doc = {}
    from gpuhc.slurm.flows.memory import set_policy_memory

    set_policy_memory(doc, "n1", HELD)
    forget_hold(doc, "n1")
    assert policy_memory(doc, "n1") == Memory(flaps=3, last_resume=100.0)


def test_the_ladder_memory_reads_back_and_a_broken_state_is_said(tmp_path):
    f = _flow(tmp_path)
    m = LadderMemory(resets=1, step="reset", since=5.0)
    save_ladder(f, m)
    assert load_ladder(f) == m
    blocked = _flow(tmp_path / "state" / "state.json")  # a file where the state directory should be
    save_memory(blocked, HELD, None)
    assert load_memory(blocked) == Memory() and any("state not saved" in line for line in blocked.log)


def test_no_other_module_reads_or_writes_the_keys():
    """Every access to slurm.nodes/ladder/last goes through gpuhc/slurm/flows/memory.py (issue 22)."""
    direct = re.compile(r"""["']slurm["']\s*[\]),].{0,40}?["'](nodes|ladder|last)["']""")
    found = []
    for path in ROOT.rglob("*.py"):
        if path.relative_to(ROOT).as_posix() == "slurm/flows/memory.py":
            continue
        text = path.read_text(encoding="utf-8")
        if direct.search(text) or 'setdefault("slurm"' in text:
            found.append(str(path.relative_to(ROOT)))
    assert found == []
