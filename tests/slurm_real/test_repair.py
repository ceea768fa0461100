"""Issue 20 on a real Slurm: an admin's resume that sticks, observe mode, lemon memory.

Real slurmctld and slurmds (tests/helpers/slurm_cluster.py), real jobs, real prologs; nodes replay
scenarios (examples/scenarios). Run on 22.05, 24.11 and 26.05 with ``--slurm=all``.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.helpers.slurm_accounting import gpuhc_argv
from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import HEALTHY, RECOMMENDED, XID79, base_config, decisions, gpuhc, runs, scenario, wait_runs

pytestmark = pytest.mark.slurm


def _events(wd) -> list[dict]:
    path = wd / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _held_for_xid(c, node: str) -> None:
    """The health check on ``node`` (its scenario: Xid 79 on gpu3) drains it with gpuhc's reason."""
    hc = gpuhc(c, "healthcheck", node=node)
    assert hc.returncode == 1, hc.stdout + hc.stderr
    assert c.node(node).drained and c.node(node).reason.startswith("gpuhc: xid79 gpu3")


def test_admin_resume_with_a_job_waiting_sticks_and_the_release_retest_recipe_works(slurm_cluster, tmp_path):
    wd = tmp_path / "resume"
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), prolog=True, epilog=True, gpus_per_node=8,
                      prolog_flags=RECOMMENDED["PrologFlags"], gpuhc_config=base_config(wd),
                      node_scenarios={"n1": str(XID79)})
    _held_for_xid(c, "n1")

    # A job that needs n1's GPU 3 waits for the drained node; the admin resets the GPU and
    # resumes the node. The job's prolog is the first of gpuhc to see the resume.
    job = c.sbatch("-w", "n1", "--gres=gpu:8", "-o", "/dev/null", "--wrap", "true")
    assert c.job_state(job) == "PENDING"
    c.scontrol("update", "NodeName=n1", "State=RESUME")
    assert c.wait_for_job(job, 180) == "COMPLETED"
    prolog = decisions(wd, "n1", "prolog")
    assert any("was resumed outside gpuhc" in line for line in prolog), prolog
    assert any(f"job {job} prolog gpus=0,1,2,3,4,5,6,7: PASS" in line for line in prolog), prolog
    n1 = c.node("n1")
    assert not n1.drained and not n1.down, n1
    # ... and the node stays in service: the next health check acknowledges nothing again.
    hc = gpuhc(c, "healthcheck", node="n1")
    assert hc.returncode == 0 and not c.node("n1").drained, hc.stdout + hc.stderr
    assert sum("resumed outside gpuhc" in line for line in decisions(wd, "n1", "prolog")
               + decisions(wd, "n1")) == 1

    # docs/repair.md's "short Slurm job" recipe for `quarantine release --retest`, as written:
    # the node drained again for the same Xid, a maintenance reservation, the resume, the job.
    state = c.state_root / "n1" / "state.json"
    doc = json.loads(state.read_text())
    doc.pop("checks")  # the node forgets the acknowledgement: the Xid fails it again
    state.write_text(json.dumps(doc))
    _held_for_xid(c, "n1")
    c.scontrol("create", "reservation", "ReservationName=retest_n1", "Nodes=n1", "Users=root", "StartTime=now",
               "Duration=30", "Flags=MAINT,IGNORE_JOBS")
    try:
        c.scontrol("update", "NodeName=n1", "State=RESUME")
        env = {"GPUHC_CONFIG": str(c.gpuhc_yaml), "GPUHC_STATE_DIR": str(c.state_root / "n1"),
               "PYTHONPATH": str(REPO)}
        out = wd / "retest.out"
        # In a release's chroot the job reaches the host's gpuhc the way the prolog does (bin/gpuhc-host).
        gpuhc_cmd = [str(wd / "bin" / "gpuhc-host")] if c.runtime is not None else gpuhc_argv()
        cmd = " ".join([*gpuhc_cmd, "quarantine", "release", "--retest", "n1"])
        retest = int(c.run(["sbatch", "--parsable", "--reservation=retest_n1", "--nodelist=n1", "--exclusive",
                            "--time=20", "-o", str(out), "--wrap", cmd], env=env).stdout.strip())
        assert c.wait_for_job(retest, 240) == "COMPLETED", out.read_text() if out.exists() else ""
        assert "n1: ok: retest passed" in out.read_text()
        assert not c.node("n1").drained
    finally:
        c.scontrol("delete", "ReservationName=retest_n1", check=False)
    assert not c.node("n1").drained and gpuhc(c, "healthcheck", node="n1").returncode == 0


