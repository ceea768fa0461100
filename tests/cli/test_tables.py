"""-o/--format, --parsable and --noheader on the table commands (gpuhc/cli/tables.py; issue 50,
point 7): one implementation, sinfo's and sacct's habits."""

from __future__ import annotations

import json
import time

import click
import pytest

from gpuhc.cli.tables import render
from tests.helpers.cli import gpuhc

COLUMNS = {"node": 8, "act": 6, "reason": 0}
ROWS = [{"node": "gpu001", "act": "drain", "reason": "gpuhc: xid Xid 79 | on gpu3"},
        {"node": "gpu002", "act": "resume", "reason": None}]


def test_plain_parsable_noheader_and_chosen_columns():
    assert render(ROWS, COLUMNS, ["node", "act", "reason"], None, False, False) == [
        "NODE     ACT    REASON", "gpu001   drain  gpuhc: xid Xid 79 | on gpu3", "gpu002   resume -"]
    assert render(ROWS, COLUMNS, ["node", "act"], "reason,node", True, True) == [
        "gpuhc: xid Xid 79 / on gpu3|gpu001", "-|gpu002"]  # the separator never appears inside a field


def test_an_unknown_column_is_a_usage_error_naming_the_columns():
    with pytest.raises(click.BadParameter, match="nodes: not a column \\(these are: node, act, reason\\)"):
        render(ROWS, COLUMNS, ["node"], "nodes", False, False)


def test_fleet_observed_and_config_errors_take_them(tmp_path):
    log = tmp_path / "events.jsonl"
    now = time.time()
    docs = [{"node": "gpu001", "started": now - 60, "stage": "passive",
             "slurm": {"action": "none", "observed": "drain", "reason": "gpuhc: xid Xid 79 on gpu3"}},
            {"node": "gpu002", "started": now - 60, "stage": "passive", "results": [],
             "config_error": {"error": "gpuhc.yaml:3: sweeep: unknown key", "file": "gpuhc.yaml", "line": 3,
                              "using": "built-in defaults (observe mode)"}, "slurm": {"action": "none"}}]
    log.write_text("".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("{}\n")
    cp = gpuhc("fleet", "observed", "--config", str(cfg), "--event-log", str(log), "-o", "node,act,reason",
               "--parsable", "--noheader")
    assert cp.returncode == 0 and cp.stdout == "gpu001|drain|gpuhc: xid Xid 79 on gpu3\n", cp.stdout + cp.stderr
    cp = gpuhc("fleet", "config-errors", "--config", str(cfg), "--event-log", str(log), "-o", "node,using",
               "--parsable")
    assert cp.returncode == 1 and cp.stdout == "NODE|USING\ngpu002|built-in defaults (observe mode)\n", cp.stdout
    cp = gpuhc("fleet", "observed", "--config", str(cfg), "--event-log", str(log), "-o", "nope")
    assert cp.returncode == 2 and "nope: not a column" in cp.stderr and "Traceback" not in cp.stderr


@pytest.mark.parametrize("argv", [["quarantine", "list"], ["fleet", "observed"], ["fleet", "config-errors"],
                                  ["fleet", "lemons"], ["drain-report"]])
def test_every_table_command_says_the_three_options(argv):
    text = gpuhc(*argv, "-h").stdout
    assert "-o, --format" in text and "--parsable" in text and "--noheader" in text, text


def test_fleet_lemons_takes_them(tmp_path):
    from gpuhc.export.eventlog import append_event
    from gpuhc.slurm.repair.lemons import Fault

    log, now = tmp_path / "events.jsonl", time.time()
    for t, check in ((now - 3 * 86400, "xid"), (now - 2 * 86400, "ecc"), (now - 86400, "xid")):
        append_event(str(log), {"node": "dev0", "started": t, "slurm": {"acted": True,
                                                                       "fault": Fault(t, "dev0", check).to_dict()}})
    cfg = tmp_path / "gpuhc.yaml"
    (tmp_path / "topology.conf").write_text("SwitchName=s0 Nodes=dev0\n")  # no Slurm asked
    cfg.write_text(f"fleet:\n  switch:\n    topology_file: {tmp_path}/topology.conf\n")
    cp = gpuhc("fleet", "lemons", "--config", str(cfg), "--event-log", str(log), "-o", "key,standing,drains,checks",
               "--parsable", "--noheader")
    assert cp.returncode == 1 and cp.stdout == "dev0|LEMON|3|ecc,xid\n", cp.stdout + cp.stderr
