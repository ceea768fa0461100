"""`gpuhc drain-report` groups gpuhc drains of one check under one leaf switch into one
suspect-switch incident (docs/repair.md), shown before the per-cause groups in every format.

The node listing is the real `scontrol -o show node` line of tests/fixtures/slurm (gpu002, a
gpuhc drain) renamed onto the nodes of topology.conf(5)'s tree example
(tests/fixtures/topology), with the reason and its time changed per node."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.cli.report_cmd import read_topology
from gpuhc.cli.report_render import render_rich
from gpuhc.fleet.switches import read_topology_conf
from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.fleet.switches import failures_from_nodes, group_by_switch
from gpuhc.slurm.report.build import build_report, with_incidents
from gpuhc.slurm.act.scontrol import Scontrol
from tests.helpers.paths import FIXTURES

FIX = FIXTURES
TREE = str(FIX / "topology" / "topology-tree.conf")
NOW = "2024-06-11T12:00:00"
IB = "gpuhc: infiniband mlx5_0/1 DOWN (physical state Polling)"


def listing(drains: dict[str, tuple[str, str]]) -> str:
    """{node: (reason, HH:MM:SS on 2024-06-11)} as `scontrol -o show node` lines."""
    real = (FIX / "slurm" / "show_node_oneline.txt").read_text().splitlines()[1]  # gpu002, drained by gpuhc
    out = []
    for node, (reason, hms) in drains.items():
        line = real.replace("gpu002", node)
        line = re.sub(r"Reason=.*$", f"Reason={reason} [root@2024-06-11T{hms}]", line)
        out.append(line)
    return "\n".join(out) + "\n"


# dev1, dev2, dev4 (leaf s0) lose IB within five minutes; dev7 (s1) too, alone under its switch;
# dev3 (s0) fails another check; dev5 (s0) lost IB hours earlier, outside the window.
DRAINS = {
    "dev1": (IB, "10:00:00"), "dev2": (IB, "10:02:00"), "dev4": (IB, "10:05:00"),
    "dev7": (IB, "10:01:00"), "dev3": ("gpuhc: xid79 gpu3", "10:03:00"), "dev5": (IB, "06:00:00"),
}


@pytest.fixture()
def dump(tmp_path) -> str:
    path = tmp_path / "nodes.txt"
    path.write_text(listing(DRAINS))
    return str(path)


def invoke(*args: str):
    return CliRunner().invoke(cli, ["drain-report", *args], catch_exceptions=False)


def test_one_incident_and_no_per_node_noise(dump):
    r = invoke("--from-file", dump, "--topology", TREE, "--now", NOW, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (inc,) = doc["incidents"]
    assert (inc["kind"], inc["switch"], inc["check"], inc["nodes"]) == ("suspect_switch", "s0", "infiniband",
                                                                       ["dev1", "dev2", "dev4"])
    assert inc["last"] - inc["first"] == 300
    groups = {g["cause"]: sorted(r["nodes"] for r in g["rows"]) for g in doc["groups"]}
    assert groups == {"infiniband": ["dev[5,7]"], "xid": ["dev3"]}  # dev[1-2,4] only under s0
    assert {n["node"]: n["incident"] for n in doc["nodes"]} == {
        "dev1": "s0", "dev2": "s0", "dev3": None, "dev4": "s0", "dev5": None, "dev7": None}
    assert doc["unavailable"] == 6  # every node still listed


def test_plain_text_names_the_switch_before_the_causes(dump):
    out = invoke("--from-file", dump, "--topology", TREE, "--now", NOW).stdout
    line = next(x for x in out.splitlines() if x.startswith("suspect switch"))
    assert line == "suspect switch s0: 3 nodes under it failed infiniband within 300s (dev[1-2,4])"
    assert out.index(line) < out.index("CAUSE")
    assert "by cause: switch s0 3, infiniband 2, xid 1" in out


def test_rich_table_puts_the_incident_first(dump):
    nodes = parse_nodes(Path(dump).read_text())
    report = build_report(nodes, 1718100000.0)
    found, _ = group_by_switch(failures_from_nodes(nodes), read_topology_conf(TREE), 3, 1800)
    report = with_incidents(report, found)
    buf = io.StringIO()
    render_rich(report, "test", False, buf, width=160)
    text = buf.getvalue()
    assert "suspect switch s0" in text and text.index("suspect switch s0") < text.index("xid")
    assert "infiniband failed on 3 nodes under it within 300s" in " ".join(text.split())


def test_csv_and_fields_name_the_incident(dump):
    rows = list(csv.DictReader(io.StringIO(invoke("--from-file", dump, "--topology", TREE, "--now", NOW,
                                                  "--csv").stdout)))
    assert {r["node"]: r["incident"] for r in rows} == {
        "dev1": "s0", "dev2": "s0", "dev3": "", "dev4": "s0", "dev5": "", "dev7": ""}
    out = invoke("--from-file", dump, "--topology", TREE, "-o", "node,incident", "--parsable", "--noheader").stdout
    assert "dev4|s0\n" in out and "dev7|\n" in out


def test_thresholds_come_from_the_fleet_section(dump, tmp_path):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("fleet:\n  switch:\n    min_nodes: 4\n    window_s: 1800\n")
    cfg.chmod(0o644)
    doc = json.loads(invoke("--from-file", dump, "--topology", TREE, "--config", str(cfg), "--json").stdout)
    assert doc["incidents"] == []  # three nodes are not four
    cfg.write_text("fleet:\n  switch:\n    min_nodes: 3\n    window_s: 120\n")
    doc = json.loads(invoke("--from-file", dump, "--topology", TREE, "--config", str(cfg), "--json").stdout)
    assert doc["incidents"] == []  # five minutes apart is not two
    cfg.write_text("fleet:\n  switch:\n    min_nodes: 2\n    window_s: 120\n")
    doc = json.loads(invoke("--from-file", dump, "--topology", TREE, "--config", str(cfg), "--json").stdout)
    assert [i["nodes"] for i in doc["incidents"]] == [["dev1", "dev2"]]


def test_without_topology_a_saved_dump_is_not_grouped(dump):
    doc = json.loads(invoke("--from-file", dump, "--json").stdout)
    assert doc["incidents"] == [] and all(n["incident"] is None for n in doc["nodes"])


def test_saved_scontrol_show_topology_output_reads_too(dump, tmp_path):
    # the layout `scontrol show topology` prints (Level, LinkSpeed), for the same tree
    saved = tmp_path / "topo.txt"
    saved.write_text("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=dev[0-5]\n"
                     "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=dev[6-11]\n"
                     "SwitchName=s3 Level=1 LinkSpeed=1 Nodes=dev[0-11] Switches=s[0-1]\n")
    doc = json.loads(invoke("--from-file", dump, "--topology", str(saved), "--json").stdout)
    assert [i["switch"] for i in doc["incidents"]] == ["s0"]


def test_bad_topology_file_is_a_one_line_error(dump, tmp_path):
    link = tmp_path / "link.conf"
    link.symlink_to(TREE)
    for path, words in ((str(tmp_path / "missing.conf"), "cannot open"), (str(link), "link")):
        p = subprocess.run([sys.executable, "-m", "gpuhc", "drain-report", "--from-file", dump, "--topology", path],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "--topology" in p.stderr and words in p.stderr and "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty.conf"
    empty.write_text("# no switches\n")
    r = CliRunner().invoke(cli, ["drain-report", "--from-file", dump, "--topology", str(empty)])
    assert r.exit_code == 0 and "not grouped by switch" in r.output


class Scripted:
    def __init__(self, answer):
        self.answer = answer

    def __call__(self, argv, timeout):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_live_topology_failure_is_a_warning():
    warnings: list[str] = []
    sc = Scontrol(run=Scripted((1, "", "slurm_load_topo error: Unable to contact slurm controller")))
    assert read_topology(None, sc, warnings) == {}
    assert len(warnings) == 1 and "show topology" in warnings[0] and "not grouped" in warnings[0]
    sc = Scontrol(run=Scripted((0, "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=dev[0-1]\n", "")))
    assert read_topology(None, sc, []) == {"dev0": "s0", "dev1": "s0"}
    assert sc.calls == [["scontrol", "show", "topology"]]
    assert read_topology(None, None, []) == {}  # a saved dump without --topology: no live Slurm asked
