"""The job attacks of issue 29 on a real Slurm (real slurmctld, slurmd, scontrol and squeue): a
job named to forge gpuhc's record, processes claiming other jobs (another node's, a pending one,
made-up ids), two nodes writing one job's record at once, and observe mode with a requeue due
and with a breaker ledger.
No AdminComment of another job changes, nothing is requeued or drained, an admin's note with
spaces and ``=`` survives byte for byte, both nodes' views stay, and observe mode sends nothing.
One cluster for the module (tests/helpers/story.py); each test sets the config it needs."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import yaml

from tests.helpers.jobs_scenario import recorded_hang, write_scenario
from tests.helpers.slurm_cluster_files import free_ports, gpuhc_bin
from tests.helpers.slurm_flows import HEALTHY, base_config
from tests.helpers.paths import REPO

pytestmark = pytest.mark.slurm

FORGED_NAME = "x AdminComment=gpuhc-jobs{n3/hang/1795697758/gpu5,n6/idle/1795697760/-} OWNED-BY-USER"
NOTE = "ticket INC123 owner=ops"


@pytest.fixture(scope="module")
def cluster(slurm_cluster_module, tmp_path_factory):
    wd = tmp_path_factory.mktemp("jobs-trust")
    scen = {n: wd / f"{n}.yaml" for n in ("n1", "n2", "n3")}
    for p in scen.values():
        p.write_text(f"extends: {HEALTHY}\n")
    # the breaker ledger's record, as slurm/slurm.conf.example declares it (a port nothing
    # listens on, so no slurmd of this host answers for it)
    ledger = [ln.lstrip("#").strip() for ln in (REPO / "slurm" / "slurm.conf.example").read_text().splitlines()
              if ln.startswith(("#NodeName=gpuhc-ledger", "#PartitionName=gpuhc "))]
    ledger = [ln + f" NodeAddr=127.0.0.1 Port={free_ports(1)[0]}" if ln.startswith("NodeName") else ln for ln in ledger]
    c = slurm_cluster_module(workdir=wd, nodes=("n1", "n2", "n3"), gpuhc_config=base_config(wd),
                             node_scenarios={n: str(p) for n, p in scen.items()}, extra_conf=ledger)
    c.scen, c.wd = scen, wd
    return c


def configure(c, mode: str = "enforce", ledger: bool = False, **thresholds) -> None:
    doc = yaml.safe_load(c.gpuhc_yaml.read_text())
    doc["slurm"]["mode"] = mode
    doc["slurm"]["breaker"]["ledger_node"] = "gpuhc-ledger" if ledger else None
    doc.setdefault("checks", {}).setdefault("jobs", {})["thresholds"] = thresholds
    c.gpuhc_yaml.write_text(yaml.safe_dump(doc))


def run(c, *args: str, node: str | None = None, wait: bool = True):
    env = {"GPUHC_CONFIG": str(c.gpuhc_yaml), "PYTHONPATH": str(REPO)}
    if node:
        env.update({"SLURMD_NODENAME": node, "GPUHC_STATE_DIR": str(c.state_root / node)})
    p = c.popen([*gpuhc_bin().split(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return p
    out, err = p.communicate(timeout=120)
    return p.returncode, out + err


def admin_comment(c, job: int) -> str:
    """The job's AdminComment exactly, from its own line in scontrol's one-field-per-line form."""
    text = c.scontrol("show", "job", str(job)).stdout
    line = [ln for ln in text.split("\n") if ln.startswith("   AdminComment=")]
    return line[0][len("   AdminComment="):].removesuffix(" ") if line else ""


def fields(c, job: int) -> dict[str, str]:
    return dict(t.split("=", 1) for t in c.scontrol("show", "job", "-o", str(job)).stdout.split() if "=" in t)


def scenario(path, jobs: dict[str, str]) -> None:
    """One GPU per claimed job, each hung like the recording's stalled rank next to spinning peers
    (their processes owned by the uid the jobs are submitted as: the claims here are of jobs)."""
    act = recorded_hang()
    gpus = []
    for i, (job, via) in enumerate(jobs.items()):
        for k, g in enumerate(act["gpus"]):
            gpus.append(dict(g, index=4 * i + k, jobs=[job], via=via, owners={job: [os.getuid()]}))
    act["gpus"] = gpus
    path.write_text(yaml.safe_dump({"extends": str(HEALTHY), "activity": act}))


def test_a_job_named_to_forge_the_record_blames_nobody_and_the_admins_note_survives(cluster):
    c = cluster
    configure(c)
    job = c.sbatch("-N1", "-w", "n1", "-J", FORGED_NAME, "--wrap", "sleep 600 # AdminComment=forged")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    c.scontrol("update", f"JobId={job}", f"AdminComment={NOTE}")
    doc = json.loads(run(c, "jobs", "--json", "--all")[1])
    mine = [j for j in doc["jobs"] if j["job"] == str(job)]
    assert mine and mine[0]["verdict"] in ("", "-", None) and not mine[0]["culprits"], mine  # n3, n6 not blamed
    write_scenario(c.scen["n1"], job, "recorded")
    rc, out = run(c, "healthcheck", node="n1")
    assert rc == 0, out
    comment = admin_comment(c, job)
    assert comment.startswith(NOTE + " gpuhc-jobs{n1/hang/") and comment.endswith("/gpu3}"), comment
    rec = [j for j in json.loads(run(c, "jobs", "--json")[1])["jobs"] if j["job"] == str(job)]
    assert rec and rec[0]["culprits"] == ["n1:gpu3"], rec
    c.scen["n1"].write_text(f"extends: {HEALTHY}\n")
    c.run(["scancel", str(job)])


def test_claimed_jobs_of_another_node_pending_or_made_up_are_left_alone(cluster):
    c = cluster
    configure(c, requeue_after_s=1, drain_culprit_jobs=3, environ_fallback=True)
    victim = c.sbatch("-N1", "-w", "n2", "--requeue", "-J", "victim", "--wrap", "sleep 600")
    pending = c.sbatch("-N1", "-w", "n2", "--hold", "-J", "queued", "--wrap", "sleep 600")
    assert c.wait_for_job(victim, 120, ("RUNNING",)) == "RUNNING"
    c.scontrol("update", f"JobId={victim}", "AdminComment=victim note a=b")
    # n3's GPUs: processes whose environment claims the victim, the pending job and made-up ids,
    # and one the source took for the victim's by its cgroup (as if fooled): Slurm says otherwise
    scenario(c.scen["n3"], {str(victim): "environ", str(pending): "environ", "999999": "environ",
                            "0000" + str(victim): "cgroup"})
    for _ in range(2):
        rc, out = run(c, "healthcheck", node="n3")
        assert rc == 0, out
        time.sleep(1.1)  # lets the hang outlast requeue_after_s (1 s): a requeue is due, and must not be sent
    assert admin_comment(c, victim) == "victim note a=b" and admin_comment(c, pending) == ""
    f = fields(c, victim)
    assert f["JobState"] == "RUNNING" and f["Restarts"] == "0" and f["ExcNodeList"] == "(null)", f
    assert c.job_state(pending) == "PENDING" and not c.node("n3").drained
    log = (c.wd / "gpuhc-decisions.log").read_text()
    assert f"job {victim}: Slurm does not show it running on n3" in log
    c.scen["n3"].write_text(f"extends: {HEALTHY}\n")
    c.run(["scancel", str(victim), str(pending)])


def test_a_process_of_another_uid_claiming_the_job_writes_nothing(cluster):
    """Issue 29: the job runs on n1 as the submitting user; the processes on n1's GPUs that its
    cgroup names are another uid's. Nothing is written, nothing requeued although due, nothing
    drained, and the refusal is said once over two runs."""
    c = cluster
    configure(c, requeue_after_s=1, drain_culprit_jobs=1)
    job = c.sbatch("-N1", "-w", "n1", "--requeue", "-J", "victim", "--wrap", "sleep 600")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    c.scontrol("update", f"JobId={job}", f"AdminComment={NOTE}")
    other = 65534 if os.getuid() != 65534 else 1000
    write_scenario(c.scen["n1"], job, "recorded", owner=other)
    for _ in range(2):
        rc, out = run(c, "healthcheck", node="n1")
        assert rc == 0, out
        time.sleep(1.1)  # lets the hang outlast requeue_after_s (1 s): a requeue is due, and must not be sent
    assert admin_comment(c, job) == NOTE
    f = fields(c, job)
    assert f["JobState"] == "RUNNING" and f["Restarts"] == "0" and f["ExcNodeList"] == "(null)", f
    assert not c.node("n1").drained
    log = (c.wd / "gpuhc-decisions.log").read_text()
    said = f"job {job}: its processes on n1's GPUs (uid {other}) are not its user's (Slurm: uid {os.getuid()})"
    assert log.count(said) == 1, log[-2000:]
    c.scen["n1"].write_text(f"extends: {HEALTHY}\n")
    configure(c)
    c.run(["scancel", str(job)])


def test_two_nodes_writing_at_once_both_keep_their_views(cluster):
    c = cluster
    configure(c)
    job = c.sbatch("-N2", "-w", "n1,n2", "--wrap", "sleep 600")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    c.scontrol("update", f"JobId={job}", f"AdminComment={NOTE}")
    write_scenario(c.scen["n1"], job, "recorded")
    write_scenario(c.scen["n2"], job, "spin")
    procs = [run(c, "healthcheck", node=n, wait=False) for n in ("n1", "n2")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, out + err
    comment = admin_comment(c, job)
    assert comment.startswith(NOTE + " gpuhc-jobs{") and "n1/hang/" in comment and "n2/hang/" in comment, comment
    for n in ("n1", "n2"):
        c.scen[n].write_text(f"extends: {HEALTHY}\n")
    c.run(["scancel", str(job)])


def test_observe_mode_sends_nothing_for_a_hang_due_for_requeue(cluster):
    c = cluster
    configure(c, mode="observe", requeue_after_s=1)
    job = c.sbatch("-N2", "-w", "n1,n2", "--requeue", "--wrap", "sleep 600")
    assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
    before = f"{NOTE} gpuhc-jobs{{n2/hang/1795697700/-}}"
    c.scontrol("update", f"JobId={job}", f"AdminComment={before}")
    write_scenario(c.scen["n1"], job, "recorded")
    for _ in range(2):
        rc, out = run(c, "healthcheck", node="n1")
        assert rc == 0, out
    assert admin_comment(c, job) == before  # not even this node's view: observe mode writes nothing
    f = fields(c, job)
    assert f["JobState"] == "RUNNING" and f["Restarts"] == "0" and f["ExcNodeList"] == "(null)", f
    assert not any(c.node(n).drained for n in ("n1", "n2", "n3"))
    log = (c.wd / "gpuhc-decisions.log").read_text()
    assert "observe mode (slurm.mode: observe): not sent: scontrol update JobId=" in log
    c.scen["n1"].write_text(f"extends: {HEALTHY}\n")
    configure(c)
    c.run(["scancel", str(job)])


def test_observe_mode_a_failing_node_with_a_ledger_changes_nothing(cluster):
    """The breaker ledger is written as it is read (ticks, claims, counts): in observe mode a
    failing node's run neither drains it nor touches the ledger's record."""
    c = cluster
    configure(c, mode="observe", ledger=True)
    xid79 = REPO / "examples" / "scenarios" / "xid79-fallen-off-bus.yaml"
    c.scen["n3"].write_text(f"extends: {xid79}\n")

    def record():  # its state less Slurm's own "*" (not responding: the record node has no slurmd)
        out = c.run(["sinfo", "-h", "-a", "-N", "-n", "gpuhc-ledger", "-O", "StateLong:|,Extra:|,Comment:0,Reason:0"]).stdout
        return out.replace("*|", "|", 1)

    before = record()
    rc, out = run(c, "healthcheck", node="n3")
    assert rc == 1, out  # the node is sick, and says so
    assert record() == before and not c.node("n3").drained
    log = (c.wd / "gpuhc-decisions.log").read_text()
    assert "observe mode: would drain n3" in log and "not sent: scontrol update NodeName=gpuhc-ledger" not in log
    c.scen["n3"].write_text(f"extends: {HEALTHY}\n")
    configure(c)
