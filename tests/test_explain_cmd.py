"""`gpuhc explain KIND` without a code lists the catalog one entry a line, in columns."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli


@pytest.mark.parametrize("kind", ["xid", "sxid", "signal"])
def test_the_catalog_listing_lines_up_its_verdict_column(kind):
    """Before: signal names overran the five places meant for a code, so no two lines lined up."""
    from gpuhc import xid_catalog

    out = CliRunner().invoke(cli, ["explain", kind])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    table = {"xid": xid_catalog.xid_table, "sxid": xid_catalog.sxid_table, "signal": xid_catalog.signal_table}[kind]
    assert len(lines) == len(table())
    verdict_at = {re.search(r"  (FAIL|WARN|ignored)", line).start() for line in lines}
    assert len(verdict_at) == 1, lines
