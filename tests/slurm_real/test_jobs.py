"""The job checks on a real Slurm (issue 24): a two-node job hangs, replayed from activity recorded
on a real 4x H100 hang; the health check of each node writes its view into the job's AdminComment,
`gpuhc jobs` names the culprit node and GPU, nothing is drained, and the opt-in requeue puts the
job back in the queue with the culprit node excluded. Real slurmctld, slurmd and scontrol."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from tests.helpers.jobs_scenario import write_scenario
from tests.helpers.paths import FIXTURES
from tests.helpers.slurm_flows import HEALTHY, base_config, decisions, gpuhc

pytestmark = pytest.mark.slurm


def cluster_for(slurm_cluster, tmp_path: Path, cfg_extra: dict | None = None):
    wd = tmp_path / "jobs"
    wd.mkdir()
    scen = {n: wd / f"{n}.yaml" for n in ("n1", "n2", "n3")}
    for p in scen.values():
        p.write_text(f"extends: {HEALTHY}\n")
    cfg = base_config(wd)
    cfg.update(cfg_extra or {})
    c = slurm_cluster(workdir=wd, nodes=("n1", "n2", "n3"), gpuhc_config=cfg,
                      node_scenarios={n: str(p) for n, p in scen.items()})
    return c, wd, scen


def test_hung_job_culprit_named_nothing_drained_then_requeued_without_it(slurm_cluster, tmp_path):
    hook_log = tmp_path / "hook.jsonl"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ncat >> {hook_log}\necho >> {hook_log}\n")
    hook.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    c, wd, scen = cluster_for(slurm_cluster, tmp_path, {"hooks": {"commands": [[str(hook)]]}})
    job = c.sbatch("-N2", "-w", "n1,n2", "--requeue", "-J", "train\x1b[31m", "--wrap", "sleep 600")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    write_scenario(scen["n1"], job, "recorded")
    write_scenario(scen["n2"], job, "spin")

    for node in ("n2", "n1", "n2"):
        cp = gpuhc(c, "healthcheck", node=node)
        assert cp.returncode == 0, cp.stdout + cp.stderr  # a hang is a warning: never a failed health check

    shown = c.scontrol("show", "job", "-o", str(job)).stdout
    assert f"n1/hang/" in shown and "/gpu3" in shown and "n2/hang/" in shown

    table = gpuhc(c, "jobs", check=True).stdout
    assert str(job) in table and "hung" in table and "n1:gpu3" in table
    assert "\x1b" not in table and "train\\x1b[31m" in table  # the job's name, escaped
    (rec,) = json.loads(gpuhc(c, "jobs", "--json", check=True).stdout)["jobs"]
    assert rec["job"] == str(job) and rec["verdict"] == "hung" and rec["culprits"] == ["n1:gpu3"]
    assert rec["reported"] == 2 and rec["since"] > 0 and rec["age_s"] >= 0
    cols = gpuhc(c, "jobs", "-o", "job,culprits", "--noheader", check=True).stdout.split()
    assert cols == [str(job), "n1:gpu3"]

    # Nothing drained by default, and the job still runs where it ran.
    assert not any(c.node(n).drained for n in ("n1", "n2", "n3"))
    assert c.job_state(job) == "RUNNING"

    # Named in the event log and to the hooks, once per node.
    events = [json.loads(line) for line in (wd / "events.jsonl").read_text().splitlines()]
    mine = [r for e in events for r in e["results"] if r["check"] == "jobs" and r["status"] == "warn"]
    assert any(r["value"]["culprits"] == ["gpu3"] for r in mine)
    hooks = [json.loads(line) for line in hook_log.read_text().splitlines() if line.strip()]
    findings = [h for h in hooks if h["event"] == "job_finding"]
    assert sorted(h["node"] for h in findings) == ["n1", "n2"]
    assert all(h["job"] == str(job) for h in findings)

    # Opt-in: requeue after the hang has lasted 1 s, without the culprit node.
    doc = yaml.safe_load(c.gpuhc_yaml.read_text())
    doc.setdefault("checks", {}).setdefault("jobs", {})["thresholds"] = {"requeue_after_s": 1}
    c.gpuhc_yaml.write_text(yaml.safe_dump(doc))
    cp = gpuhc(c, "healthcheck", node="n2")
    assert cp.returncode == 0, cp.stdout + cp.stderr

    def excluded() -> bool:
        fields = dict(t.split("=", 1) for t in c.scontrol("show", "job", "-o", str(job)).stdout.split() if "=" in t)
        return fields.get("ExcNodeList") == "n1" and int(fields.get("Restarts", "0")) >= 1
    c.wait_for(excluded, 120, f"job {job} requeued with ExcNodeList=n1",
               pending=lambda: c.scontrol("show", "job", "-o", str(job)).stdout.strip())
    assert not any(c.node(n).drained for n in ("n1", "n2", "n3"))
    hooks = [json.loads(line) for line in hook_log.read_text().splitlines() if line.strip()]
    (req,) = [h for h in hooks if h["event"] == "job_requeue"]
    assert req["excluded"] == ["n1"] and req["job"] == str(job)
    # Back in the queue (Slurm holds a requeued job back a while before it may start again), not
    # held; 26.05 shows the old run COMPLETING for a moment first.
    c.wait_for(lambda: c.job_state(job) in ("PENDING", "RUNNING"), 120, f"job {job} pending or running again",
               pending=lambda: c.job_state(job))
    fields = dict(t.split("=", 1) for t in c.scontrol("show", "job", "-o", str(job)).stdout.split() if "=" in t)
    assert fields["JobState"] in ("PENDING", "REQUEUED", "RUNNING", "CONFIGURING"), fields["JobState"]
    assert fields.get("Reason") != "JobHeldAdmin" and fields.get("Priority") != "0"
    assert fields["JobState"] != "RUNNING" or "n1" not in fields["NodeList"]


def test_the_node_whose_gpus_all_stopped_is_named_by_the_others_hang(slurm_cluster, tmp_path):
    """No node alone can tell: n1's GPUs are all idle (a pause, as far as n1 knows), n2's all spin
    (a hang with no culprit here). Together, in the AdminComment, n1 is the culprit."""
    c, wd, scen = cluster_for(slurm_cluster, tmp_path)
    job = c.sbatch("-N2", "-w", "n1,n2", "--wrap", "sleep 600")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    write_scenario(scen["n1"], job, "idle")
    write_scenario(scen["n2"], job, "spin")

    assert gpuhc(c, "healthcheck", node="n1").returncode == 0
    assert "gpuhc-jobs" not in c.scontrol("show", "job", "-o", str(job)).stdout  # idle alone: nothing to say
    assert gpuhc(c, "healthcheck", node="n2").returncode == 0
    (rec,) = json.loads(gpuhc(c, "jobs", "--json", check=True).stdout)["jobs"]
    assert (rec["verdict"], rec["culprits"]) == ("hung", [])
    assert "not named yet" in gpuhc(c, "jobs", check=True).stdout
    assert gpuhc(c, "healthcheck", node="n1").returncode == 0
    (rec,) = json.loads(gpuhc(c, "jobs", "--json", check=True).stdout)["jobs"]
    assert (rec["verdict"], rec["culprits"], rec["reported"]) == ("hung", ["n1 (all GPUs idle)"], 2)
    assert not any(c.node(n).drained for n in ("n1", "n2", "n3")) and c.job_state(job) == "RUNNING"

    # The job recovers: each node takes its view back out, and gpuhc jobs has nothing to show.
    for n in ("n1", "n2"):
        scen[n].write_text(f"extends: {HEALTHY}\n")
        write_scenario(scen[n], job, "idle")
    path = scen["n2"]
    doc = yaml.safe_load(path.read_text())
    for g in doc["activity"]["gpus"]:
        g.update(gpu_util=[99.0] * 70, mem_util=[31.0] * 70, power_w=[690.0] * 100)
    path.write_text(yaml.safe_dump(doc))
    assert gpuhc(c, "healthcheck", node="n2").returncode == 0
    assert gpuhc(c, "healthcheck", node="n1").returncode == 0
    assert "gpuhc-jobs" not in c.scontrol("show", "job", "-o", str(job)).stdout
    assert json.loads(gpuhc(c, "jobs", "--json", check=True).stdout)["jobs"] == []


def test_the_watcher_names_the_culprit_of_a_one_node_job_between_health_checks(slurm_cluster, tmp_path):
    """Issue 32: `gpuhc watch` on the node (its own state directory, so its record is its own
    and not the health check's) writes the hang into the AdminComment, says it in the decision
    log and fires the hook; it drains nothing, and takes its view back out once the job runs."""
    hook_log = tmp_path / "hook.jsonl"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ncat >> {hook_log}\necho >> {hook_log}\n")
    hook.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    c, wd, scen = cluster_for(slurm_cluster, tmp_path, {"hooks": {"commands": [[str(hook)]]}})
    job = c.sbatch("-N1", "-w", "n1", "--wrap", "sleep 600")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    write_scenario(scen["n1"], job, "recorded")
    watch_state = tmp_path / "watch-state"
    args = ("watch", "--rounds", "2", "--interval", "1", "--state-dir", str(watch_state))
    cp = gpuhc(c, *args, node="n1")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "n1/hang/" in c.scontrol("show", "job", "-o", str(job)).stdout
    said = [ln for ln in decisions(wd, "n1", "watch") if ln.startswith(f"jobs: job {job} hung")]
    assert said and "n1:gpu3" in said[0]
    hooks = [json.loads(line) for line in hook_log.read_text().splitlines() if line.strip()]
    assert any(h["event"] == "job_finding" and h["job"] == str(job) and h["culprits"] == ["gpu3"] for h in hooks)
    assert not any(c.node(n).drained for n in ("n1", "n2", "n3")) and c.job_state(job) == "RUNNING"

    doc = yaml.safe_load(scen["n1"].read_text())  # the job runs again
    for g in doc["activity"]["gpus"]:
        g.update(gpu_util=[99.0] * 70, mem_util=[31.0] * 70, power_w=[690.0] * 100)
    scen["n1"].write_text(yaml.safe_dump(doc))
    assert gpuhc(c, "healthcheck", node="n1").returncode == 0
    assert gpuhc(c, *args, node="n1").returncode == 0
    assert "gpuhc-jobs" not in c.scontrol("show", "job", "-o", str(job)).stdout
