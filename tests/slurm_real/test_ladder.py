"""The remediation ladder on a real Slurm (slurmctld + slurmd on localhost): reset and resume,
reset then reboot then retest, and cycles until retired.

The health check is run by hand as the node would run it (the shim's environment), so every
step is one run. The GPU reset command is the one fake (the hardware boundary): a script that
records its argv and, where the test says the reset works, puts the healthy scenario in place
of the node's. The reboot is Slurm's own: `scontrol reboot` runs the cluster's RebootProgram.
The harness's "machines" (SlurmCluster(reboot=True), tests/helpers/slurm_cluster_files.py: the
RebootProgram makes the node's machine stop slurmd and boot it again in a fresh time namespace,
then run gpuhc-retest.service's commands) do the rest; the test waits for the boot-time
retest's verdict.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuhc.slurm.policy.reason import parse_reason
from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import HEALTHY, back_in_service, base_config, decisions, gpuhc, reboot_and_retest, registered
from tests.helpers.reset_fakes import fake_proc

pytestmark = pytest.mark.slurm

REMAP = REPO / "examples" / "scenarios" / "row-remap-pending.yaml"  # ecc: action "reset GPU", gpu1
IDLE = "occupancy:\n  gpus:\n    - {index: 1, memory_used_mib: 0, memory_total_mib: 81559}\n"


def node_scenario(tmp_path: Path, name: str, source: Path) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"extends: {source}\n{IDLE}")
    return p


def reset_script(tmp_path: Path, scenario: Path, fixes: bool | str) -> tuple[Path, Path]:
    """The reset command: records its argv; ``fixes`` True puts the healed scenario in place,
    "other-gpu" one where gpu1 came back as another GPU (a new UUID)."""
    record = tmp_path / "reset-calls.log"
    script = tmp_path / "fake-nvidia-smi-reset"
    healed = "other-gpu.yaml" if fixes == "other-gpu" else "healed.yaml"
    fix = f"cp {tmp_path / healed} {scenario}\n" if fixes else ""
    node_scenario(tmp_path, "healed", HEALTHY)
    (tmp_path / "other-gpu.yaml").write_text(
        f"extends: {HEALTHY}\n{IDLE}gpus:\n  1: {{uuid: GPU-99999999-0000-0000-0000-000000000001}}\n")
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {record}\n{fix}")
    script.chmod(0o755)
    return script, record


def hook_script(tmp_path: Path) -> tuple[Path, Path]:
    """A hook that records each event it is given (its name and the JSON on stdin)."""
    record = tmp_path / "hook-calls.jsonl"
    script = tmp_path / "record-hook"
    script.write_text(f"#!/bin/sh\n{{ printf '%s ' \"$GPUHC_EVENT\"; cat; echo; }} >> {record}\n")
    script.chmod(0o755)
    return script, record


def hook_events(tmp_path: Path) -> list[dict]:
    p = tmp_path / "hook-calls.jsonl"
    lines = p.read_text().splitlines() if p.exists() else []
    return [json.loads(line.split(" ", 1)[1]) for line in lines if line.strip()]


def config(wd: Path, script: Path, **remediation) -> dict:
    cfg = base_config(wd)
    cfg["hooks"] = {"commands": [[str(hook_script(wd.parent)[0])]], "events": ["remediation", "retire", "resume"]}
    cfg["slurm"]["quarantine"] = {"max_cycles": 2}
    # The reset procedure's other tools: no service to stop here, persistence toggled by `true`.
    reset = {"services": [], "nvidia_smi": shutil.which("true"), "proc_root": str(fake_proc(wd.parent / "proc", REMAP)),
             "dev_root": str(wd.parent), "fabric_timeout_s": 5}
    cfg["slurm"]["remediation"] = {"enabled": True, "reset_command": [str(script), "-r", "-i", "{gpu}"],
                                   "reset_timeout_s": 10, "reset": reset, **remediation}
    cfg["slurm"]["retire_bundle"] = {"dir": str(wd / "retired"), "bug_report_timeout_s": 5}
    return cfg


def start(slurm_cluster, tmp_path, fixes: bool | str, **remediation):
    """A cluster whose n1 has a pending row remap and a reset command that heals it or not:
    (cluster, n1's scenario file, the reset command's record of calls)."""
    scenario = node_scenario(tmp_path, "n1", REMAP)
    script, record = reset_script(tmp_path, scenario, fixes=fixes)
    kw = dict(workdir=tmp_path / "c", nodes=("n1", "n2"), gpuhc_config=config(tmp_path / "c", script, **remediation),
              node_scenarios={"n1": str(scenario)})
    c = slurm_cluster(reboot=True, **kw)
    # The machines' first boot runs the boot-time retest too; on a loaded host it can answer
    # after the test's first drain and count a quarantine cycle of its own: let it finish first.
    calls = c.workdir / "log" / "calls.log"
    c.wait_for(lambda: calls.exists() and {"n1", "n2"} <= {x.split()[2] for x in calls.read_text().splitlines()
                                                           if x.split()[1:2] == ["boot-done"]},
               180, "the first boot-time retests")
    return c, scenario, record


def hc(c, node="n1"):
    return gpuhc(c, "healthcheck", node=node)


def events_logged(c) -> list[str]:
    """The health check's hook events, as the seam logged them."""
    return [x for x in decisions(c.workdir, "n1") if x.startswith("event ")]


