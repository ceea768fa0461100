"""The retire bundle (gpuhc/postmortem/retire.py): the evidence a vendor asks for when a node is
retired. The node is a replayed scenario; nvidia-bug-report.sh, at the hardware boundary, is an
executable the test writes (one that works, one that hangs, none at all)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml
from tests.helpers.owners import owners  # noqa: F401  (the fixture: run as "root", whatever the suite runs as)

from gpuhc.export.eventlog import encode_line
from gpuhc.model.deadline import Deadline
from gpuhc.postmortem.retire import fault_history, rma_assessment, write_retire_bundle
from gpuhc.run.runner import read_snapshot
from gpuhc.sources import SourceSpec
from tests.helpers.paths import REPO

SCEN = REPO / "examples" / "scenarios"
NOW = 1_741_082_400.0


def snapshot(tmp_path, name="row-remap-pending.yaml", extra: str = ""):
    path = SCEN / name
    if extra:
        path = tmp_path / "scenario.yaml"
        path.write_text(f"extends: {SCEN / name}\n{extra}")
    spec = SourceSpec(nvml_scenario=str(path))
    return read_snapshot(spec, "gpu001"), spec


def settings(tmp_path, script: str | None = None, timeout: float = 20.0) -> dict:
    return {"enabled": True, "dir": str(tmp_path / "retired"), "keep": 2, "kernel_lines": 100,
            "bug_report": script or str(tmp_path / "no-nvidia-bug-report.sh"), "bug_report_timeout_s": timeout}


def bug_report_script(tmp_path, body: str) -> str:
    p = tmp_path / "nvidia-bug-report.sh"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def event_log(tmp_path) -> str:
    path = tmp_path / "events.jsonl"
    runs = [{"node": "gpu001", "started": NOW - 300, "slurm": {"action": "drain", "acted": True,
                                                              "reason": "gpuhc: ecc gpu1 row remap pending"}},
            {"node": "gpu001", "started": NOW - 200, "slurm": {"action": "none"}},  # a healthy run: not history
            {"node": "gpu002", "started": NOW - 100, "slurm": {"action": "drain", "acted": True, "reason": "x"}},
            {"node": "gpu001", "started": NOW - 60, "slurm": {"action": "keep", "remediation": {"step": "reboot"}}}]
    path.write_bytes(b"".join(encode_line(r) for r in runs) + b"not json at all\n")
    return str(path)


def test_rma_criteria_and_evidence_per_gpu(tmp_path):
    snap, _ = snapshot(tmp_path, extra="gpus:\n  3: {remap_failure: true, remap_uncorrectable: 7}\n")
    by_gpu = {g["gpu"]: g for g in rma_assessment(snap)}
    assert by_gpu[3]["rma_criteria_met"] == ["row-remapping failure (NVIDIA GPU Memory Error Management, RMA policy)"]
    assert "rows remapped for uncorrectable errors: 7" in by_gpu[3]["evidence"]
    assert by_gpu[1]["rma_criteria_met"] == [] and "row remapping pending (a reset applies it)" in by_gpu[1]["evidence"]
    assert by_gpu[0] == {**by_gpu[0], "rma_criteria_met": [], "evidence": []}
    assert by_gpu[3]["serial"] and by_gpu[3]["uuid"].startswith("GPU-")
    snap, _ = snapshot(tmp_path, extra="gpus:\n  2: {retired_pages_sbe: 40, retired_pages_dbe: 24}\n")
    assert rma_assessment(snap)[2]["rma_criteria_met"] == ["page retirement table full (64 of 64 pages retired)"]


def test_the_bundle_holds_snapshot_history_bug_report_and_criteria(tmp_path):
    snap, spec = snapshot(tmp_path)
    script = bug_report_script(tmp_path, 'echo report > "$2"; gzip "$2"\n')
    path = write_retire_bundle(settings(tmp_path, script), "dir", "gpu001", "3 quarantine cycles: retiring",
                               "gpuhc: RETIRED ecc gpu1", snap, spec, event_log(tmp_path), NOW, Deadline.after(60))
    assert os.path.basename(path) == "gpu001-retired-20250304T100000Z"
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"
    files = sorted(os.listdir(path))
    assert files == ["README.txt", "fault-history.jsonl", "kernel-events.log", "kernel.log",
                     "nvidia-bug-report.log.gz", "retire.json", "snapshot.yaml"]
    meta = json.loads(Path(path, "retire.json").read_text())
    assert meta["missing"] == [] and meta["reason"] == "gpuhc: RETIRED ecc gpu1"
    assert meta["bug_report"].startswith(f"{script} exit 0 after")
    history = [json.loads(x) for x in Path(path, "fault-history.jsonl").read_text().splitlines()]
    assert [(h["node"], h["slurm"]["action"]) for h in history] == [("gpu001", "drain"), ("gpu001", "keep")]
    # replayable: the snapshot reads back as the node it was
    again = read_snapshot(SourceSpec(nvml_scenario=str(Path(path, "snapshot.yaml"))), "x")
    assert [g.uuid for g in again.nvml.gpus] == [g.uuid for g in snap.nvml.gpus]
    assert yaml.safe_load(Path(path, "snapshot.yaml").read_text())["hostname"] == "gpu001"


def test_a_hanging_bug_report_is_killed_at_its_bound_and_a_missing_one_is_said(tmp_path):
    snap, spec = snapshot(tmp_path)
    script = bug_report_script(tmp_path, "sleep 60\n")
    t = time.monotonic()
    path = write_retire_bundle(settings(tmp_path, script, timeout=2.0), "tar.gz", "gpu001", "why", None, snap, spec,
                               None, NOW, Deadline.after(60))
    assert time.monotonic() - t < 20 and path.endswith(".tar.gz")
    import tarfile

    with tarfile.open(path) as tar:
        meta = json.load(tar.extractfile("gpu001-retired-20250304T100000Z/retire.json"))
    assert "killed at its time bound (2s)" in meta["bug_report"]
    assert meta["fault_history"] == "no event log configured (output.event_log)"
    path = write_retire_bundle(settings(tmp_path / "b"), "dir", "gpu001", "why", None, snap, spec, None, NOW + 1,
                               Deadline.after(60))
    meta = json.loads(Path(path, "retire.json").read_text())
    assert meta["missing"] == [f"nvidia-bug-report.log.gz ({tmp_path / 'b' / 'no-nvidia-bug-report.sh'} not installed)"]


def test_the_fault_history_reads_the_event_log_as_untrusted_input(tmp_path):
    real = event_log(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    lines, note = fault_history(str(link), "gpu001")
    assert lines == [] and "symbolic link" in note
    lines, note = fault_history(real, "gpu001")
    assert len(lines) == 2 and note == f"2 runs from {real}"


def test_an_admins_retire_on_the_node_reads_it_and_writes_the_bundle(tmp_path, owners):
    """slurm/repair/admin.py's retire_evidence, as `gpuhc quarantine retire` on the node and the ladder
    call it: no snapshot at hand, so the node is read (here: its scenario) and the bundle written;
    a bundle that cannot be written is logged and never raised."""
    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.run.report import RunOptions
    from gpuhc.slurm.flows import entry
    from gpuhc.slurm.repair.admin import retire_evidence

    data = defaults(schema())
    data["slurm"].update({"syslog": False, "log_file": str(tmp_path / "decisions.log")})
    data["slurm"]["retire_bundle"].update({"dir": str(tmp_path / "retired"), "bug_report": "no-such-bug-report"})
    data["output"]["event_log"] = event_log(tmp_path)
    opts = RunOptions(stage="bootstrap", config=Config(data), state_dir=str(tmp_path / "state"), hostname="gpu001",
                      sources=SourceSpec(nvml_scenario=str(SCEN / "row-remap-pending.yaml")))
    flow = entry.Flow(stage="bootstrap", opts=opts, log=entry.Log("gpuhc quarantine retire gpu001",
                                                                  str(tmp_path / "decisions.log"), False, False))
    path = retire_evidence(flow, None, "retired by an admin", "gpuhc: RETIRED admin note")
    meta = json.loads(Path(path, "retire.json").read_text())
    assert meta["why"] == "retired by an admin" and len(meta["gpus"]) == 8
    assert Path(path, "fault-history.jsonl").read_text().count("\n") == 2
    assert f"retire bundle: {path}" in (tmp_path / "decisions.log").read_text()
    # a directory others may write into is refused as root; the retirement stands, the log says why
    data["slurm"]["retire_bundle"]["dir"] = str(tmp_path / "open")
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    assert retire_evidence(flow, None, "again", None) is None
    assert "retire bundle not written" in (tmp_path / "decisions.log").read_text()
