"""The repair loop on a real Slurm with real accounting (MariaDB + slurmdbd, tests/helpers/slurm_accounting.py)
and a real topology: hooks fired by real drains, resumes and retirements; release --retest;
fleet stats from ``sacctmgr show event``; suspects from ``sacct`` after jobs that really failed,
one made NODE_FAIL by killing its slurmd; one suspect-switch incident from a topology.conf.

The tests share one cluster and tell one story, step by step: each step leaves the nodes as the
next expects. A test runs the steps before its own that have not run yet
(tests/helpers/story.py), so each passes alone (``-k``, tests/README.md) as well as in file order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.slurm_accounting import accounting_cluster
from tests.helpers.slurm_flows import HEALTHY, XID79, base_config, gpuhc
from tests.helpers.story import once

pytestmark = pytest.mark.slurm

IB_DOWN = HEALTHY.parent / "ib-port-down.yaml"
ROW_REMAP = HEALTHY.parent / "row-remap-pending.yaml"
NODES = ("n1", "n2", "n3", "n4", "n5", "n6")
TOPOLOGY = "SwitchName=leaf1 Nodes=n[1-3]\nSwitchName=leaf2 Nodes=n[4-6]\nSwitchName=spine Switches=leaf[1-2]\n"


@pytest.fixture(scope="module")
def acct(tmp_path_factory):
    wd = tmp_path_factory.mktemp("fleet")
    events = wd / "hook-events.jsonl"
    hook = wd / "record-hook"
    hook.write_text(f"#!{sys.executable}\nimport sys\nopen({str(events)!r}, 'a').write(sys.stdin.read())\n")
    hook.chmod(0o755)
    cfg = base_config(wd)
    cfg["slurm"]["breaker"]["max_drained"] = 4
    cfg["hooks"] = {"commands": [[str(hook)]], "timeout_s": 10.0}
    cfg["fleet"] = {"switch": {"min_nodes": 3, "window_s": 600.0}}
    (wd / "topology.conf").write_text(TOPOLOGY)
    started: list = []
    cluster = accounting_cluster(tmp_path_factory, started, workdir=wd, nodes=NODES, gpuhc_config=cfg,
                                 extra_conf="TopologyPlugin=topology/tree")
    cluster.hook_events = events
    yield cluster
    for c in started:
        c.stop()


def hook_events(c) -> list[dict]:
    path = c.hook_events
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def drain_resume_and_retire(c):
    hc = gpuhc(c, "healthcheck", "--nvml-scenario", str(XID79), node="n1")
    assert hc.returncode == 1, hc.stderr
    assert c.node("n1").reason.startswith("gpuhc: xid79 gpu3")
    gpuhc(c, "healthcheck", "--nvml-scenario", str(XID79), node="n1")  # still failing: kept, nothing new
    assert [(e["event"], e["node"]) for e in hook_events(c)] == [("drain", "n1")]
    assert hook_events(c)[0]["reason"] == c.node("n1").reason and hook_events(c)[0]["stage"] == "passive"

    # release --retest on the node: a fault still visible (row remap pending) keeps it out.
    bad = gpuhc(c, "quarantine", "release", "--retest", "n1", "--nvml-scenario", str(ROW_REMAP), node="n1")
    assert bad.returncode == 1 and "retest failed, not released" in bad.stdout, bad.stdout + bad.stderr
    assert c.node("n1").drained and c.node("n1").reason.startswith("gpuhc: xid")
    # Only the node itself can retest (its GPUs): from elsewhere it is a usage error.
    other = gpuhc(c, "quarantine", "release", "--retest", "n1", node="n2")
    assert other.returncode == 2 and "not this node" in other.stderr
    # Repaired: the retest passes and the node is resumed.
    ok = gpuhc(c, "quarantine", "release", "--retest", "n1", "--nvml-scenario", str(HEALTHY), node="n1")
    assert ok.returncode == 0 and "n1: ok: released" in ok.stdout, ok.stdout + ok.stderr
    assert not c.node("n1").drained and c.node("n1").reason is None

    c.scontrol("update", "NodeName=n3", "State=DRAIN", "Reason=gpuhc: ecc gpu0 uncorrectable volatile 2")
    assert gpuhc(c, "quarantine", "retire", "n3").returncode == 0
    assert gpuhc(c, "quarantine", "retire", "n3").returncode == 0  # already retired: no second event
    got = [(e["event"], e["node"]) for e in hook_events(c)]
    assert got == [("drain", "n1"), ("resume", "n1"), ("retire", "n3")], got
    assert hook_events(c)[1]["retest"] == "pass"


def release_retest_as_a_job(c):
    """docs/repair.md's recipe: a maintenance reservation, the node resumed into it, the retest
    as a job there; a failing retest drains the node back, a passing one leaves it in service."""
    from tests.helpers.slurm_accounting import gpuhc_argv
    from tests.helpers.paths import REPO

    c.scontrol("create", "reservation", "ReservationName=retest_n1", "Nodes=n1", "Users=root", "StartTime=now",
               "Duration=30", "Flags=MAINT,IGNORE_JOBS")
    env = {"GPUHC_CONFIG": str(c.gpuhc_yaml), "GPUHC_STATE_DIR": str(c.state_root / "n1"), "PYTHONPATH": str(REPO)}

    def retest_job(scenario) -> str:
        cmd = " ".join([*gpuhc_argv("quarantine", "release", "--retest", "n1", "--nvml-scenario", str(scenario))])
        job = c.run(["sbatch", "--parsable", "--reservation=retest_n1", "--nodelist=n1", "--exclusive",
                     "-o", str(c.workdir / "retest-%j.out"), "--wrap", cmd], env=env).stdout.strip()
        return c.wait_for_job(int(job), 240, ("COMPLETED", "FAILED"))

    try:
        assert retest_job(ROW_REMAP) == "FAILED"
        n1 = c.node("n1")
        assert n1.drained and n1.reason.startswith("gpuhc: ecc"), n1.reason
        assert [(e["event"], e["node"]) for e in hook_events(c)][-1] == ("drain", "n1")
        c.scontrol("update", "NodeName=n1", "State=RESUME")  # the admin's second try, after a reseat
        assert retest_job(HEALTHY) == "COMPLETED"
        assert not c.node("n1").drained
    finally:
        c.scontrol("delete", "ReservationName=retest_n1", check=False)


def suspects_and_stats(c):
    ok = [c.sbatch("-w", "n2", "-o", "/dev/null", "--wrap", "true") for _ in range(3)]
    failed = c.sbatch("-w", "n2", "-o", "/dev/null", "--wrap", "exit 3")
    doomed = c.sbatch("-w", "n6", "--no-requeue", "-o", "/dev/null", "--wrap", "sleep 600")
    for j in ok:
        assert c.wait_for_job(j, 120) == "COMPLETED"
    assert c.wait_for_job(failed, 120, ("FAILED",)) == "FAILED"
    assert c.wait_for_job(doomed, 120, ("RUNNING",)) == "RUNNING"
    c.stop_slurmd("n6")  # the node dies under its job
    assert c.wait_for_job(doomed, 180, ("NODE_FAIL",)) == "NODE_FAIL"
    c.start_slurmd("n6")
    c.wait_for(lambda: not c.node("n6").down and not c.node("n6").not_responding, 180, "n6 back")

    seen: dict = {}

    def accounted():
        cp = gpuhc(c, "fleet", "suspects", "--since", "1h", "--all", "--json")
        doc = json.loads(cp.stdout or "{}")
        recs = seen["recs"] = {r["node"]: r for r in doc.get("nodes", [])}
        return (recs if recs.get("n6", {}).get("bad_by_state") == {"NODE_FAIL": 1} and
                recs.get("n2", {}).get("jobs") == 4 else None)

    recs = c.wait_for(accounted, 180, "sacct to show the finished jobs",
                      pending=lambda: f"`gpuhc fleet suspects` last showed: {seen.get('recs')}")
    assert recs["n2"]["bad_by_state"] == {"FAILED": 1} and recs["n2"]["bad_jobs"] == [str(failed)]
    assert recs["n6"]["bad_jobs"] == [str(doomed)]
    assert not any(r["suspect"] for r in recs.values())  # one bad job each is evidence of nothing
    cols = gpuhc(c, "fleet", "suspects", "--since", "1h", "--all", "-o", "node,bad,suspect", "--parsable").stdout
    assert cols.splitlines()[0] == "NODE|BAD|SUSPECT" and "n6|1|-" in cols.splitlines(), cols

    def stats_with_n6():
        """Slurm's accounting is eventually consistent: a node event can reach slurmdbd after
        the job record that sacct already shows."""
        cp = gpuhc(c, "fleet", "stats", "--since", "1h", "--json")
        assert cp.returncode == 0, cp.stderr
        doc = json.loads(cp.stdout)
        rows = {(r["kind"], r["key"]): r for r in doc["rows"]}
        return (doc, rows) if ("node", "n6") in rows else None

    doc, rows = c.wait_for(stats_with_n6, 180, "n6's DOWN event in `gpuhc fleet stats`", interval=2,
                           pending=lambda: c.run(["sacctmgr", "-n", "-P", "show", "event", "Start=now-1hour"]).stdout)
    events = c.run(["sacctmgr", "-n", "-P", "show", "event", "Start=now-1hour"]).stdout
    why = f"rows {sorted(rows)}; Slurm's events:\n{events}"
    assert rows[("fleet", "all")]["nodes"] == 6
    n1 = rows[("node", "n1")]  # the health check's drain, then the failed retest job's; both ended
    assert n1["drains"] == 2 and n1["open"] == 0 and 0 < n1["mttr_hours"] < 1, f"{n1}; {why}"
    assert rows[("cause", "xid")]["drains"] == 1 and rows[("cause", "ecc")]["drains"] >= 1
    assert rows[("node", "n6")]["drains"] == 1  # Slurm's own DOWN when its slurmd stopped answering
    assert rows[("node", "n3")]["retired"] == 1 and rows[("node", "n3")]["open"] == 1
    assert any("sacctmgr show event" in n for n in doc["notes"])
    png = Path(c.workdir) / "drains.png"
    assert gpuhc(c, "fleet", "stats", "--since", "1h", "--png", str(png)).returncode == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def switch_incident(c):
    assert "leaf2" in c.scontrol("show", "topology").stdout
    # Three nodes under leaf2 lose their IB port together; each health check drains through
    # the breaker (cap 4: retired n3 plus these three).
    for n in ("n4", "n5", "n6"):
        hc = gpuhc(c, "healthcheck", "--nvml-scenario", str(IB_DOWN), node=n)
        assert hc.returncode == 1, hc.stderr
    c.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=gpuhc: infiniband mlx5_0/1 DOWN")  # leaf1: alone
    cp = gpuhc(c, "fleet", "incidents", "--json")
    assert cp.returncode == 1, cp.stderr
    doc = json.loads(cp.stdout)
    (inc,) = doc["incidents"]
    assert (inc["switch"], inc["check"], inc["nodes"]) == ("leaf2", "infiniband", ["n4", "n5", "n6"])
    # n1 failed earlier (its drain is in the event log), n2 is alone under leaf1, n3 is retired: old news
    assert [(f["node"], f["check"]) for f in doc["other_failures"]] == [("n1", "xid"), ("n2", "infiniband")]
    table = gpuhc(c, "fleet", "incidents")
    assert "leaf2" in table.stdout and "n[4-6]" in table.stdout
    cols = gpuhc(c, "fleet", "incidents", "-o", "kind,switch,nodes,check", "--parsable", "--noheader").stdout
    assert cols.splitlines() == ["incident|leaf2|n4,n5,n6|infiniband", "failure|-|n1|xid", "failure|-|n2|infiniband"]
    assert [e["event"] for e in hook_events(c)].count("drain") == 5  # n1 twice before, n4-n6 now
    # fleet lemons, live topology too (issue 30): the three drains are leaf2's, no node's
    lm = gpuhc(c, "fleet", "lemons", "--all", "--json")
    assert lm.returncode == 0, lm.stderr
    doc = json.loads(lm.stdout)
    assert [(i["switch"], i["nodes"]) for i in doc["switch_incidents"]] == [("leaf2", ["n4", "n5", "n6"])], doc
    assert not {"n4", "n5", "n6"} & {s["key"] for s in doc["standings"]}, doc["standings"]

    # drain-report, live, reads `scontrol show topology` itself: one leaf2 group before the
    # causes, and those three nodes are not repeated as infiniband failures
    dr = gpuhc(c, "drain-report", "--json")
    assert dr.returncode == 0, dr.stderr
    doc = json.loads(dr.stdout)
    (inc,) = doc["incidents"]
    assert (inc["switch"], inc["check"], inc["nodes"]) == ("leaf2", "infiniband", ["n4", "n5", "n6"])
    assert {g["cause"]: g["count"] for g in doc["groups"]}["infiniband"] == 1  # n2 alone
    assert {n["node"]: n["incident"] for n in doc["nodes"]} == {"n2": None, "n3": None,  # n1 is in service
                                                               "n4": "leaf2", "n5": "leaf2", "n6": "leaf2"}
    plain = gpuhc(c, "drain-report").stdout
    assert "suspect switch leaf2: 3 nodes" in plain and plain.index("leaf2") < plain.index("CAUSE")


def retest_on_the_node(c):
    """`gpuhc quarantine retest` on the node: a verified resume and a verified retirement each
    reach the hook once; a re-quarantine (still drained) and a retest of a retired node, none."""
    before = len(hook_events(c))
    # n2 (leaf1, drained alone for its IB port above), repaired: the retest passes, resumes it.
    ok = gpuhc(c, "quarantine", "retest", "--nvml-scenario", str(HEALTHY), node="n2")
    assert ok.returncode == 0 and "retest passed" in ok.stderr, ok.stderr
    assert not c.node("n2").drained
    # n4 still has no IB link: q1, q2, then retired on the third failed retest (max_cycles 3).
    for want in ("[q1]", "[q2]", "RETIRED"):
        rt = gpuhc(c, "quarantine", "retest", "--nvml-scenario", str(IB_DOWN), node="n4")
        assert rt.returncode == 1 and want in c.node("n4").reason, rt.stderr
    again = gpuhc(c, "quarantine", "retest", "--nvml-scenario", str(IB_DOWN), node="n4")  # retired: left as it is
    assert "retired: still failing" in again.stderr, again.stderr
    new = hook_events(c)[before:]
    assert [(e["event"], e["node"]) for e in new] == [("resume", "n2"), ("retire", "n4")], new
    assert new[0]["retest"] == "pass" and new[0]["was"].startswith("gpuhc: infiniband")
    assert new[1]["reason"] == c.node("n4").reason and new[1]["stage"] == "bootstrap"


# The story, in file order: each test runs what its step stands on first, when it has not run.
def test_real_drain_resume_and_retire_each_reach_the_hook_once(acct):
    once(acct, drain_resume_and_retire)


def test_release_retest_as_a_short_slurm_job(acct):
    once(acct, drain_resume_and_retire, release_retest_as_a_job)


def test_suspects_and_stats_read_real_accounting(acct):
    # the stats count n1's two drains (the health check's, the failed retest job's) and n3's retirement
    once(acct, drain_resume_and_retire, release_retest_as_a_job, suspects_and_stats)


def test_one_switch_incident_from_a_real_topology(acct):
    once(acct, drain_resume_and_retire, release_retest_as_a_job, switch_incident)


def test_retest_on_the_node_fires_resume_and_retire_once(acct):
    once(acct, drain_resume_and_retire, release_retest_as_a_job, switch_incident, retest_on_the_node)