def events(wd: Path) -> list[dict]:
    p = wd / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def test_reset_passes_and_resumes(slurm_cluster, tmp_path):
    c, scenario, record = start(slurm_cluster, tmp_path, fixes=True)
    try:
        assert hc(c).returncode == 1 and c.node("n1").reason.startswith("gpuhc: ecc")
        assert not record.exists()  # the drain's own run does not climb
        hc(c)
        assert record.read_text().split()[1:] == ["-r", "-i", "1"]
        n1 = c.node("n1")
        assert back_in_service(n1, c.release), n1
        lines = decisions(tmp_path / "c", "n1")
        assert any(x.startswith("remediation: reset 1/2: GPU reset 1 of 2") for x in lines), lines
        assert "resumed: reset 1/2 passed its retest" in lines
        rec = [e["slurm"]["remediation"] for e in events(tmp_path / "c") if e["slurm"].get("remediation")]
        assert rec[-1]["step"] == "reset 1/2" and rec[-1]["resumed"] and rec[-1]["gpus"] == [1]
        assert events_logged(c) == ["event remediation: GPU reset 1 of 2 (gpu1)",
                                    "event resume: reset 1/2 passed its retest"]
        assert [(h["event"], h["step"], h["node"]) for h in hook_events(tmp_path)] == [
            ("remediation", "reset 1/2", "n1"), ("resume", "reset 1/2", "n1")]
        # An admin's drain is never touched, whatever fails.
        c.scontrol("update", "NodeName=n1", "State=DRAIN", "Reason=admin: PSU swap")
        shutil.copyfile(node_scenario(tmp_path, "again", REMAP), scenario)
        hc(c)
        assert len(record.read_text().splitlines()) == 1 and c.node("n1").reason == "admin: PSU swap"
    finally:
        c.stop()


def test_reset_fails_then_reboot_retest_resume(slurm_cluster, tmp_path):
    c, scenario, record = start(slurm_cluster, tmp_path, fixes=False, reset_attempts=1)
    try:
        hc(c)
        hc(c)
        assert c.node("n1").reason.endswith("[reset 1/1]"), c.node("n1").reason
        rep = json.loads(gpuhc(c, "drain-report", "--json", check=True).stdout)
        assert {r["node"]: r.get("step") for r in rep["nodes"]}["n1"] == "remediating: reset 1/1"
        hc(c)  # the resets are spent: reboot
        assert len(record.read_text().splitlines()) == 1
        assert c.node("n1").reason.endswith("[reboot]") or "[reboot] :" in c.node("n1").reason
        # The reboot heals it (a pending row remap takes effect); the boot-time retest resumes.
        lines = reboot_and_retest(c, tmp_path / "healed.yaml", scenario, lambda n: not (n.drained or n.down))
        # The retest resumes it, or finds Slurm already returned it (26.05 with ReturnToService=2
        # once cleared the reason: the node's memory of its reboot holds it; docs/slurm.md).
        assert any(x.startswith("retest passed (was drained)") for x in lines), lines
        # its event line and its hook come after Slurm shows the resume: wait for the hook's record
        hooks = tmp_path / "hook-calls.jsonl"
        c.wait_for(lambda: hooks.exists() and hooks.read_text().count("\n") >= 3, 120, "the retest's resume hook",
                   pending=lambda: f"hook events so far: {[h['event'] for h in hook_events(tmp_path)]}")
        lines = decisions(c.workdir, "n1", "quarantine retest")
        assert events_logged(c) == ["event remediation: GPU reset 1 of 1 (gpu1)",
                                    "event remediation: reboot for retest (cycle 1 of 2)"]
        said = [x for x in lines if x.startswith("event ")]
        assert len(said) == 1 and said[0].startswith("event resume: retest passed (was drained)"), said
        assert [(h["event"], h.get("step")) for h in hook_events(tmp_path)] == [
            ("remediation", "reset 1/1"), ("remediation", "reboot"), ("resume", None)]
    finally:
        c.stop()


