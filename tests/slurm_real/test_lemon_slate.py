"""The lemon rule counts only what is the node's, on a real Slurm (issue 30; docs/repair.md "Lemon
memory"), with `slurm.lemon.faults: 2` so that a second drain within the window would retire:

1. n1 drained for an Xid, released by the admin (`gpuhc quarantine release`), then one more
   fault (a row remap pending): drained, not retired. Before, the release left the history
   standing and this drain retired the node as a lemon;
2. n2 in the site's test mode (`sources.test_scenario`, a fault replayed on purpose: a row remap
   pending) drained three times, the healthy scenario placed and the node resumed in between:
   no fault is ever recorded, and no drain is a retirement.

The GPUs and their faults are scenarios (the NVML stand-in), the rest is Slurm's own.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import XID79, base_config, gpuhc
from tests.helpers.story import once

pytestmark = pytest.mark.slurm

REMAP = REPO / "examples" / "scenarios" / "row-remap-pending.yaml"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, slurm_cluster_module):
    wd = tmp_path_factory.mktemp("slate")
    share = wd / "share" / "scenarios"  # root's, as install.sh makes it: test mode follows only that
    shutil.copytree(REPO / "examples" / "scenarios", share)
    n1 = wd / "n1.yaml"
    shutil.copyfile(XID79, n1)
    n1.write_text(n1.read_text().replace("extends: healthy-8xh100.yaml", f"extends: {share / 'healthy-8xh100.yaml'}"))
    cfg = base_config(wd)
    cfg["slurm"]["lemon"] = {"faults": 2}
    shutil.copyfile(share / "healthy-8xh100.yaml", share / "test-scenario.yaml")
    cfg["hosts"] = [{"match": "n2", "sources": {"test_scenario": str(share / "test-scenario.yaml")}}]
    c = slurm_cluster_module(workdir=wd, nodes=("n1", "n2", "n3"), gpuhc_config=cfg,
                             node_scenarios={"n1": str(n1)})
    c.wd, c.share, c.n1 = wd, share, n1
    return c


def events(wd) -> list[dict]:
    p = wd / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def release_then_fault(c) -> None:
    c.first = gpuhc(c, "healthcheck", node="n1").returncode
    c.first_reason = c.node("n1").reason
    c.release = gpuhc(c, "quarantine", "release", "n1")
    c.n1.write_text(REMAP.read_text().replace("extends: healthy-8xh100.yaml",
                                              f"extends: {c.share / 'healthy-8xh100.yaml'}"))
    c.second = gpuhc(c, "healthcheck", node="n1").returncode


def test_a_released_node_is_not_retired_at_its_next_fault(cluster):
    once(cluster, release_then_fault)
    assert cluster.first == 1 and cluster.first_reason.startswith("gpuhc: xid"), cluster.first_reason
    assert cluster.release.returncode == 0, cluster.release.stdout + cluster.release.stderr
    n1 = cluster.node("n1")
    assert cluster.second == 1 and n1.drained and n1.reason.startswith("gpuhc: ecc"), n1
    assert "RETIRED" not in n1.reason
    faults = [e["slurm"]["fault"] for e in events(cluster.wd) if e.get("node") == "n1" and e["slurm"].get("fault")]
    assert [f["check"] for f in faults] == ["xid", "ecc"], faults  # both on record; the first no longer counts


def replays_in_test_mode(c) -> None:
    placed = c.share / "test-scenario.yaml"
    c.codes, c.reasons = [], []
    for i in range(3):
        if i:  # mended in the replay (the healthy node placed), resumed, seen passing
            shutil.copyfile(c.share / "healthy-8xh100.yaml", placed)
            c.scontrol("update", "NodeName=n2", "State=RESUME")
            gpuhc(c, "healthcheck", node="n2")
        shutil.copyfile(REMAP, placed)  # the fault placed (again)
        c.codes.append(gpuhc(c, "healthcheck", node="n2").returncode)
        c.reasons.append(c.node("n2").reason)


def test_three_test_mode_replays_make_no_lemon(cluster):
    once(cluster, replays_in_test_mode)
    assert cluster.codes == [1, 1, 1], cluster.codes
    assert all(r and r.startswith("gpuhc: ecc") and "RETIRED" not in r for r in cluster.reasons), cluster.reasons
    mine = [e for e in events(cluster.wd) if e.get("node") == "n2" and e["slurm"].get("action") == "drain"]
    assert len(mine) == 3 and not any(e["slurm"].get("fault") for e in mine), mine
