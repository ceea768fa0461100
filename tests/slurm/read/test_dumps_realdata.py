"""Real-world Slurm node dumps from /work/shared/realdata/slurm (captured by others on real
clusters, see that folder's README). That folder exists in this workplace and in CI; elsewhere
the tests here skip with a message saying the folder is absent. Expected values were read by
eye from the files."""

from __future__ import annotations

import time

import pytest
from tests.helpers.realdata import ROOT as REALDATA_ROOT

from gpuhc.slurm.read.dumps import parse_nodes

REALDATA = REALDATA_ROOT / "slurm"
pytestmark = pytest.mark.skipif(not REALDATA.is_dir(), reason=f"real-world samples folder {REALDATA} is absent")


def unavailable(name: str) -> dict[str, tuple]:
    nodes = parse_nodes((REALDATA / name).read_text())
    return {n.name: (n.state, sorted(n.flags), n.reason, n.reason_user, n.reason_time) for n in nodes if n.unavailable}


def test_every_file_parses():
    files = sorted(REALDATA.iterdir())
    assert len(files) >= 6
    for f in files:
        nodes = parse_nodes(f.read_text())
        assert nodes, f.name
        assert all(n.name and n.state for n in nodes), f.name


def test_slurmrestd_2311():
    assert unavailable("01_slurmrestd_nodes_23.11.10_v0.0.40_slurmweb.json") == {
        "cn1": ("IDLE", ["DRAIN"], "ECC memory error", "root", 1746621136.0),
        "cn4": ("DOWN", [], "CPU dead", "root", 1746621136.0),
    }


def test_slurmrestd_2411():
    assert unavailable("02_slurmrestd_nodes_24.11.5_v0.0.41_slurmweb.json") == {
        "cn1": ("DOWN", [], "CPU dead", "slurm", 1763370733.0),
        "cn4": ("IDLE", ["DRAIN"], "ECC memory error", "slurm", 1763370733.0),
    }


def test_slurmrestd_2505_completing_is_not_unavailable():
    path = "03_slurmrestd_nodes_25.05.4_v0.0.43_slurmweb.json"
    assert unavailable(path) == {
        "cn3": ("IDLE", ["DRAIN"], "ECC memory error", "slurm", 1763370757.0),
        "cn4": ("DOWN", [], "CPU dead", "slurm", 1763370757.0),
    }
    gpu1 = next(n for n in parse_nodes((REALDATA / path).read_text()) if n.name == "gpu1")
    assert gpu1.flags == {"COMPLETING"} and gpu1.partitions == ("gpu",)


def test_slurmrestd_2511():
    nodes = parse_nodes((REALDATA / "04_slurmrestd_nodes_25.11.0_v0.0.44_slurmweb.json").read_text())
    assert len(nodes) == 8
    assert unavailable("04_slurmrestd_nodes_25.11.0_v0.0.44_slurmweb.json") == {
        "cn1": ("IDLE", ["DRAIN"], "ECC memory error", "slurm", 1763321769.0),
        "cn2": ("DOWN", [], "CPU dead", "slurm", 1763321769.0),
    }


def test_sinfo_json_2108():
    nodes = parse_nodes((REALDATA / "05_sinfo_json_21.08.5_v0.0.37_rivosinc_fixture.json").read_text())
    assert [(n.name.split(".")[0], n.state) for n in nodes] == [
        ("cs2", "MIXED"), ("cs3", "IDLE"), ("cs4", "ALLOCATED"), ("cs5", "DOWN")]
    assert unavailable("05_sinfo_json_21.08.5_v0.0.37_rivosinc_fixture.json") == {
        "cs5.example.company.com": ("DOWN", [], None, None, None)}


def test_scontrol_text_1711():
    path = "06_scontrol_show_node_17.11_4nodes_drain_huji.txt"
    nodes = parse_nodes((REALDATA / path).read_text())
    assert [n.name for n in nodes] == ["cortex-01", "dumfries-002", "oxygen-04", "cricket"]
    when = time.mktime(time.strptime("2019-01-29T10:42:12", "%Y-%m-%dT%H:%M:%S"))
    assert unavailable(path) == {"oxygen-04": ("IDLE", ["DRAIN"], "memory issues?", "root", when)}
    assert nodes[2].partitions == ("short", "medium", "long", "killable")


def test_drain_report_over_every_sample():
    """`gpuhc drain-report --from-file` on each sample: who is out, for what, set by whom."""
    import json

    from click.testing import CliRunner

    from gpuhc.cli import cli

    expected = {
        "01": {"cn1": ("drained", "admin", "admin"), "cn4": ("down", "admin", "admin")},
        "02": {"cn1": ("down", "admin", "admin"), "cn4": ("drained", "admin", "admin")},
        "03": {"cn3": ("drained", "admin", "admin"), "cn4": ("down", "admin", "admin")},
        "04": {"cn1": ("drained", "admin", "admin"), "cn2": ("down", "admin", "admin")},
        # down with no reason at all: only Slurm (or slurm.conf) leaves a node so
        "05": {"cs5.example.company.com": ("down", "no reason", "slurm")},
        "06": {"oxygen-04": ("drained", "admin", "admin")},
    }
    for f in sorted(REALDATA.iterdir()):
        result = CliRunner().invoke(cli, ["drain-report", "--from-file", str(f), "--json"], catch_exceptions=False)
        doc = json.loads(result.output)
        got = {n["node"]: (n["kind"], n["cause"], n["owner"]) for n in doc["nodes"]}
        assert got == expected[f.name[:2]], f.name
