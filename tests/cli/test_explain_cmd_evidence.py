"""`gpuhc explain evidence [CLASS]`: what each class of evidence buys, from gpuhc/catalog/evidence.py."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.catalog.evidence import TABLE


def test_the_whole_table_and_one_class():
    out = CliRunner().invoke(cli, ["explain", "evidence"])
    assert out.exit_code == 0
    assert [line.split()[0] for line in out.output.splitlines() if line and not line[0].isspace()][:len(TABLE)] == [
        e.id for e in TABLE]
    assert "held: consecutive runs" in out.output and "host 3 runs over 900 s" in out.output
    one = CliRunner().invoke(cli, ["explain", "evidence", "service", "--json"])
    doc = json.loads(one.output)
    assert doc["id"] == "service" and doc["lemon"] is False and doc["drain"].startswith("when held 3 runs over 15 min")


def test_json_lists_every_class():
    out = CliRunner().invoke(cli, ["explain", "evidence", "--json"])
    assert [d["id"] for d in json.loads(out.output)] == [e.id for e in TABLE]


def test_an_unknown_class_is_a_usage_error():
    out = CliRunner().invoke(cli, ["explain", "evidence", "dcgm"])
    assert out.exit_code == 2 and "'dcgm' is no class of evidence" in out.output
