"""`gpuhc fleet` on bad input: one clear line and exit 2, never a traceback; and `stats` from
event logs alone, as a site without slurmdbd runs it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.export.eventlog import append_event
from tests.helpers.cli import gpuhc, one_line_error


def _config(tmp_path, text: str = "{}\n") -> str:
    p = tmp_path / "gpuhc.yaml"
    p.write_text(text)
    return str(p)


def test_bad_window_is_a_usage_error(tmp_path):
    assert "cannot read duration '3x'" in one_line_error(gpuhc("fleet", "stats", "--since", "3x", "--config",
                                                                _config(tmp_path)))


def test_no_history_at_all_is_said_in_one_line(tmp_path):
    assert "no history to read" in one_line_error(gpuhc("fleet", "stats", "--no-slurm", "--config", _config(tmp_path)))


def test_unreadable_topology_file_names_the_file(tmp_path):
    link = tmp_path / "topology.conf"
    link.symlink_to("/etc/passwd")
    err = one_line_error(gpuhc("fleet", "incidents", "--topology", str(link), "--config", _config(tmp_path)))
    assert str(link) in err and "symbolic link" in err


def test_bad_fleet_config_names_the_key(tmp_path):
    cfg = _config(tmp_path, "fleet:\n  suspects:\n    alpha: 2\n")
    err = one_line_error(gpuhc("fleet", "stats", "--no-slurm", "--config", cfg))
    assert "gpuhc.yaml:3: fleet.suspects.alpha" in err


def test_stats_from_event_logs_only(tmp_path):
    import time

    now = time.time()
    log = tmp_path / "events.jsonl"
    for node, t0 in (("gpu001", now - 5 * 86400), ("gpu002", now - 2 * 86400)):
        for t, act, reason in ((t0, "drain", "gpuhc: ecc gpu1 uncorrectable"), (t0 + 7200, "resume", None)):
            append_event(str(log), {"node": node, "stage": "passive", "started": t, "results": [],
                                    "slurm": {"action": act, "acted": True, "reason": reason}})
    cfg = _config(tmp_path, f"output:\n  event_log: {log}\n")
    res = CliRunner().invoke(cli, ["fleet", "stats", "--no-slurm", "--since", "7d", "--json", "--config", cfg])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    fleet = next(r for r in doc["rows"] if r["kind"] == "fleet")
    assert (fleet["drains"], fleet["nodes"], round(fleet["mttr_hours"], 3)) == (2, 2, 2.0)
    table = CliRunner().invoke(cli, ["fleet", "stats", "--no-slurm", "--since", "7d", "--config", cfg])
    assert table.exit_code == 0 and "per cause" in table.output and "ecc" in table.output


def test_the_readmes_fleet_risk_line_runs_as_written():
    """README's example (it once lacked the rate and exited 2)."""
    import re
    import shlex

    from tests.helpers.paths import REPO

    (line,) = re.findall(r"`(gpuhc fleet risk --gpus \d+[^`]*)`", (REPO / "README.md").read_text())
    res = CliRunner().invoke(cli, shlex.split(line)[1:])
    assert res.exit_code == 0, res.output
    assert "P(interrupted)" in res.output and "77.1%" in res.output
