"""gpuhc's Slurm side on a real Slurm (slurmctld + slurmd per node on localhost).

Everything is observed through real scontrol/sinfo/sbatch. The health check is driven by
slurmd's own HealthCheckInterval through the installed shims (slurm/healthcheck.sh, run by
slurmd with its empty environment plus SLURMD_NODENAME), the prolog and epilog by real jobs.
Nodes replay scenarios (examples/scenarios, or small ones written here) in which each run
advances one step, so "fails, then heals" and "fails every other run" are real sequences of
health checks. Nothing of Slurm is faked.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import hostlist
import pytest

from tests.helpers.paths import REPO

from tests.helpers.slurm_cluster import gpuhc_bin
from tests.helpers.slurm_flows import (back_in_service, base_config, decisions, gpuhc, HEALTHY, INTERVAL, RECOMMENDED,
                                       runs, scenario, wait_runs, XID79)

pytestmark = pytest.mark.slurm


XID79_LINE = "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def iso(t: float) -> str:
    """A kernel-log time stamp as `dmesg --time-format iso` prints it (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S,000000+00:00", time.gmtime(t))


def replay_snapshot(path: Path, stage: str, state_dir: Path) -> dict:
    """`gpuhc check` on a recorded snapshot, offline, with a fresh state and default config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHC_", "SLURM"))}
    env["PYTHONPATH"] = str(REPO)
    cp = subprocess.run([*gpuhc_bin().split(), "check", "--nvml-scenario", str(path), "--stage", stage, "--json",
                         "--state-dir", str(state_dir), "--node", "n2"],
                        capture_output=True, text=True, env=env, timeout=120, check=False)
    assert cp.returncode in (0, 1), cp.stderr
    return json.loads(cp.stdout)


def verdict(run: dict) -> set[tuple]:
    """What a run decided: (check, status, subject) of every result that is not a PASS."""
    return {(r["check"], r["status"], r["subject"]) for r in run["results"] if r["status"] not in ("pass", "n/a")}


def drain_report(cluster) -> tuple[dict[str, dict], dict[str, tuple], dict]:
    """gpuhc drain-report --json on the live cluster: records by node, groups as
    ``{cause: (owner, count, [hostlist per row])}``, and the whole document."""
    cp = gpuhc(cluster, "drain-report", "--json", check=True)
    doc = json.loads(cp.stdout)
    assert doc["source"] == "scontrol --oneliner show node"
    groups = {g["cause"]: (g["owner"], g["count"], [r["nodes"] for r in g["rows"]]) for g in doc["groups"]}
    return {rec["node"]: rec for rec in doc["nodes"]}, groups, doc


# ------------------------------------------------------------------ the health check


def test_healthcheck_under_slurmd(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "hc"
    # n2 is healthy until the admin has drained it, then fails every other run: written healthy
    # here, its failing steps placed after the drain (a run before the drain, on a busy machine,
    # would otherwise have drained it with gpuhc's reason).
    admin = scenario(tmp_path, "admin", 16, [])
    c = slurm_cluster(
        workdir=wd, nodes=("n1", "n2", "n3", "n4"), healthcheck=True, healthcheck_interval=INTERVAL,
        healthcheck_node_state=RECOMMENDED["HealthCheckNodeState"],  # ANY,CYCLE
        gpuhc_config=base_config(wd),
        node_scenarios={
            "n1": str(XID79),
            "n2": admin,
            # fails once, then healthy for good
            "n3": scenario(tmp_path, "heal", 8, [16]),
            # fails every other run, for good
            "n4": scenario(tmp_path, "flap", 8, [16, 8] * 10),
        },
    )
    # An admin drains n2; from then on its health check fails every other run: gpuhc wants to
    # drain it. The step counter counts every run, so the steps alternate from wherever it is.
    c.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=admin: bad fan, ticket 4711")
    held = runs(wd, "n2")
    os.replace(scenario(tmp_path, "admin-flap", 16, [8, 16] * (8 + held)), admin)  # whole: a run may be reading it
    shown = {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in c.scontrol("show", "config").stdout.splitlines())}
    assert set(shown["HealthCheckNodeState"].split(",")) == {"ANY", "CYCLE"}, shown["HealthCheckNodeState"]

    c.wait_for(lambda: any(line.startswith("resumed:") for line in decisions(wd, "n3")), 180, "n3 resumed",
               pending=lambda: f"n3's decisions so far: {decisions(wd, 'n3')}")
    # n1 too: its drain (its first run) and its share of the runs below are asserted.
    wait_runs(c, wd, {"n1": 4, "n2": held + 8, "n3": 4, "n4": 8})

    # Slurm ran our shim on every node (the wrapper logs each call slurmd makes).
    calls = (wd / "log" / "calls.log").read_text().split("\n")
    for n in c.nodes:
        assert sum(1 for line in calls if f" healthcheck {n} " in line + " ") >= 4, n

    # n1: an injected fatal Xid drains it with a gpuhc reason.
    n1 = c.node("n1")
    assert n1.drained and n1.reason.startswith("gpuhc: xid79 gpu3") and n1.reason_user == "root"

    # n2: the admin's reason stays, through failing and healthy runs alike.
    n2 = c.node("n2")
    assert n2.drained and n2.reason == "admin: bad fan, ticket 4711"
    assert sum("not overwriting" in line for line in decisions(wd, "n2")) >= 3
    assert not any(line.startswith(("drained:", "resumed:")) for line in decisions(wd, "n2"))

    # n3: drained, held for the hysteresis, then resumed: once each.
    d3 = decisions(wd, "n3")
    acts = [line.split(":")[0] for line in d3 if not line.startswith("passive:")]
    assert acts[:1] == ["drained"] and acts.count("drained") == 1 and acts.count("resumed") == 1
    between = d3[d3.index(next(x for x in d3 if x.startswith("drained:"))):
                 d3.index(next(x for x in d3 if x.startswith("resumed:")))]
    assert sum(line.startswith("passive: PASS") for line in between) >= 2  # plus the resuming run = 3
    assert any("1/3 healthy runs" in x for x in between) and any("2/3 healthy runs" in x for x in between)
    n3 = c.node("n3")
    assert back_in_service(n3, slurm_release), (n3.raw_state, n3.reason)

    # n4: drained once and never resumed while it keeps failing every other run.
    d4 = decisions(wd, "n4")
    assert sum(x.startswith("drained:") for x in d4) == 1 and not any(x.startswith("resumed:") for x in d4)
    n4 = c.node("n4")
    assert n4.drained and n4.reason.startswith("gpuhc: pcie gpu3")

    # gpuhc drain-report on the live cluster shows each of them as it is: who, why, how.
    rep, groups, doc = drain_report(c)
    assert set(rep) == {"n1", "n2", "n4"}
    assert {n: (r["cause"], r["owner"], r["kind"]) for n, r in rep.items()} == {
        "n1": ("xid", "gpuhc", "drained"), "n2": ("admin", "admin", "drained"), "n4": ("pcie", "gpuhc", "drained")}
    assert groups == {"xid": ("gpuhc", 1, ["n1"]), "pcie": ("gpuhc", 1, ["n4"]), "admin": ("admin", 1, ["n2"])}
    assert rep["n2"]["reason"] == "admin: bad fan, ticket 4711" and rep["n1"]["reason"] == n1.reason
    assert all(r["user"] == "root" and 0 <= r["age_s"] < 600 for r in rep.values())
    assert (doc["total_nodes"], doc["unavailable"], doc["by_owner"]) == (4, 3, {"gpuhc": 2, "admin": 1})
    assert doc["partitions"] == {"gpu": {"unavailable": 3, "total": 4}}

    # Every run was also appended to the event log, with what the Slurm side did.
    events = [json.loads(line) for line in (wd / "events.jsonl").read_text().splitlines()]
    assert any(e["node"] == "n1" and e["slurm"]["action"] == "drain" and e["slurm"]["acted"] for e in events)


def test_circuit_breaker_stops_at_the_cap(slurm_cluster, tmp_path):
    wd = tmp_path / "br"
    nodes = ("n1", "n2", "n3", "n4")
    cfg = base_config(wd, breaker={"max_drained": 2, "settle_s": 1.0})
    cfg["output"]["prometheus_textfile"] = str(wd / "prom" / "gpuhc.prom")
    c = slurm_cluster(workdir=wd, nodes=nodes, healthcheck=True, healthcheck_interval=INTERVAL,
                      gpuhc_config=cfg, node_scenarios={n: str(XID79) for n in nodes})
    wait_runs(c, wd, dict.fromkeys(nodes, 4))

    held = [n for n in c.nodes_now() if n.drained]
    assert len(held) == 2 and all(n.reason.startswith("gpuhc: xid79 gpu3") for n in held)
    lines = [x for n in nodes for x in decisions(wd, n)]
    assert any("circuit breaker open: 2/4 nodes drained by gpuhc >= cap 2" in x for x in lines)
    free = [n for n in nodes if n not in {h.name for h in held}]
    for n in free:  # the nodes left in service say so on every run, and exit 4
        assert sum("NOT draining" in x for x in decisions(wd, n)) >= 2
    slurmd_log = "".join((wd / "log" / f"slurmd.{n}.log").read_text() for n in free)
    assert "health_check failed: rc:4" in slurmd_log
    prom = (wd / "prom" / "gpuhc-breaker.prom").read_text()
    assert re.search(r"^gpuhc_breaker_open 1(\.0)?$", prom, re.M)
    assert re.search(r"^gpuhc_breaker_cap 2(\.0)?$", prom, re.M)

    # drain-report: the two held by gpuhc in one group and one row, the two in service absent.
    rep, groups, doc = drain_report(c)
    held_names = sorted(h.name for h in held)
    assert sorted(rep) == held_names and not set(free) & set(rep)
    assert all((r["cause"], r["owner"], r["kind"]) == ("xid", "gpuhc", "drained") for r in rep.values())
    (row,) = groups["xid"][2]  # one row: the same reason on both
    assert set(groups) == {"xid"} and groups["xid"][:2] == ("gpuhc", 2)
    assert row.startswith("n[") and hostlist.expand_hostlist(row) == held_names
    assert (doc["total_nodes"], doc["unavailable"], doc["by_kind"]) == (4, 2, {"drained": 2})
    assert doc["partitions"] == {"gpu": {"unavailable": 2, "total": 4}}


# ------------------------------------------------------------------ prolog, epilog, quarantine


def test_prolog_epilog_and_quarantine(slurm_cluster, tmp_path, slurm_release):
    wd = tmp_path / "pe"
    xid_gpu0 = tmp_path / "xid-gpu0.yaml"
    xid_gpu0.write_text(XID79.read_text().replace("0000:5d:00", "0000:18:00").replace(
        "extends: healthy-8xh100.yaml", f"extends: {HEALTHY}"))
    # n2 is healthy when its job starts; the job itself crashes with an Xid 79 written to the
    # node's kernel log (a recorded file standing in for /dev/kmsg), as a GPU falling off the
    # bus mid-job would; its IB port mlx5_3 has dropped packets to show in the bundle.
    klog = wd / "n2-kernel.log"
    klog.parent.mkdir(parents=True, exist_ok=True)
    klog.write_text(f"{iso(time.time() - 60)} systemd[1]: Started Slurm node daemon.\n")
    xid_line = wd / "xid-line.txt"
    xid_line.write_text(XID79_LINE)
    n2_scenario = tmp_path / "n2.yaml"
    n2_scenario.write_text(f"extends: {HEALTHY}\nib_ports:\n  - {{device: mlx5_3, counters: {{port_xmit_discards: 1234}}}}\n")
    cfg = base_config(wd)
    cfg["hosts"] = [{"match": "n2", "sources": {"nvml_scenario": str(n2_scenario), "kernel_log": str(klog)}}]
    c = slurm_cluster(
        workdir=wd, nodes=("n1", "n2"), prolog=True, epilog=True, gpus_per_node=8,
        prolog_flags=RECOMMENDED["PrologFlags"],  # Alloc: the prolog runs when the job is granted
        gpuhc_config=cfg, node_scenarios={"n1": str(xid_gpu0)},
    )
    assert "PrologFlags=Alloc" in c.scontrol("show", "config").stdout.replace(" ", "")
    # A job on n1's GPUs 0-1: the prolog finds gpu0's Xid 79, drains with gpuhc's reason first,
    # then fails, and Slurm requeues the job (not held: nohold_on_prolog_fail).
    job_a = c.sbatch("-w", "n1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "true")

    def requeued():
        text = c.scontrol("show", "job", "-o", str(job_a)).stdout
        return "JobState=PENDING" in text and re.search(r"Restarts=[1-9]", text) and text

    job_text = c.wait_for(requeued, 120, f"job {job_a} requeued", pending=lambda: c.job_state(job_a))
    assert "Held" not in job_text and "Priority=0 " not in job_text
    n1 = c.node("n1")
    assert n1.drained and n1.reason.startswith("gpuhc: xid79 gpu0"), n1.reason
    assert any("prolog gpus=0,1: FAIL" in x for x in decisions(wd, "n1", "prolog"))

    # A job that crashes on n2 with an Xid: its epilog writes a post-mortem bundle; the node,
    # healthy at the prolog, fails at the epilog and is drained with gpuhc's reason, which
    # Slurm's own "Epilog error" drain (our exit 1) does not replace.
    crash = f'printf "%s %s\\n" "$(date -u +%Y-%m-%dT%H:%M:%S,%6N+00:00)" "$(cat {xid_line})" >> {klog}; exit 3'
    job_b = c.sbatch("-w", "n2", "--gres=gpu:8", "-o", "/dev/null", "--wrap", crash)
    assert c.wait_for_job(job_b, 120, ("FAILED",)) == "FAILED"
    c.wait_for(lambda: "epilog error on n2" in (wd / "log" / "slurmctld.log").read_text(), 120,
               "slurmctld to log n2's epilog error",
               pending=lambda: f"n2's epilog decisions: {decisions(wd, 'n2', 'epilog')}")
    assert any("prolog gpus=0,1,2,3,4,5,6,7: PASS" in x for x in decisions(wd, "n2", "prolog")), \
        decisions(wd, "n2", "prolog")
    n2 = c.node("n2")
    assert n2.drained and n2.reason.startswith("gpuhc: xid79 gpu3"), n2.reason
    bundles = [p for p in (wd / "postmortem").iterdir() if p.name.startswith(f"n2-{job_b}-")]
    assert len(bundles) == 1 and stat.S_IMODE(bundles[0].stat().st_mode) == 0o700
    bundle = bundles[0]
    meta = json.loads((bundle / "job.json").read_text())
    assert (meta["job_id"], meta["user"], meta["exit_code"]) == (str(job_b), "root", str(3 << 8))
    assert meta["missing"] == [] and meta["kernel_log"]["lines"] == 2
    assert any(str(bundle) in x for x in decisions(wd, "n2", "epilog"))
    # The evidence: the raw Xid line as the kernel wrote it, the event the checks parsed, and
    # the IB counters.
    kernel = (bundle / "kernel.log").read_text().splitlines()
    assert len(kernel) == 2 and kernel[1].endswith(XID79_LINE.strip()), kernel
    events = (bundle / "kernel-events.log").read_text()
    assert "xid" in events.lower() and "79" in events and "0000:5d:00" in events, events
    ports = {p["device"]: p for p in json.loads((bundle / "ib.json").read_text())}
    assert len(ports) == 8 and ports["mlx5_3"]["counters"]["port_xmit_discards"] == 1234
    assert ports["mlx5_0"]["counters"]["symbol_error"] == 0 and ports["mlx5_0"]["state"] == "ACTIVE"
    # snapshot.yaml replays offline to the verdict the epilog reached on the node.
    results = json.loads((bundle / "results.json").read_text())
    replay = replay_snapshot(bundle / "snapshot.yaml", results["stage"], tmp_path / "replay-state")
    assert (replay["status"], replay["exit_code"]) == (results["status"], results["exit_code"]) == ("fail", 1)
    assert verdict(replay) == verdict(results) and ("xid", "fail", "gpu3") in verdict(results)

    # drain-report on the live cluster: both held by gpuhc, each for its Xid.
    rep, groups, _ = drain_report(c)
    assert {n: (r["cause"], r["owner"], r["kind"]) for n, r in rep.items()} == {
        "n1": ("xid", "gpuhc", "drained"), "n2": ("xid", "gpuhc", "drained")}
    assert groups["xid"][:2] == ("gpuhc", 2) and sorted(groups["xid"][2]) == ["n1", "n2"]  # two reasons, two rows

    # Quarantine: listing, a failed retest on the node itself, retire, release.
    listed = json.loads(gpuhc(c, "quarantine", "list", "--json", check=True).stdout)
    assert [(r["node"], r["phase"]) for r in listed] == [("n1", "drained"), ("n2", "drained")]
    cols = gpuhc(c, "quarantine", "list", "-o", "phase,node", "--parsable", "--noheader", check=True).stdout
    assert cols == "drained|n1\ndrained|n2\n", cols
    # A retest acknowledges the Xid it was drained for (the admin says the cause was dealt
    # with), so what fails it is a fault still visible now: here a row remap still pending
    # because the GPU was not reset.
    rt = gpuhc(c, "quarantine", "retest", "--nvml-scenario", str(HEALTHY.parent / "row-remap-pending.yaml"), node="n1")
    assert rt.returncode == 1, rt.stderr
    assert c.node("n1").reason.endswith("[q1]") and c.node("n1").reason.startswith("gpuhc: xid79 gpu0")
    refused = gpuhc(c, "quarantine", "retest", "n2", node="n1")
    assert refused.returncode == 2 and "not this node" in refused.stderr
    assert gpuhc(c, "quarantine", "retire", "n1").returncode == 0
    assert c.node("n1").reason == "gpuhc: RETIRED xid79 gpu0 (0000:18:00.0): GPU has fallen off the bus"
    listed = json.loads(gpuhc(c, "quarantine", "list", "n[1-2]", "--json", check=True).stdout)
    assert [(r["node"], r["phase"]) for r in listed] == [("n1", "retired"), ("n2", "drained")]
    # n2, repaired: its retest on the node passes and resumes it.
    ok = gpuhc(c, "quarantine", "retest", "--nvml-scenario", str(HEALTHY), node="n2")
    assert ok.returncode == 0 and "retest passed" in ok.stderr, ok.stderr
    assert back_in_service(c.node("n2"), slurm_release)
    # An admin's drain is not gpuhc's to release.
    c.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=admin: keep out")
    rel = gpuhc(c, "quarantine", "release", "n[1-2]")
    assert rel.returncode == 1 and "n2: FAILED" in rel.stdout and "n1: ok" in rel.stdout
    assert back_in_service(c.node("n1"), slurm_release)
    assert c.node("n2").reason == "admin: keep out"
    c.run(["scancel", str(job_a)], check=False)


def test_prolog_drains_for_a_stray_process_on_the_jobs_gpu(slurm_cluster, tmp_path):
    """Issue 14: a job's leftover holds gpu1. A job given gpu0 runs; a job given gpus 0-1 makes
    the prolog drain the node with a reason naming the pid, its name and the GiB it holds, and
    Slurm requeues that job."""
    wd = tmp_path / "occ"
    c = slurm_cluster(workdir=wd, nodes=("n1",), prolog=True, gpus_per_node=8,
                      prolog_flags=RECOMMENDED["PrologFlags"], gpuhc_config=base_config(wd),
                      node_scenarios={"n1": str(REPO / "examples" / "scenarios" / "stray-process.yaml")})
    ok = c.sbatch("-w", "n1", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true")
    assert c.wait_for_job(ok, 120, ("COMPLETED",)) == "COMPLETED"
    assert not c.node("n1").drained
    assert any("prolog gpus=0: PASS" in x for x in decisions(wd, "n1", "prolog")), decisions(wd, "n1", "prolog")
    job = c.sbatch("-w", "n1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "true")

    def requeued():
        text = c.scontrol("show", "job", "-o", str(job)).stdout
        return "JobState=PENDING" in text and re.search(r"Restarts=[1-9]", text) and text

    c.wait_for(requeued, 120, f"job {job} requeued", pending=lambda: c.job_state(job))
    n1 = c.node("n1")
    assert n1.drained, n1
    assert n1.reason.startswith("gpuhc: occupancy gpu1 holds 1 compute process: pid 48213 (python3, 20.0 GiB)"), n1.reason


def test_healthcheck_shim_with_slurmds_empty_environment_and_a_hung_slurmctld(slurm_cluster, tmp_path):
    """The shim as slurmd runs it: no PATH, nothing but SLURMD_NODENAME (plus what the test
    wrapper adds: config, state dir, SLURM_CONF). A healthy node sends nothing to Slurm; a
    failing node whose slurmctld hangs ends within its timeout, says so, and remembers nothing."""
    wd = tmp_path / "env"
    c = slurm_cluster(workdir=wd, nodes=("n1",), gpuhc_config=base_config(wd, timeout_s=2.0),
                      node_scenarios={"n1": str(HEALTHY)})

    def shim(*args):
        return subprocess.run(["env", "-i", "SLURMD_NODENAME=n1", str(wd / "bin" / "healthcheck"), *args],
                              capture_output=True, text=True, timeout=60)

    cp = shim()
    assert cp.returncode == 0, cp.stderr
    assert "gpuhc healthcheck n1: passive: PASS" in cp.stderr
    assert not c.node("n1").drained

    ctld = c._procs["slurmctld"]
    os.kill(ctld.pid, signal.SIGSTOP)  # accepts connections, never answers
    try:
        cp = shim("--nvml-scenario", str(XID79))
    finally:
        os.kill(ctld.pid, signal.SIGCONT)
    assert cp.returncode == 1, cp.stderr
    assert "Slurm did not answer as needed" in cp.stderr and "no answer within 2.0s" in cp.stderr
    state = json.loads((wd / "state" / "n1" / "state.json").read_text())
    assert not state.get("slurm", {}).get("nodes", {}).get("n1", {}).get("drained_at")
    assert not c.node("n1").drained  # nothing half-done

    cp = shim("--nvml-scenario", str(XID79))  # slurmctld back: now it drains
    assert cp.returncode == 1 and c.node("n1").reason.startswith("gpuhc: xid79 gpu3"), cp.stderr


def test_slurm_conf_example_is_accepted_by_slurm(slurm_cluster, tmp_path):
    """The lines slurm/slurm.conf.example recommends, loaded by a real slurmctld/slurmd."""
    conf = RECOMMENDED
    assert set(conf) == {"HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState", "Prolog", "Epilog",
                         "PrologFlags", "PrologEpilogTimeout", "SchedulerParameters"}
    # The harness writes its own program paths, PrologEpilogTimeout and SchedulerParameters.
    extra = "\n".join(f"{k}={v}" for k, v in conf.items() if k in ("HealthCheckInterval", "HealthCheckNodeState",
                                                                   "PrologFlags"))
    c = slurm_cluster(workdir=tmp_path / "conf", nodes=("n1",), extra_conf=extra,
                      prolog_epilog_timeout=int(conf["PrologEpilogTimeout"]))
    shown = {}
    for line in c.scontrol("show", "config").stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            shown[key.strip()] = value.strip()
    assert shown["HealthCheckInterval"].split()[0] == conf["HealthCheckInterval"]
    assert set(shown["HealthCheckNodeState"].split(",")) == set(conf["HealthCheckNodeState"].split(","))
    assert shown["PrologFlags"] == conf["PrologFlags"]
    assert shown["PrologEpilogTimeout"].split()[0] == conf["PrologEpilogTimeout"]
    assert conf["SchedulerParameters"] in shown["SchedulerParameters"]


def test_reasons_round_trip_through_real_scontrol(slurm_cluster, tmp_path, monkeypatch):
    """What gpuhc sends is exactly what Slurm shows back: argv text that looks like other
    scontrol keys, shell syntax, non-ASCII, and a reason cut to 255 bytes."""
    from gpuhc.model.result import Action, Result, Status
    from gpuhc.slurm.policy.reason import build_reason
    from gpuhc.slurm.act.scontrol import Scontrol

    c = slurm_cluster(workdir=tmp_path / "rt", nodes=("n1",))
    monkeypatch.setenv("SLURM_CONF", str(c.conf_path))
    monkeypatch.setenv("PATH", c.env()["PATH"])  # this release's scontrol
    sc = Scontrol()
    for msg in ("Xid 79, pid=1234, name=python3 Reason=x State=IDLE NodeName=n9",
                "é ü 😀 %s %n (0000:5d:00.0): 50% [root@2024-01-01T00:00:00]",
                "x" * 400,
                "tab\there; rm -rf / `id` $(id) \"q\" 'q'\nsecond line"):
        reason = build_reason([Result("xid", Status.FAIL, msg, "gpu3", action=Action.DRAIN_TICKET)], cycle=2)
        sc.drain("n1", reason)
        node = c.node("n1")
        assert node.reason == reason and node.drained
        assert len(reason.encode()) <= 255
