"""The Slurm flows (healthcheck/prolog/epilog) with the scontrol runner injected.

The runner here keeps a tiny node table so that the flows' read-act-verify sequence can be
followed call by call; the real Slurm behaviour is proven in tests/slurm_real/test_e2e.py.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile

import pytest

from gpuhc.model.result import Action, Result, Status
from gpuhc.slurm.flows import entry
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.read.sinfo import FIELDS
from gpuhc.sources import SourceSpec
from tests.helpers.minislurm import (config, EPILOG_ENV, flow, last_count, memory, MiniSlurm, OK, OUR_REASON,
                                     RebootingSlurm, run, XID)
from tests.helpers.live_paths import isolated
from tests.helpers.paths import REPO, SCENARIOS


# ------------------------------------------------------------------ health check


def test_healthy_node_not_held_costs_slurm_nothing(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, "passive", None, [OK])
    assert out.exit_code == 0 and out.decision is None


def test_failure_drains_after_reading_and_counting_then_verifies(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    out = run(tmp_path, monkeypatch, "passive", s, [OK, XID])
    assert out.exit_code == 1 and out.acted and out.decision.act is Act.DRAIN
    one = ["sinfo", "-h", "-a", "-N", "-n", "n1", "-O", FIELDS]  # this node alone
    scope = ["sinfo", "-h", "-O", FIELDS, "-p", "gpu"]  # its partition, for the breaker
    assert s.calls == [
        one,
        scope,  # breaker count
        ["scontrol", "update", "NodeName=n1", "State=DRAIN", f"Reason={OUR_REASON}"],
        one,  # verify
        scope,  # post-drain recount
    ]
    assert s.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON]
    assert memory(tmp_path)["reason"] == OUR_REASON
    assert any("drained" in line and OUR_REASON in line for line in out.lines)


def test_held_node_fails_again_nothing_is_resent(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])
    s.calls.clear()
    out = run(tmp_path, monkeypatch, "passive", s, [XID])
    assert out.decision.act is Act.KEEP and s.updates() == []


def test_healed_node_is_resumed_after_the_hysteresis(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])
    acts = [run(tmp_path, monkeypatch, "passive", s, [OK]).decision.act for _ in range(3)]
    assert acts == [Act.WAIT, Act.WAIT, Act.RESUME]
    assert s.nodes["n1"] == ["IDLE", None] and not memory(tmp_path).get("drained_at")
    s.calls.clear()
    assert run(tmp_path, monkeypatch, "passive", s, [OK]).decision is None and s.calls == []


def test_admin_reason_is_never_overwritten(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE+DRAIN", "bad fan, ticket 4711")})
    out = run(tmp_path, monkeypatch, "passive", s, [XID])
    assert out.decision.act is Act.KEEP and s.updates() == [] and out.exit_code == 1
    assert s.nodes["n1"][1] == "bad fan, ticket 4711"


def test_breaker_open_blocks_the_drain_and_exits_4(tmp_path, monkeypatch):
    nodes = {"n1": ("IDLE", None), "n2": ("IDLE+DRAIN", "gpuhc: x"), "n3": ("DOWN+DRAIN", "gpuhc: y [q1]")}
    s = MiniSlurm(nodes)
    out = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=config(tmp_path, breaker={"max_drained": 2}))
    assert out.exit_code == 4 and out.decision.act is Act.BLOCKED and s.updates() == []
    assert out.breaker.open and (out.breaker.drained, out.breaker.cap) == (2, 2)
    assert any("circuit breaker open: 2/3 nodes drained by gpuhc >= cap 2" in line for line in out.lines)
    assert not memory(tmp_path).get("drained_at")


def test_concurrent_drain_past_the_cap_is_undone_by_the_later_node(tmp_path, monkeypatch):
    class Racing(MiniSlurm):
        """n1 drains between our count and our recount (as another node's health check would)."""

        def apply(self, argv):
            if self.verb(argv) == "drain":
                self.nodes["n1"] = ["IDLE+DRAIN", "gpuhc: pcie gpu0 x8"]
            return super().apply(argv)

    s = Racing({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    out = run(tmp_path, monkeypatch, "passive", s, [XID], node="n2", cfg=config(tmp_path, breaker={"max_drained": 1}))
    # Same drain second: ranked by name, n1 keeps its drain and n2 gives its own back.
    assert out.exit_code == 4 and out.decision.act is Act.BLOCKED and not out.acted
    assert s.nodes["n2"] == ["IDLE", None] and s.nodes["n1"][0] == "IDLE+DRAIN"
    assert not memory(tmp_path, "n2").get("drained_at")


def test_drain_timeout_is_not_remembered_as_a_drain(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)}, fail={"drain": subprocess.TimeoutExpired(["scontrol"], 10)})
    out = run(tmp_path, monkeypatch, "passive", s, [XID])
    assert out.exit_code == 1 and not out.acted and "no answer within" in out.slurm_error
    assert not memory(tmp_path).get("drained_at")
    assert any("nothing remembered" in line for line in out.lines)


def test_slurm_unreachable_on_a_healthy_held_node_exits_3(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])
    s.fail = {"show": (1, "", "slurm_load_node error: Unable to contact slurm controller")}
    out = run(tmp_path, monkeypatch, "passive", s, [OK])
    assert out.exit_code == 3 and "Unable to contact" in out.slurm_error
    assert memory(tmp_path)["passes"] == 0  # no pass counted on a run that could not decide


