"""The canary's cadence on a real Slurm cluster (4 slurmd on localhost, the fake GPU as the
hardware boundary): canary jobs go in at low priority in a preemptable partition, a real job
preempts them, every node is covered, a confirmed corruption is drained RETIRED through the
actuator, and an overdue GPU is reported (table, JSON, metric)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from tests.helpers.paths import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_host]  # the jobs run the host's Python

FAKE = REPO / "tests" / "helpers" / "canary_fake.py"
# Partition-priority preemption, as docs/canary.md sets it up: user jobs in a higher tier cancel
# canary jobs in the low one.
PREEMPT = ["PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
           "PartitionName=batch Nodes=ALL PriorityTier=10 MaxTime=INFINITE State=UP",
           "PartitionName=canary Nodes=ALL PriorityTier=1 PreemptMode=CANCEL MaxTime=INFINITE State=UP"]


def gpuhc(cluster, *args, state_dir=""):
    # sbatch hands the environment to the jobs: their runs keep their stamps in the test's directory
    env = cluster.env(PYTHONPATH=str(REPO), GPUHC_STATE_DIR=state_dir)
    return subprocess.run([sys.executable, "-m", "gpuhc", "canary", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def canary_jobs(cluster) -> dict[str, str]:
    """{node: state} of queued or running canary jobs."""
    out = cluster.run(["squeue", "-h", "-o", "%j|%T"]).stdout
    return {n.split("|")[0].rsplit("-", 1)[-1]: n.split("|")[1] for n in out.splitlines()
            if n.startswith("gpuhc-canary-")}


def test_canary_jobs_low_priority_preempted_cover_every_node_drain_and_report_overdue(slurm_cluster, tmp_path):
    c = slurm_cluster(nodes=("n1", "n2", "n3", "n4"), extra_conf=PREEMPT)
    spec = tmp_path / "spec.json"
    sick = {"gpu1": {"case": "bf16-exact-32", "word": 40, "bit": 7, "mode": "sticky"}}
    spec.write_text(json.dumps({"gpus": 2, "delay_s": 20}))  # long enough to be preempted
    cfg, state = tmp_path / "gpuhc.yaml", str(tmp_path / "state")
    cfg.write_text(yaml.safe_dump({
        "state_dir": state,
        "canary": {"cases": ["bf16-exact-32", "fp32-random-32"], "repeats": 2, "max_seconds": 120,
                   "results_dir": str(tmp_path / "results"),
                   "job": {"partition": "canary", "command": f"{sys.executable} {FAKE} --cli {spec}"}},
        "slurm": {"breaker": {"max_drained_percent": 50.0}},
    }))

    first = gpuhc(c, "submit", "--config", str(cfg), "--json", state_dir=state)
    doc = json.loads(first.stdout)
    assert sorted(s["node"] for s in doc["submitted"]) == ["n1", "n2", "n3", "n4"], first.stderr
    job = c.run(["scontrol", "show", "job", doc["submitted"][0]["job_id"]]).stdout
    assert "Partition=canary" in job and "Nice=10000" in job, job
    c.wait_for(lambda: set(canary_jobs(c).values()) == {"RUNNING"} and len(canary_jobs(c)) == 4, 60, "canaries running")
    # idempotent: a node with a canary queued or running gets no second one
    assert json.loads(gpuhc(c, "submit", "--config", str(cfg), "--json", state_dir=state).stdout)["submitted"] == []

    # a real job for n1 preempts its canary at once
    real = c.sbatch("-p", "batch", "--nodelist=n1", "--exclusive", "--wrap", "sleep 2")
    c.wait_for(lambda: "n1" not in canary_jobs(c), 60, "n1's canary preempted")
    assert c.wait_for_job(real, 60) == "COMPLETED"
    c.wait_for(lambda: not canary_jobs(c), 120, "the other canaries to finish")

    # the next cron step collects n2..n4, and n1 (preempted, no result) is due again; n3 is sick now
    spec.write_text(json.dumps({"gpus": 2, "nodes": {"n3": {"sick": sick}}}))
    second = json.loads(gpuhc(c, "submit", "--config", str(cfg), "--json", state_dir=state).stdout)
    assert [s["node"] for s in second["submitted"]] == ["n1"], second
    c.wait_for(lambda: not canary_jobs(c), 120, "n1's canary")
    assert json.loads(gpuhc(c, "submit", "--config", str(cfg), "--json", state_dir=state).stdout)["submitted"] == []  # collects n1
    st = json.loads(gpuhc(c, "status", "--config", str(cfg), "--json", state_dir=state).stdout)
    assert sorted({r["node"] for r in st["gpus"] if r["last_run"]}) == ["n1", "n2", "n3", "n4"]  # every node covered

    # n3's turn comes again (its state is made a day old, as after a day): it runs sick and is drained
    state_file = tmp_path / "state" / "canary" / "fleet.json"
    fleet = json.loads(state_file.read_text())
    for gid in ("n3/gpu0", "n3/gpu1", "n2/gpu0"):
        fleet["gpus"][gid]["last_run"] -= 25 * 3600
    state_file.write_text(json.dumps(fleet))
    third = json.loads(gpuhc(c, "submit", "--config", str(cfg), "--json", state_dir=state).stdout)
    assert sorted(s["node"] for s in third["submitted"]) == ["n2", "n3"], third
    c.wait_for(lambda: not canary_jobs(c), 120, "n2's and n3's canaries")
    applied = gpuhc(c, "submit", "--config", str(cfg), "--apply", "--json", state_dir=state)
    out = json.loads(applied.stdout)
    assert [(a["node"], a["act"]) for a in out["applied"]] == [("n3", "drain")], out
    n3 = c.node("n3")
    assert n3.drained and n3.reason.startswith("gpuhc: RETIRED canary gpu1 "), n3.reason
    assert "bf16 32x32x32" in n3.reason
    assert not any(c.node(n).drained for n in ("n1", "n2", "n4"))

    # an overdue GPU is reported: n4's last run a day back
    fleet = json.loads(state_file.read_text())
    fleet["gpus"]["n4/gpu1"]["last_run"] -= 25 * 3600
    state_file.write_text(json.dumps(fleet))
    prom = tmp_path / "canary.prom"
    table = gpuhc(c, "status", "--config", str(cfg), "--overdue", "--prometheus", str(prom), state_dir=state)
    assert table.returncode == 1
    assert [line.split()[:2] for line in table.stdout.splitlines()[1:]] == [["n4", "gpu1"]], table.stdout
    assert 'gpuhc_canary_overdue{gpu="gpu1",node="n4",uuid="GPU-fake-n4-1"} 1.0' in prom.read_text()
    assert 'gpuhc_canary_status{gpu="gpu1",node="n3",uuid="GPU-fake-n3-1"} 3.0' in prom.read_text()


def test_the_epilog_slice_drains_its_node_retired_itself_and_exits_0(slurm_cluster, tmp_path):
    """A slice that confirms corruption must not just exit 1: Slurm would drain the node "Epilog
    error" first, and the admin side then finds another's reason and leaves it (no RETIRED, so
    clean health checks could resume it). The slice drains RETIRED through the actuator and
    exits 0; in observe mode it sends nothing; with Slurm unreachable it exits 1 (Slurm's own
    drain is then the fallback)."""
    c = slurm_cluster(nodes=("n1", "n2"))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"gpus": 2, "sick": {"gpu1": {"case": "bf16-exact-32", "word": 40, "bit": 7,
                                                             "mode": "sticky"}}}))

    def slice_on(node: str, **extra) -> subprocess.CompletedProcess:
        cfg = tmp_path / f"{node}.yaml"
        cfg.write_text(yaml.safe_dump({"state_dir": str(tmp_path / node),
                                       "canary": {"epilog": {"cases": ["bf16-exact-32"]}, "repeats": 2},
                                       "slurm": {"breaker": {"max_drained_percent": 50.0}, **extra}}))
        env = c.env(PYTHONPATH=str(REPO), SLURMD_NODENAME=node, GPUHC_STATE_DIR=str(tmp_path / node))
        return subprocess.run([sys.executable, str(FAKE), "--cli", str(spec), "canary", "run", "--epilog",
                               "--config", str(cfg)], env=env, capture_output=True, text=True, timeout=120)

    r = slice_on("n1")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "FAIL  canary gpu1: silent data corruption confirmed" in r.stdout and "n1: drain" in r.stderr
    n1 = c.node("n1")
    assert n1.drained and n1.reason.startswith("gpuhc: RETIRED canary gpu1 "), n1.reason
    watched = slice_on("n2", mode="observe")
    assert watched.returncode == 0 and "observe mode, nothing sent" in watched.stderr
    assert not c.node("n2").drained
    lost = slice_on("n2", scontrol=str(tmp_path / "no-such-scontrol"))
    assert lost.returncode == 1 and not c.node("n2").drained, lost.stderr
