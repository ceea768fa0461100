"""The fleet tables piped or in a narrow terminal: free text folds, node names and times stay whole
(`gpuhc fleet incidents` once printed `2026-…` and dropped the node column under a long evidence)."""

from __future__ import annotations

import io
import time

import pytest

from gpuhc.fleet.render import render_incidents
from gpuhc.fleet.switches import Failure

# A long evidence text: the driver's fallen-off-the-bus message as tests/fixtures/kernel_log records
# it, twice, as an incident's merged evidence may carry several lines.
EVIDENCE = ("NVRM: The NVIDIA GPU 0000:ba:00.0 NVRM: (PCI ID: 10de:2330) installed in this system has NVRM: "
            "fallen off the bus and is not responding to commands. ") * 2


@pytest.mark.parametrize("columns", ["", "100", "250"])
def test_node_and_time_stay_whole_when_the_evidence_is_long(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    t = time.mktime((2026, 11, 3, 4, 5, 0, 0, 0, -1))
    out = io.StringIO()
    render_incidents([], [Failure("gpu-rack12-node0042", "xid", t, EVIDENCE)], stream=out)
    text = out.getvalue()
    assert "gpu-rack12-node0042" in text and "2026-11-03 04:05" in text, text
    assert "…" not in text
    width = max(len(line) for line in text.splitlines())
    assert width <= (int(columns) if columns else 120), text
    if columns == "250":
        assert EVIDENCE[:150] in text  # the wide pipe keeps it on one line


def test_stats_without_accounting_say_so_before_the_numbers():
    from gpuhc.fleet.history import Outage
    from gpuhc.fleet.stats import compute
    from gpuhc.fleet.render import render_stats

    t0 = time.mktime((2026, 11, 1, 0, 0, 0, 0, 0, -1))
    stats = compute([Outage("n1", t0 + 3600, None, "gpuhc: xid79 gpu3", "xid", "gpuhc", source="eventlog")], {},
                    t0, t0 + 86400)
    stats.notes = ["Slurm's node events unavailable (sacctmgr: error): is slurmdbd configured?"]
    out = io.StringIO()
    render_stats(stats, stream=out)
    text = out.getvalue()
    assert text.index("from gpuhc's event logs only") < text.index("gpuhc fleet stats: fleet"), text