def test_cycles_then_retired_and_the_hook_fires(slurm_cluster, tmp_path):
    c, scenario, record = start(slurm_cluster, tmp_path, fixes=False, reset_attempts=0)
    try:
        hc(c)
        # Slurm may append " : reboot complete" after the retest's reason: read it as gpuhc does.
        after = {1: lambda n: (r := parse_reason(n.reason)) is not None and (r.cycle, r.step) == (1, None),
                 2: lambda n: (r := parse_reason(n.reason)) is not None and r.retired}
        for cycle in (1, 2):
            hc(c)  # the ladder: reboot
            assert "[reboot]" in c.node("n1").reason
            lines = reboot_and_retest(c, None, scenario, after[cycle])
            assert any(f"failed retest {cycle} of 2" in x for x in lines), lines
        # Slurm may still append its own " : reboot complete" note after the retest's drain.
        assert c.node("n1").reason.startswith("gpuhc: RETIRED ecc gpu1 row remap pending (reset needed)")
        # The retest goes on after Slurm shows the node retired (its log line, its hook, then the
        # retire bundle): wait for its last act before reading what it left.
        retired = tmp_path / "c" / "retired"

        def published() -> bool:  # renamed from its staging directory, a dot name (pathlib's * matches it too)
            return retired.exists() and any(not p.parent.name.startswith(".") for p in retired.glob("*/retire.json"))

        c.wait_for(published, 120, "the retire bundle published",
                   pending=lambda: f"{retired} holds {sorted(p.name for p in retired.rglob('*'))}")
        assert not record.exists()
        # The retire event: through the seam (its log line) and, where hooks exist, to the hook once.
        assert [x for x in decisions(tmp_path / "c", "n1", "quarantine retest") if x.startswith("event ")] == [
            "event retire: failed retest 2 of 2: retiring"]
        got = [(h["event"], h.get("step")) for h in hook_events(tmp_path)]
        assert got == [("remediation", "reboot"), ("remediation", "reboot"), ("retire", None)], got
        (bundle,) = list(retired.iterdir())
        meta = json.loads((bundle / "retire.json").read_text())
        assert meta["node"] == "n1" and meta["reason"].startswith("gpuhc: RETIRED ecc gpu1")
        assert "row remapping pending (a reset applies it)" in meta["gpus"][1]["evidence"]
        history = [json.loads(x) for x in (bundle / "fault-history.jsonl").read_text().splitlines()]
        assert [h["slurm"]["action"] for h in history][:1] == ["drain"] and len(history) >= 3, history
        assert (bundle / "snapshot.yaml").exists()
    finally:
        c.stop()


def test_a_gpu_that_comes_back_as_another_falls_to_the_reboot_rung_at_once(slurm_cluster, tmp_path):
    c, scenario, record = start(slurm_cluster, tmp_path, fixes="other-gpu", reset_attempts=2)
    try:
        hc(c)
        hc(c)  # the reset "works" but NVML lists another GPU at index 1: reboot, in this same run
        assert record.read_text().split()[1:] == ["-r", "-i", "1"]
        n1 = c.node("n1")
        assert "[reboot]" in n1.reason or {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & n1.flags, n1
        lines = decisions(tmp_path / "c", "n1")
        assert any("verify uuids: FAILED: GPUs differ from before the reset" in x for x in lines), lines
        assert any(x.startswith("remediation: reboot: reboot for retest") for x in lines), lines
        rec = [e["slurm"]["remediation"] for e in events(tmp_path / "c") if e["slurm"].get("remediation")]
        assert rec[-1]["step"] == "reset 1/2" and rec[-1]["fallthrough"] == "reboot", rec[-1]
    finally:
        c.stop()
