"""`gpuhc explain KIND` without a code lists the catalog one entry a line, in columns."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli


@pytest.mark.parametrize("kind", ["xid", "sxid", "signal"])
def test_the_catalog_listing_lines_up_its_verdict_column(kind):
    """Before: signal names overran the five places meant for a code, so no two lines lined up."""
    from gpuhc.catalog import xid as xid_catalog

    out = CliRunner().invoke(cli, ["explain", kind])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    table = {"xid": xid_catalog.xid_table, "sxid": xid_catalog.sxid_table, "signal": xid_catalog.signal_table}[kind]
    assert len(lines) == len(table())
    verdict_at = {re.search(r"  (FAIL|WARN|ignored)", line).start() for line in lines}
    assert len(verdict_at) == 1, lines


def test_explain_xid_145_shows_its_sub_codes_and_their_verdicts():
    """Before: one line for the number; NVIDIA resets for some sub-codes and ignores others."""
    out = CliRunner().invoke(cli, ["explain", "xid", "145"])
    assert out.exit_code == 0, out.output
    assert "sub-codes" in out.output
    assert re.search(r"RLW_REMAP\s+0x00000040\s+RESET_GPU\s+FAIL, action: reset GPU", out.output)
    assert re.search(r"RLW_REMAP\s+0x00000100\s+IGNORE\s+WARN, action: none", out.output)
    import json

    data = json.loads(CliRunner().invoke(cli, ["explain", "xid", "149", "--json"]).output)
    assert {"unit": "NETIR/NETIR_INT", "status": None, "nvidia": "RESET_GPU", "severity": "fail",
            "action": "reset GPU"} in data["subcodes"]
    assert "subcodes" not in json.loads(CliRunner().invoke(cli, ["explain", "xid", "79", "--json"]).output)


def test_explain_says_where_gpuhc_differs_from_nvidia():
    out = CliRunner().invoke(cli, ["explain", "xid", "63"])
    assert "differs from NVIDIA:" in out.output and "IGNORE" in out.output


@pytest.mark.parametrize("code", ["\u00b2", "\u0667\u0669"])  # superscript two; Arabic-Indic 79
def test_a_code_in_other_digits_than_ascii_is_a_usage_error(code):
    """Before: int() raised on the superscript (a traceback) and read the Arabic-Indic digits as Xid 79."""
    out = CliRunner().invoke(cli, ["explain", "xid", code])
    assert out.exit_code == 2 and "is not a Xid number" in out.output and out.exception is not None
    assert isinstance(out.exception, SystemExit)
