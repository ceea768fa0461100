"""`gpuhc drain-report` end to end: reading files, every output format, filters, errors, and the
live path with a scripted scontrol (the real one is exercised in tests/slurm_real/test_drain_report.py).
End to end means both halves of the command: its options and input (gpuhc/cli/report_cmd.py) and
its output formats (gpuhc/cli/report_render.py), which one invocation always runs together."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.cli.report_cmd import read_live
from gpuhc.cli.report_render import render_rich
from gpuhc.errors import SlurmError
from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.slurm.report.build import build_report
from gpuhc.slurm.act.scontrol import Scontrol
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"
ONELINE = str(FIX / "show_node_oneline.txt")
NOW = "2024-06-11T12:00:00"


def invoke(*args: str):
    result = CliRunner().invoke(cli, ["drain-report", *args], catch_exceptions=False)
    return result


def gpuhc(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuhc", "drain-report", *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


def test_plain_text_when_not_a_tty():
    r = invoke("--from-file", ONELINE, "--now", NOW)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    assert lines[0] == ("gpuhc drain-report: 6 of 7 nodes unavailable (down 1, fail 1, draining 1, drained 3); "
                        "reasons set by gpuhc 2, slurm 2, admin 2")
    header = next(line for line in lines if line.startswith("CAUSE"))
    assert header.split() == ["CAUSE", "OWNER", "COUNT", "STATE", "NODES", "SINCE", "AGE", "SET", "BY", "REASON"]
    xid = next(line for line in lines if line.startswith("xid"))
    assert "gpu002" in xid and "1h36m" in xid and "[fallen off the bus]" in xid
    assert any(line.startswith("by cause: admin 2") for line in lines)
    assert any(line.split() == ["gpu", "6", "7"] for line in lines)


def test_json_output():
    r = invoke("--from-file", ONELINE, "--now", NOW, "--json")
    doc = json.loads(r.output)
    assert doc["source"] == ONELINE and doc["unavailable"] == 6 and doc["total_nodes"] == 7
    causes = {g["cause"]: g["count"] for g in doc["groups"]}
    assert causes == {"admin": 2, "not responding": 1, "prolog error": 1, "remap": 1, "xid": 1}
    assert {n["node"]: n["owner"] for n in doc["nodes"]}["gpu003"] == "admin"
    assert doc["partitions"] == {"debug": {"unavailable": 1, "total": 1}, "gpu": {"unavailable": 6, "total": 7}}


def test_csv_output_one_line_per_node():
    r = invoke("--from-file", ONELINE, "--now", NOW, "--csv")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert [row["node"] for row in rows] == ["gpu002", "gpu003", "gpu004", "gpu005", "gpu006", "gpu007"]
    gpu002 = rows[0]
    assert gpu002["cause"] == "xid" and gpu002["owner"] == "gpuhc" and gpu002["partitions"] == "gpu,debug"
    assert gpu002["since"] == "2024-06-11T10:23:45" and gpu002["age_s"] == "5775"
    assert rows[1]["reason"] == "Carte réseau HS — ticket #4711 State=ask Jürgen"


def test_filters_from_the_command_line():
    def nodes(*args):
        return [n["node"] for n in json.loads(invoke("--from-file", ONELINE, "--now", NOW, "--json", *args).stdout)["nodes"]]

    assert nodes("--state", "down,fail") == ["gpu004", "gpu006"]
    assert nodes("--state", "drain", "--owner", "gpuhc") == ["gpu002", "gpu005"]
    assert nodes("--owner", "slurm") == ["gpu004", "gpu007"]
    assert nodes("--older-than", "2h") == ["gpu003", "gpu004", "gpu006"]
    assert nodes("--newer-than", "90m") == ["gpu005", "gpu007"]
    assert nodes("--partition", "debug") == ["gpu002"]
    assert nodes("--partition", "DEBUG") == []  # Slurm partition names are case-sensitive


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIX.iterdir() if p.suffix in (".txt", ".json")))
def test_every_fixture_format_is_read(fixture):
    doc = json.loads(invoke("--from-file", str(FIX / fixture), "--json", "--now", NOW).output)
    assert doc["total_nodes"] == len(parse_nodes((FIX / fixture).read_text()))
    assert doc["unavailable"] >= 1


def test_stdin():
    p = gpuhc("--from-file", "-", "--json", stdin=(FIX / "sinfo_json_v0038.json").read_text())
    assert p.returncode == 0 and json.loads(p.stdout)["source"] == "stdin"


def test_rich_table_on_a_terminal():
    nodes = parse_nodes((FIX / "show_node_oneline.txt").read_text())
    report = build_report(nodes, 1718107200.0)
    buf = io.StringIO()
    render_rich(report, "file", False, buf, width=200)
    text = buf.getvalue()
    assert "6 of 7 nodes unavailable" in text and "not responding" in text and "gpu004" in text
    assert "[fallen off the" in text  # reasons are text, not rich markup


def test_rich_table_caps_rows_per_cause():
    from gpuhc.slurm.read.nodes import Node

    nodes = [Node(f"n{i}", "IDLE", frozenset({"DRAIN"}), f"gpuhc: xid79 gpu{i}", "root", 1.0) for i in range(40)]
    buf = io.StringIO()
    render_rich(build_report(nodes, 100.0), "file", False, buf, width=200)
    assert "25 more rows (--all-rows)" in buf.getvalue()
    buf = io.StringIO()
    render_rich(build_report(nodes, 100.0), "file", True, buf, width=200)
    assert "more rows" not in buf.getvalue() and "gpu39" in buf.getvalue()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--older-than", "soon"], "cannot read duration 'soon'"),
        (["--state", "idle"], "unknown --state idle"),
        (["--owner", "root"], "unknown --owner root"),
        (["--json", "--csv"], "choose one of --json, --csv and -o/--parsable"),
        (["--now", "yesterday"], "neither epoch seconds nor ISO 8601"),
    ],
)
def test_bad_options_exit_2_with_a_message(args, needle):
    p = gpuhc("--from-file", ONELINE, *args)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_unreadable_and_garbage_files(tmp_path):
    p = gpuhc("--from-file", str(tmp_path / "missing.txt"))
    assert p.returncode == 2 and "cannot open" in p.stderr and "missing.txt" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"name": "x", "state": 7}]}')
    p = gpuhc("--from-file", str(bad))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"gpuhc: error: {bad}: no Slurm node listing found")
    assert "line 1: skipped a JSON block gpuhc cannot read: scontrol/slurmrestd node JSON, nodes[0] (x): `state` must be" in p.stderr


# ---------------------------------------------------------------------------- live, scripted


class ScriptedScontrol:
    """Plays back scontrol answers by argv; records what was asked."""

    def __init__(self, answers: dict[str, object]):
        self.answers, self.asked = answers, []

    def __call__(self, argv: list[str], timeout: float):
        self.asked.append(argv)
        answer = self.answers[" ".join(argv[1:])]
        if isinstance(answer, BaseException):
            raise answer
        return answer


JSON_ARGS = "--all --json show node"
TEXT_ARGS = "--all --oneliner show node"


def test_live_prefers_the_oneliner_text():
    run = ScriptedScontrol({TEXT_ARGS: (0, (FIX / "show_node_oneline.txt").read_text(), "")})
    nodes, source = read_live(5, Scontrol(run=run))
    assert source == "scontrol --oneliner show node" and len(nodes) == 7
    assert run.asked == [["scontrol", "--all", "--oneliner", "show", "node"]]


def test_live_falls_back_to_json_when_the_text_is_unreadable():
    run = ScriptedScontrol({
        TEXT_ARGS: (0, "Nodes as a future Slurm might print them\n", ""),
        JSON_ARGS: (0, (FIX / "scontrol_json_2311.json").read_text(), ""),
    })
    nodes, source = read_live(5, Scontrol(run=run))
    assert source == "scontrol --json show node" and [n.name for n in nodes] == ["c1", "c2", "c3"]
    assert len(run.asked) == 2


def test_live_both_unreadable_names_both_errors():
    run = ScriptedScontrol({
        TEXT_ARGS: (0, "garbage\n", ""),
        JSON_ARGS: (1, "", "scontrol: unrecognized option '--json'"),
    })
    with pytest.raises(SlurmError, match=r"unreadable answer: .*not a Slurm node listing.*unrecognized option"):
        read_live(5, Scontrol(run=run))


def test_live_timeout_is_not_retried():
    run = ScriptedScontrol({TEXT_ARGS: subprocess.TimeoutExpired(["scontrol"], 5)})
    with pytest.raises(SlurmError, match="no answer within"):
        read_live(5, Scontrol(run=run))
    assert len(run.asked) == 1


def test_live_slurmctld_down_names_the_error_and_asks_once():
    msg = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    run = ScriptedScontrol({TEXT_ARGS: (1, "", msg), JSON_ARGS: (1, "", msg)})
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        read_live(5, Scontrol(run=run))
    assert len(run.asked) == 1


def test_live_missing_scontrol(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "gpuhc", "drain-report", "--timeout", "2"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.returncode == 3 and "scontrol not found" in p.stderr and "Traceback" not in p.stderr