def test_resume_reported_failed_but_applied_is_recognised(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])
    s.fail = {"resume": ("apply-then-fail", 1, "", "slurm_update error: Invalid node state specified")}
    outs = [run(tmp_path, monkeypatch, "passive", s, [OK]) for _ in range(3)]
    assert outs[-1].decision.act is Act.RESUME and outs[-1].acted and outs[-1].slurm_error is None
    assert not memory(tmp_path).get("drained_at")


def test_unregistered_node_is_not_resumed(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])
    s.nodes["n1"][0] = "UNKNOWN+DRAIN"
    outs = [run(tmp_path, monkeypatch, "passive", s, [OK]) for _ in range(4)]
    assert all(o.decision.act is Act.NONE for o in outs) and s.updates()[-1][3] == "State=DRAIN"


def test_internal_error_in_the_checks_never_touches_slurm(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, "passive", None, [], raises=RuntimeError("bug"))
    assert out.exit_code == 3 and any("internal error" in line for line in out.lines)


# ------------------------------------------------------------------ prolog


def test_prolog_happy_path_sends_nothing_to_slurm(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, "prolog", None, [OK], env={"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "0,1"})
    assert out.exit_code == 0
    assert any("job 42 prolog gpus=0,1: PASS" in line for line in out.lines)


def test_prolog_on_a_node_gpuhc_held_asks_once_then_never_again(tmp_path, monkeypatch):
    # A prolog runs on a node gpuhc remembers holding only when someone resumed it (issue 20):
    # one read (and, the reason gone, when slurmctld started: a cold start is no resume, issue
    # 30), the acknowledgement, the hold forgotten; the next prolog asks nothing.
    s = MiniSlurm({"n1": ("IDLE", None)})
    run(tmp_path, monkeypatch, "passive", s, [XID])
    s.nodes["n1"] = ["ALLOCATED", None]  # the admin's resume, and a job on the node
    asked = len(s.calls)
    out = run(tmp_path, monkeypatch, "prolog", s, [OK], env={"SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "0,1"})
    assert out.exit_code == 0 and len(s.calls) == asked + 2 and s.calls[-1][1:3] == ["show", "config"]
    assert any("resumed outside gpuhc" in line for line in out.lines)
    assert memory(tmp_path)["drained_at"] is None
    again = run(tmp_path, monkeypatch, "prolog", None, [OK], env={"SLURM_JOB_ID": "43", "SLURM_JOB_GPUS": "0,1"})
    assert again.exit_code == 0


def test_prolog_failure_drains_first_then_fails_the_job(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    _, f = flow(tmp_path, monkeypatch, "prolog", s, [XID], env={"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "3"})
    out = entry.prolog(f)
    assert f.opts.gpus == [3]
    assert out.exit_code == 1 and out.acted and s.nodes["n1"] == ["MIXED+DRAIN", OUR_REASON]
    assert any("requeues the job" in line for line in out.lines)


OFF = {"breaker": {"enabled": False}}


@pytest.mark.parametrize("known,code", [("closed", 0), (None, 0), ("stale", 0), ("open", 0), ("off", 1)])
def test_prolog_failure_with_slurm_down_lets_the_job_run_unless_the_breaker_is_off(
        tmp_path, monkeypatch, known, code):
    # Slurm silent: exit 1 makes Slurm drain with "Prolog error" once it answers, around the
    # breaker's recount; however recent, a count that says "closed" cannot speak for a storm in
    # which every node is as late (issue 45). Only with the breaker off is there no cap to pass.
    if known not in (None, "off"):
        last_count(tmp_path, open_=known == "open", age_s=5000 if known == "stale" else 60)
    s = MiniSlurm({"n1": ("IDLE", None)}, fail={"show": subprocess.TimeoutExpired(["scontrol"], 10)})
    out = run(tmp_path, monkeypatch, "prolog", s, [XID], env={"SLURM_JOB_ID": "7"},
              cfg=config(tmp_path, **OFF) if known == "off" else None)
    assert out.exit_code == code
    said = [line for line in out.lines if "letting the job run" in line]
    assert bool(said) == (code == 0), out.lines
    if known in (None, "stale"):
        assert "unknown" in said[0]
    if said:
        assert "a job on a suspect GPU" in said[0] and "a node out past the cap" in said[0], said


@pytest.mark.parametrize("stage", ["prolog", "epilog"])
@pytest.mark.parametrize("known,code", [("closed", 0), (None, 0), ("open", 0), ("off", 1)])
def test_run_lock_held_by_another_run_lets_the_job_run_unless_the_breaker_is_off(
        tmp_path, monkeypatch, stage, known, code):
    # Issue 30: with the lock held (another gpuhc run on the node), the prolog used to give up
    # and exit 1 without having read the breaker, and Slurm drained the node past the cap; issue
    # 45: trusting this node's last count "closed" did the same in a storm.
    import fcntl

    from gpuhc.slurm.flows import runlock

    if known not in (None, "off"):
        last_count(tmp_path, open_=known == "open")
    (tmp_path / "state").mkdir(exist_ok=True, mode=0o700)
    holder = os.open(str(tmp_path / "state" / runlock.LOCK_FILE), os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another open file: this process's own lock cannot take it
    monkeypatch.setattr(runlock, "RESERVE_S", 1000.0)  # give up at once rather than wait the stage out
    try:
        env = {**EPILOG_ENV, "SLURM_JOB_EXIT_CODE": "0"} if stage == "epilog" else {"SLURM_JOB_ID": "7"}
        out = run(tmp_path, monkeypatch, stage, MiniSlurm({"n1": ("IDLE", None)}), [XID], env=env,
                  cfg=config(tmp_path, **OFF) if known == "off" else None)
    finally:
        os.close(holder)
        runlock.release()
    assert out.exit_code == code and out.extra.get("run_lock"), out.lines
    assert any("letting the job run" in line for line in out.lines) == (code == 0)


@pytest.mark.parametrize("fail_open,code", [(True, 0), (False, 1)])
def test_prolog_fails_open_when_gpuhc_breaks(tmp_path, monkeypatch, fail_open, code):
    out = run(tmp_path, monkeypatch, "prolog", None, [], raises=RuntimeError("bug"),
              cfg=config(tmp_path, prolog_fail_open=fail_open))
    assert out.exit_code == code and any("gpuhc broke" in line for line in out.lines)


def test_prolog_that_cannot_judge_lets_the_job_run(tmp_path, monkeypatch):
    err = Result("ecc", Status.ERROR, "timed out after 5.0s reading nvml")
    out = run(tmp_path, monkeypatch, "prolog", None, [err], env={"SLURM_JOB_ID": "9"})
    assert out.exit_code == 0 and any("could not judge" in line and "timed out" in line for line in out.lines)


def test_prolog_with_breaker_open_lets_the_job_run(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE+DRAIN", "gpuhc: x")})
    out = run(tmp_path, monkeypatch, "prolog", s, [XID], cfg=config(tmp_path, breaker={"max_drained": 1}))
    assert out.exit_code == 0 and s.updates() == [] and out.decision.act is Act.BLOCKED


# ------------------------------------------------------------------ epilog


@pytest.fixture(autouse=True)
def recorded_kmsg(tmp_path, monkeypatch):
    """The bundle's raw kernel lines come from this recording, never from the test host."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1000000,-;Linux version 6.1\n4,2,2000000,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"
                    " SUBSYSTEM=pci\n")
    monkeypatch.setattr("gpuhc.postmortem.job.KMSG", str(kmsg))
    monkeypatch.setattr("gpuhc.postmortem.job.DMESG", str(tmp_path / "no-dmesg"))
    return kmsg


def test_epilog_of_a_failed_job_writes_a_private_bundle(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, "epilog", None, [OK], env=EPILOG_ENV)
    path = out.extra["postmortem"]
    assert out.exit_code == 0 and os.path.basename(path).startswith("n1-1234-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert sorted(os.listdir(path)) == ["README.txt", "ib.json", "job.json", "kernel-events.log", "kernel.log",
                                        "results.json", "snapshot.yaml"]
    meta = json.load(open(os.path.join(path, "job.json")))
    assert (meta["job_id"], meta["user"], meta["exit_code"], meta["missing"]) == ("1234", "alice", "256", [])
    kernel = open(os.path.join(path, "kernel.log")).read().splitlines()
    assert len(kernel) == 2 and kernel[1].endswith("Z NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.")
    assert meta["kernel_log"] == {"lines": 2, "note": f"2 lines from {tmp_path / 'kmsg'}"}
    assert "kernel-events.log" in open(os.path.join(path, "README.txt")).read()
    assert json.load(open(os.path.join(path, "results.json")))["results"][0]["check"] == "ecc"
    assert any("post-mortem bundle" in line and path in line for line in out.lines)


def test_epilog_of_a_failed_job_on_a_cpu_node_writes_no_bundle(tmp_path, monkeypatch):
    """A bundle is GPU evidence: on a node gpu-count found without GPUs, as expected, there is none."""
    cpu = Result("gpu-count", Status.PASS, "no GPUs expected (Slurm gives this node no GPUs), no NVIDIA driver",
                 value=0, threshold=0)
    out = run(tmp_path, monkeypatch, "epilog", None, [cpu], env=EPILOG_ENV)
    assert out.exit_code == 0 and "postmortem" not in out.extra
    assert any("no post-mortem bundle (a node without GPUs)" in line for line in out.lines), out.lines
    assert not os.path.exists(tmp_path / "postmortem") or not os.listdir(tmp_path / "postmortem")


def test_epilog_bundle_as_tar_gz(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, "epilog", None, [OK], env=EPILOG_ENV,
              cfg=config(tmp_path, postmortem_format="tar.gz"))
    path = out.extra["postmortem"]
    assert path.endswith(".tar.gz") and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert any(n.endswith("/job.json") for n in names)
    assert not [p for p in os.listdir(tmp_path / "pm") if p.startswith(".")]  # no staging left


def test_epilog_of_a_good_job_writes_nothing_and_asks_nothing(tmp_path, monkeypatch):
    out = run(tmp_path, monkeypatch, "epilog", None, [OK], env={**EPILOG_ENV, "SLURM_JOB_EXIT_CODE": "0"})
    assert out.exit_code == 0 and "postmortem" not in out.extra and not (tmp_path / "pm").exists()


def test_epilog_failure_drains(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("ALLOCATED", None)})
    out = run(tmp_path, monkeypatch, "epilog", s, [XID], env=EPILOG_ENV)
    assert out.exit_code == 1 and s.nodes["n1"] == ["ALLOCATED+DRAIN", OUR_REASON]


def test_bundles_beyond_keep_are_pruned(tmp_path, monkeypatch):
    cfg = config(tmp_path, postmortem_keep=2)
    for job in range(4):
        run(tmp_path, monkeypatch, "epilog", None, [OK], env={**EPILOG_ENV, "SLURM_JOB_ID": str(job)}, cfg=cfg)
    left = sorted(os.listdir(tmp_path / "pm"))
    assert len(left) == 2 and left[0].startswith("n1-2-") and left[1].startswith("n1-3-")


# ------------------------------------------------------------------ the commands


def _gpuhc(args, env, tmp_path):
    full = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO),
            "GPUHC_STATE_DIR": str(tmp_path / "st"), **env}
    return subprocess.run([sys.executable, "-m", "gpuhc", *args], env=full, capture_output=True, text=True, timeout=60)


def test_broken_config_is_said_and_the_hooks_go_on_without_it(tmp_path):
    """No hook stops at a config error any more: each says it and judges on the last good
    config or the defaults (tests/slurm/flows/test_config_guard.py follows it through)."""
    bad = tmp_path / "gpuhc.yaml"
    bad.write_text("slurm:\n  resume_after: many\n")
    env = {"GPUHC_CONFIG": str(bad), "SLURMD_NODENAME": "n7"}
    full = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "GPUHC_STATE_DIR": str(tmp_path / "st"), **env}
    for hook in ("prolog", "healthcheck"):
        # the defaults it falls back on name the live paths: run where they are scratch
        p = subprocess.run(isolated([sys.executable, "-m", "gpuhc", hook, "--kernel-log", os.devnull]), env=full,
                           capture_output=True, text=True, timeout=60)
        assert f"gpuhc {hook} n7: error: config does not load" in p.stderr and "resume_after" in p.stderr
        assert "Traceback" not in p.stderr and p.returncode != 2


def test_a_hung_scontrol_costs_its_timeout_not_the_run(tmp_path, monkeypatch):
    # A stand-in executable that never answers (the subprocess plumbing, not Slurm's behaviour).
    hang = tmp_path / "scontrol"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    cfg = config(tmp_path, scontrol=str(hang), sinfo=str(hang), timeout_s=1.0)
    _, f = flow(tmp_path, monkeypatch, "passive", None, [XID], cfg=cfg)
    f.make_scontrol = None  # the real wrapper, real subprocess, real timeout
    out = entry.healthcheck(f)
    assert out.exit_code == 1 and "no answer within 1.0s" in out.slurm_error
    assert not memory(tmp_path).get("drained_at")


@pytest.mark.parametrize("raw,failed,how", [
    ("0", False, "exited 0"), (None, False, "exited 0"), ("256", True, "exited 1 (status 256)"),
    ("768", True, "exited 3 (status 768)"), ("9", True, "killed by signal 9 (status 9)"),
    ("garbage", True, "exit status 'garbage'"),
])
def test_job_exit(raw, failed, how):
    env = {} if raw is None else {"SLURM_JOB_EXIT_CODE": raw}
    assert entry.job_exit(env) == (failed, how)


def test_a_failed_recount_leaves_the_verified_drain_standing_and_said(tmp_path, monkeypatch):
    """Slurm stops answering between the drain and the recount: the drain took and is
    remembered, the outcome says so (action drain, acted) and carries Slurm's error."""
    class RecountTimesOut(MiniSlurm):
        def __call__(self, argv, timeout):
            if self.verb(argv) == "show-all" and self.updates():
                raise subprocess.TimeoutExpired(argv, timeout)
            return super().__call__(argv, timeout)

    s = RecountTimesOut({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    out = run(tmp_path, monkeypatch, "passive", s, [XID])
    assert out.decision.act is Act.DRAIN and out.acted and "no answer within" in out.slurm_error
    assert s.nodes["n1"] == ["IDLE+DRAIN", OUR_REASON] and memory(tmp_path)["reason"] == OUR_REASON
    assert out.exit_code == 1 and any("the drain stands" in line for line in out.lines)


# ------------------------------------------------------------------ the ladder and a stray


@pytest.mark.parametrize("state, owner, rebooted", [
    ("IDLE+DRAIN", 1000, True), ("MIXED+DRAIN", 1000, False),
    ("IDLE+DRAIN", 0, False), ("IDLE+DRAIN", "dcgmi", False), ("IDLE+DRAIN", None, False),
])
def test_a_reset_a_stray_blocks_goes_to_the_reboot_rung_unless_a_job_owns_it(tmp_path, monkeypatch, state, owner,
                                                                              rebooted):
    """A GPU to reset, held by a process: on a node where Slurm shows no job a user's process is
    no job's (a stray), a reset cannot happen while it holds the GPU and nothing else ends it, so
    the ladder reboots; with a job on the node it waits, as before. Root's process, an admin
    tool's (`dcgmi diag`, a retest over clush) or one whose owner cannot be read is no stray:
    the ladder waits and says so (issue 30)."""
    scen = SCENARIOS
    stray = tmp_path / "stray.yaml"
    text = (scen / "stray-process.yaml").read_text().replace(
        "extends: healthy-8xh100.yaml", f"extends: {scen / 'healthy-8xh100.yaml'}")
    stray.write_text(text.replace("name: python3", "name: dcgmi") if owner == "dcgmi" else text)
    proc = tmp_path / "proc"
    if isinstance(owner, int):  # the process's real uid, in its status as the kernel writes it
        (proc / "48213").mkdir(parents=True)
        (proc / "48213" / "status").write_text(f"Name:\tpython3\nUid:\t{owner}\t{owner}\t{owner}\t{owner}\n")
    remap = Result("ecc", Status.FAIL, "gpu1 row remap pending (reset needed)", "gpu1", action=Action.RESET_GPU)
    held = "gpuhc: ecc gpu1 row remap pending (reset needed)"
    s = RebootingSlurm({"n1": (state, held)})
    cfg = config(tmp_path, remediation={"enabled": True})
    cfg.data["slurm"]["remediation"]["reset"]["proc_root"] = str(proc)
    name, f = flow(tmp_path, monkeypatch, "passive", s, [remap], cfg=cfg)
    f.opts.sources = SourceSpec(nvml_scenario=str(stray))
    out = entry.healthcheck(f)
    assert out.decision.act is Act.KEEP
    reboots = [c for c in s.calls if c[1] == "reboot"]
    if rebooted:
        assert out.extra["remediation"]["step"] == "reboot", out.extra
        assert reboots == [["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={held} [reboot]", "n1"]]
    else:
        why = out.extra["remediation"]["why"]
        assert out.extra["remediation"]["step"] == "wait" and reboots == [], out.extra
        assert ("jobs on the node" in why) if state.startswith("MIXED") else (
            f"({'dcgmi' if owner == 'dcgmi' else 'python3'}, {'unknown' if owner is None else 'admin'})" in why), why
        if not state.startswith("MIXED"):
            assert any("not a stray" in line for line in out.lines), out.lines
