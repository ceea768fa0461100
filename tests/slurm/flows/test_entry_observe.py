"""Observe mode (`slurm.mode: observe`): every flow decides as in enforce mode, says what it would
do, and sends nothing to Slurm; the admin's commands too. What would have happened reads back
from the event log (`fleet observed`, `drain-report --observed`).

Under real Slurm (prolog exit 0, no "Prolog error" drain): tests/slurm_real/test_repair.py.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.helpers.minislurm import OK, XID, MiniSlurm, config, run

from gpuhc.model.deadline import Deadline
from gpuhc.export.eventlog import append_event
from gpuhc.fleet.observed import read_observed, table
from gpuhc.slurm.act.actuator import Actuator
from gpuhc.slurm.repair.admin import reboot_for_retest, release, retire
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.act.scontrol import Scontrol

REASON = "gpuhc: xid79 gpu3 GPU has fallen off the bus"


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog"])
def test_a_failing_run_decides_to_drain_and_sends_nothing(tmp_path, monkeypatch, stage):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    out = run(tmp_path, monkeypatch, stage, s, [XID], cfg=config(tmp_path, mode="observe"),
              env={"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "3"})
    assert out.decision.act is Act.DRAIN and out.decision.reason == REASON
    assert out.extra["observed"] == "drain" and not out.acted
    assert s.updates() == [] and s.nodes["n1"] == ["IDLE", None]
    assert any(line.endswith(f": observe mode: would drain n1: failed checks: {REASON}") for line in out.lines)
    # Nothing remembered: the next run decides the same again (and a prolog still needs no read).
    again = run(tmp_path, monkeypatch, stage, s, [XID], cfg=config(tmp_path, mode="observe"),
                env={"SLURM_JOB_ID": "8", "SLURM_JOB_GPUS": "3"})
    assert again.extra["observed"] == "drain" and s.updates() == []


def test_a_node_gpuhc_holds_would_be_resumed_and_a_lemon_would_be_retired(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])  # drained while enforcing; then the site switches
    drained = list(s.updates())
    out = run(tmp_path, monkeypatch, "passive", s, [OK], cfg=config(tmp_path, mode="observe", resume_after=1))
    assert out.decision.act is Act.RESUME and out.extra["observed"] == "resume" and s.updates() == drained
    assert s.nodes["n1"] == ["IDLE+DRAIN", REASON]
    assert any(": observe mode: would resume n1: resuming: 1 healthy runs" in line for line in out.lines)

    lines: list[str] = []
    act = Actuator(Scontrol(run=s, deadline=Deadline.after(3600)), observe=True, log=lambda text, **_: lines.append(text))
    assert not act.drain("n1", "gpuhc: RETIRED lemon node n1: 3 drains in 30d (xid)", "lemon")
    act.reboot("n1", REASON, "DOWN")
    assert s.updates() == drained and [line.split(":")[0] for line in lines] == ["observe mode"] * 2
    assert lines[0].startswith("observe mode: would retire n1") and lines[1].startswith("observe mode: would reboot n1")


def test_the_admins_commands_say_what_they_would_do(tmp_path):
    s = MiniSlurm({"n1": ("IDLE+DRAIN", REASON), "n2": ("IDLE", None)})
    act = Actuator(Scontrol(run=s, deadline=Deadline.after(3600)), observe=True)
    for results in (release(act, ["n1"]), retire(act, ["n1"]), reboot_for_retest(act, ["n1"], "DOWN")):
        assert results[0].ok and results[0].message.startswith("observe mode, nothing sent: would be "), results
    assert not [c for c in s.calls if c[1] in ("update", "reboot")] and s.nodes["n1"] == ["IDLE+DRAIN", REASON]


def test_mode_is_validated_and_defaults_to_enforce(tmp_path):
    from gpuhc.config.load import defaults, load_config, schema
    from gpuhc.errors import EXIT_USAGE, ConfigError

    assert defaults(schema())["slurm"]["mode"] == "enforce"
    bad = tmp_path / "gpuhc.yaml"
    bad.write_text("slurm:\n  mode: dry-run\n")
    with pytest.raises(ConfigError, match=r"gpuhc\.yaml:2: slurm\.mode: must be one of enforce, observe") as e:
        load_config(str(bad))
    assert e.value.exit_code == EXIT_USAGE


def _observed_line(path, node, act, reason, t, stage="passive"):
    append_event(str(path), {"node": node, "stage": stage, "started": t,
                             "slurm": {"action": act, "acted": False, "observed": act, "reason": reason}})


def test_fleet_observed_groups_runs_per_node_and_act_and_escapes_names(tmp_path):
    log = tmp_path / "events.jsonl"
    _observed_line(log, "n1", "drain", REASON, 100.0)
    _observed_line(log, "n1", "drain", REASON, 200.0, "prolog")
    _observed_line(log, "n2\x1b[31m", "drain", "gpuhc: RETIRED lemon node n2: 3 drains in 30d (xid)", 150.0)
    _observed_line(log, "n3", "drain", REASON, 10.0)  # before the window
    append_event(str(log), {"node": "n4", "started": 300.0, "slurm": {"action": "drain", "acted": True}})
    problems: list[str] = []
    rows = read_observed([str(log)], 50.0, problems)
    assert [(r.node, r.act, r.runs, r.first, r.last, r.stages) for r in rows] == [
        ("n1", "drain", 2, 100.0, 200.0, ("passive", "prolog")), ("n2\x1b[31m", "retire", 1, 150.0, 150.0, ("passive",))]
    text = "\n".join(table(rows))
    assert "\x1b" not in text and "n2\\x1b(31m" in text.replace("[", "(") and problems == []


def test_fleet_observed_cli_and_drain_report_observed(tmp_path):
    import time

    from tests.helpers.cli import gpuhc, one_line_error

    from gpuhc.cli import cli

    log = tmp_path / "events.jsonl"
    _observed_line(log, "n1", "drain", REASON, time.time() - 60)
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(f"output:\n  event_log: {log}\n")
    got = CliRunner().invoke(cli, ["fleet", "observed", "--json", "--config", str(cfg)])
    assert got.exit_code == 0, got.output
    assert [(r["node"], r["act"], r["runs"]) for r in json.loads(got.output)["nodes"]] == [("n1", "drain", 1)]
    got = CliRunner().invoke(cli, ["drain-report", "--observed", "--config", str(cfg)])
    assert got.exit_code == 0 and "n1" in got.output and "drain" in got.output, got.output
    got = CliRunner().invoke(cli, ["drain-report", "--observed", "--config", str(cfg), "-o", "act,node", "--parsable"])
    assert got.exit_code == 0 and got.output == "ACT|NODE\ndrain|n1\n", got.output
    cfg.write_text("slurm:\n  syslog: false\n")
    assert "no event log to read" in one_line_error(gpuhc("fleet", "observed", "--config", str(cfg)))
    assert "no event log to read" in one_line_error(gpuhc("fleet", "lemons", "--config", str(cfg)))
