"""The frame every Slurm flow shares (gpuhc/slurm/flows/frame.py): :func:`run` runs a flow and then its
one post-decision step, which writes the event-log line (built by gpuhc/export/eventlog.py), and
fires every hook the run produced, in order, from one place. The hooks are real executables."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests.helpers.hooks import _events, recorder  # noqa: F401 - the recording hook fixture
from tests.helpers.minislurm import OUR_REASON, XID, MiniSlurm, config, flow

from gpuhc.slurm.flows import entry
from gpuhc.slurm.flows.frame import Outcome, run
from tests.helpers.paths import REPO


def _hooked(tmp_path, hook):
    cfg = config(tmp_path)
    cfg.data["hooks"] = {"commands": [[hook]], "events": ["drain", "remediation", "resume", "retire",
                                                         "breaker_trip"], "timeout_s": 5.0}
    cfg.data["output"]["event_log"] = str(tmp_path / "runs.jsonl")
    return cfg


def test_a_drain_is_logged_and_its_hook_fired_after_the_flow(tmp_path, monkeypatch, recorder):  # noqa: F811
    hook, got = recorder
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    _, f = flow(tmp_path, monkeypatch, "passive", slurm, [XID], cfg=_hooked(tmp_path, hook))
    out, code = run(f, entry.healthcheck, fail_open=False)
    assert code == 1 and out.acted and slurm.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]
    assert [(e["event"], e["node"], e["stage"], e["reason"]) for e in _events(got)] == [
        ("drain", "n1", "passive", OUR_REASON)]
    line = json.loads((tmp_path / "runs.jsonl").read_text())
    assert line["node"] == "n1" and line["slurm"]["action"] == "drain" and line["slurm"]["acted"] is True
    assert line["slurm"]["reason"] == OUR_REASON and line["results"][0]["check"] == "xid"


def test_a_steps_events_fire_after_the_decisions_in_the_order_asked(tmp_path, monkeypatch, recorder):  # noqa: F811
    """The remediation ladder asks for its hooks through Outcome.events; nothing fires them
    before the run is over."""
    hook, got = recorder
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    _, f = flow(tmp_path, monkeypatch, "passive", slurm, [XID], cfg=_hooked(tmp_path, hook))
    seen_during = []

    def body(fl):
        out = entry.healthcheck(fl)
        out.events += [("remediation", {"node": "n1", "why": "reset 1/2"}), ("resume", {"node": "n1", "why": "ok"})]
        seen_during.append(len(_events(got)))
        return out

    run(f, body, fail_open=False)
    assert seen_during == [0]
    assert [e["event"] for e in _events(got)] == ["drain", "remediation", "resume"]
    assert any("event remediation: reset 1/2" in line for line in f.log.lines)


def test_a_crash_is_neither_published_nor_hooked(tmp_path, monkeypatch, recorder):  # noqa: F811
    hook, got = recorder
    _, f = flow(tmp_path, monkeypatch, "prolog", None, [XID], cfg=_hooked(tmp_path, hook))

    def body(fl):
        raise RuntimeError("a bug")

    assert run(f, body, fail_open=True) == (None, 0)
    assert _events(got) == [] and not (tmp_path / "runs.jsonl").exists()
    assert any("internal error: RuntimeError: a bug" in line for line in f.log.lines)


def test_observe_mode_fails_no_job(tmp_path, monkeypatch):
    _, f = flow(tmp_path, monkeypatch, "prolog", None, [XID], cfg=config(tmp_path, mode="observe"))
    out, code = run(f, lambda fl: Outcome(1, fl.log.lines), fail_open=True)
    assert (out.exit_code, code) == (1, 0) and "observe mode: exit 0 instead of 1" in f.log.lines[-1]


def _imports(path: Path, known: set[str]) -> set[str]:
    """The gpuhc.slurm modules ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found.update(n for n in names if n in known)
    return found


def test_no_module_of_slurm_imports_itself_round_a_circle():
    """entry.py and remediate.py imported each other (issue 22); the flows' frame is frame.py now.
    Any circle among gpuhc/slurm's modules, in every folder, at any depth, fails here with its members."""
    root = REPO / "gpuhc" / "slurm"
    paths = {"gpuhc.slurm." + ".".join(p.relative_to(root).with_suffix("").parts): p
             for p in root.rglob("*.py") if p.stem != "__init__"}
    assert "gpuhc.slurm.repair.remediate" in paths and "gpuhc.slurm.settings" in paths
    graph = {m: _imports(p, set(paths)) - {m} for m, p in paths.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m == goal:
                return True
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return False

    assert sorted(m for m in graph if reaches(m, m)) == []
    assert "gpuhc.slurm.flows.entry" not in graph["gpuhc.slurm.repair.remediate"]


def test_a_bug_after_the_decision_keeps_the_decisions_exit_code(tmp_path, monkeypatch):
    """Issue 30: finish() and the report's rendering ran outside the guard, so a bug there was a
    traceback and exit 1: "Prolog error" on a healthy node. Now it is said and the exit stays."""
    from tests.helpers.minislurm import OK

    def broken(*a, **k):
        raise KeyError("a field the event log did not expect")

    monkeypatch.setattr("gpuhc.slurm.flows.frame.finish", broken)
    _, f = flow(tmp_path, monkeypatch, "prolog", None, [OK], env={"SLURM_JOB_ID": "5"})
    rendered = []
    out, code = run(f, entry.prolog, fail_open=True, render=lambda o: rendered.append(1) or broken())
    assert code == 0 and out is not None and rendered == [1]
    said = [line for line in out.lines if "internal error after the decision" in line]
    assert len(said) == 2 and all("the decision stands" in x for x in said), out.lines


def test_breaker_metric_exports_the_retirements_alert(tmp_path):
    """The breaker count a run made writes its retirements and their ALERT next to the drain cap."""
    from gpuhc.slurm.policy.breaker import BreakerState
    from gpuhc.slurm.flows.frame import breaker_metric

    cfg = config(tmp_path)
    cfg.section("output")["prometheus_textfile"] = str(tmp_path / "prom" / "gpuhc.prom")
    state = BreakerState(False, 1, 10, 2, "cluster", retired=1, retired_cap=1)
    assert state.retired_alert and breaker_metric(Outcome(0, breaker=state), cfg) is None
    text = (tmp_path / "prom" / "gpuhc-breaker.prom").read_text()
    assert "gpuhc_breaker_retired_alert 1.0" in text and "gpuhc_breaker_retired_cap 1.0" in text