def test_observe_mode_decides_logs_and_changes_nothing(slurm_cluster, tmp_path):
    wd = tmp_path / "observe"
    cfg = base_config(wd, mode="observe")
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), prolog=True, epilog=True, gpus_per_node=8,
                      prolog_flags=RECOMMENDED["PrologFlags"], gpuhc_config=cfg, node_scenarios={"n1": str(XID79)})
    before = c.node("n1")
    hc = gpuhc(c, "healthcheck", node="n1")
    assert hc.returncode == 1  # the health check still says the node is sick (slurmd ignores its exit)
    n1 = c.node("n1")
    assert not n1.drained and n1.reason is None and n1.state == before.state
    would = "observe mode: would drain n1: failed checks: gpuhc: xid79 gpu3"
    assert any(line.startswith(would) for line in decisions(wd, "n1")), decisions(wd, "n1")

    # A job on the sick GPU: the prolog decides to drain and fail it, says so, and lets it run,
    # so Slurm does not drain the node with "Prolog error" either.
    job = c.sbatch("-w", "n1", "--gres=gpu:8", "-o", "/dev/null", "--wrap", "true")
    assert c.wait_for_job(job, 180) == "COMPLETED"
    prolog = decisions(wd, "n1", "prolog")
    assert any(line.startswith(would) for line in prolog), prolog
    assert "observe mode: exit 0 instead of 1" in prolog, prolog
    n1 = c.node("n1")
    assert not n1.drained and not n1.down and n1.reason is None, n1
    # The health check, the prolog and the epilog each decided to drain; none did.
    c.wait_for(lambda: len([e for e in _events(wd) if e.get("node") == "n1"]) == 3, 120, "the epilog's event",
               pending=lambda: f"n1's events so far: {[e['stage'] for e in _events(wd) if e.get('node') == 'n1']}")
    logged = [(e["stage"], e["slurm"]["observed"], e["slurm"]["acted"]) for e in _events(wd) if e.get("node") == "n1"]
    assert logged == [("passive", "drain", False), ("prolog", "drain", False), ("epilog", "drain", False)], logged
    assert "observe mode: exit 0 instead of 1" in decisions(wd, "n1", "epilog")

    # What would have happened, from the event log.
    rep = json.loads(gpuhc(c, "fleet", "observed", "--json", check=True).stdout)
    assert [(r["node"], r["act"], r["runs"]) for r in rep["nodes"]] == [("n1", "drain", 3)], rep
    assert rep["nodes"][0]["reason"].startswith("gpuhc: xid79 gpu3")
    dr = gpuhc(c, "drain-report", "--observed", check=True).stdout
    assert re.search(r"n1\s+drain\s+3\s", dr), dr

    # Going live is one line.
    cfg["slurm"]["mode"] = "enforce"
    c.gpuhc_yaml.write_text(yaml.safe_dump({**cfg, "hosts": [{"match": "n1", "sources": {"nvml_scenario": str(XID79)}}]}))
    assert gpuhc(c, "healthcheck", node="n1").returncode == 1
    assert c.node("n1").drained and c.node("n1").reason.startswith("gpuhc: xid79 gpu3")


def test_a_node_that_fails_passes_and_fails_again_is_retired_as_a_lemon(slurm_cluster, tmp_path):
    """Two drains inside the window (K=2; D=0.01 day, the accelerated clock: the health check runs
    every 3 s) retire the node, although it passed in between and was resumed."""
    wd = tmp_path / "lemon"
    # gpu3's link: x8 fails, x16 passes. Nine passing runs leave room for a slow machine (the
    # resume needs three in a row, on a node Slurm hears from); the scenario then stays failing.
    flaky = scenario(tmp_path, "flaky", 16, [8] + [16] * 9 + [8])
    cfg = base_config(wd)
    cfg["slurm"]["lemon"] = {"faults": 2, "window_days": 0.01}
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2"), healthcheck=True, healthcheck_interval=3, gpuhc_config=cfg,
                      node_scenarios={"n1": flaky, "n2": str(HEALTHY)})
    def acts() -> list[str]:  # a drain's line is logged once its re-read verified it
        return [line.split(":", 1)[0] for line in decisions(wd, "n1") if line.startswith(("drained:", "resumed:"))]

    c.wait_for(lambda: (c.node("n1").reason or "").startswith("gpuhc: RETIRED lemon") and len(acts()) == 3, 360,
               "n1 retired as a lemon", pending=lambda: f"n1's acts so far: {acts()}")
    n1 = c.node("n1")
    assert n1.drained
    assert n1.reason.startswith("gpuhc: RETIRED lemon node n1: 2 drains in 864s (pcie); last: pcie gpu3"), n1.reason
    assert acts() == ["drained", "resumed", "drained"], decisions(wd, "n1")
    # The fault history: in the node's state and in the event log, with gpu3's serial and UUID.
    def faults() -> list[dict]:  # the run's event-log line follows its drain by a moment
        return [e["slurm"]["fault"] for e in _events(wd) if e["slurm"].get("fault")]

    faults = c.wait_for(lambda: len(faults()) == 2 and faults(), 120, "both drains in the event log",
                        pending=lambda: f"faults logged so far: {faults()}")
    assert len(faults) == 2 and all(f["node"] == "n1" and f["check"] == "pcie" for f in faults), faults
    assert all(len(f["gpus"]) == 1 and f["gpus"][0]["uuid"] for f in faults), faults
    # Retired: the runs after it leave it out.
    wait_runs(c, wd, {"n1": runs(wd, "n1") + 3})
    assert c.node("n1").reason.startswith("gpuhc: RETIRED lemon")
    cp = gpuhc(c, "fleet", "lemons", "--json")
    assert cp.returncode == 1, cp.stderr  # exit 1: there is a lemon
    lemons = json.loads(cp.stdout)
    assert ("node", "n1", 2, True) in [(x["kind"], x["key"], x["count"], x["lemon"]) for x in lemons["standings"]]
