"""`gpuhc fleet lemons` and switch incidents (issue 30): a node whose drains were one switch's
incident is not listed for them, and the switch is named instead. Topology: Slurm's own
topology.conf(5) tree example (tests/fixtures/topology)."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.config.load import Config, defaults, schema
from gpuhc.export.eventlog import append_event
from gpuhc.fleet.lemons import gather, table
from gpuhc.slurm.repair.lemons import Fault
from gpuhc.config.topology import read_topology_conf
from tests.helpers.paths import REPO

TREE = REPO / "tests" / "fixtures" / "topology" / "topology-tree.conf"
DAY = 86400.0


def _fleet_log(tmp_path, now: float) -> str:
    """dev0: two xid drains of its own and one IB drain that dev1 and dev2 (same leaf s0) had
    within minutes; each node's lines as its own shipped log carries them."""
    log = tmp_path / "events.jsonl"
    drains = [("dev0", now - 20 * DAY, "xid"), ("dev0", now - 10 * DAY, "infiniband"),
              ("dev1", now - 10 * DAY + 120, "infiniband"), ("dev2", now - 10 * DAY + 300, "infiniband"),
              ("dev0", now - DAY, "xid")]
    for node, t, check in drains:
        rec = Fault(t, node, check).to_dict()
        append_event(str(log), {"node": node, "started": t, "slurm": {"acted": True, "fault": rec}})
    return str(log)


def test_a_switch_incident_is_named_and_its_nodes_are_not_lemons_for_it(tmp_path):
    now = time.time()
    log, config = _fleet_log(tmp_path, now), Config(defaults(schema()))
    rows, settings, notes, incidents = gather(config, [log], now)  # no topology: as before issue 30
    assert [(r.key, r.lemon) for r in rows] == [("dev0", True)] and incidents == [] and notes == []
    rows, settings, notes, incidents = gather(config, [log], now, leaf_of=read_topology_conf(str(TREE)))
    assert [(r.key, len(r.faults), r.lemon, r.near) for r in rows] == [("dev0", 2, False, True)]
    assert [(i.switch, i.check, i.nodes) for i in incidents] == [("s0", "infiniband", ["dev0", "dev1", "dev2"])]
    text = "\n".join(table(rows, settings, incidents))
    assert "LEMON" not in text and "switch s0: 3 drains counted for the switch, not the nodes" in text


def test_the_command_reads_the_topology_and_exits_0_for_a_switch(tmp_path):
    log = _fleet_log(tmp_path, time.time())
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("{}\n")
    res = CliRunner().invoke(cli, ["fleet", "lemons", "--event-log", log, "--topology", str(TREE), "--json",
                                   "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [i["switch"] for i in doc["switch_incidents"]] == ["s0"]
    assert not any(s["lemon"] for s in doc["standings"])
