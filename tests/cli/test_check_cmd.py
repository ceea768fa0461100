"""Replays are not this node, and a sick node is not a baseline: `gpuhc check` and `gpuhc
baseline capture` as an admin runs them, in a subprocess, so exit codes and files are the real
ones (issue 8, items 4, 5, 6, 9 and 12)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from tests.helpers.paths import REPO

ROOT = REPO
SCENARIOS = ROOT / "examples" / "scenarios"
HEALTHY = str(SCENARIOS / "healthy-8xh100.yaml")
XID79 = str(SCENARIOS / "xid79-fallen-off-bus.yaml")
MISSING7 = str(SCENARIOS / "gpu-missing-7.yaml")


def gpuhc(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHC_", "SLURM"))}
    run_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "gpuhc", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=run_env)


def usage_error(p: subprocess.CompletedProcess) -> str:
    """Exit 2, no traceback, and the last stderr line says why."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    return p.stderr.strip().splitlines()[-1]


@pytest.fixture
def live(tmp_path):
    """A node's live outputs and state, configured as an admin would."""
    d = tmp_path / "live"
    d.mkdir()
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(yaml.safe_dump({
        "state_dir": str(d / "state"),
        "output": {"event_log": str(d / "log" / "events.jsonl"), "prometheus_textfile": str(d / "prom" / "gpuhc.prom")},
    }))
    return cfg, d


# ---------------------------------------------------------------------------- replays (item 4)


def test_two_replays_in_a_row_leave_the_live_outputs_and_state_untouched(live):
    """Before: the Xid 79 replay was published as this host and held in the live state, so the
    next (healthy) replay failed too."""
    cfg, d = live
    first = gpuhc("check", "--config", str(cfg), "--json", "--nvml-scenario", XID79)
    second = gpuhc("check", "--config", str(cfg), "--json", "--nvml-scenario", HEALTHY)
    assert (first.returncode, second.returncode) == (1, 0), (first.stderr, second.stderr)
    assert list(d.iterdir()) == []  # no event log, no textfile, no state
    report = json.loads(second.stdout)
    assert (report["node"], report["replay"]) == ("gpu001", "healthy-8xh100.yaml")


def test_replays_are_labelled_with_the_recorded_host_not_this_one(live):
    cfg, _ = live
    p = gpuhc("check", "--config", str(cfg), "--nvml-scenario", XID79)
    assert p.stdout.splitlines()[0].startswith("gpuhc passive gpu001 (replay of xid79-fallen-off-bus.yaml): FAIL")


def test_the_demo_is_a_replay_too(live):
    cfg, d = live
    p = gpuhc("check", "--config", str(cfg), "--demo")
    assert p.returncode == 0 and list(d.iterdir()) == []


def test_publish_writes_a_replay_marked_as_one(live):
    cfg, d = live
    p = gpuhc("check", "--config", str(cfg), "--nvml-scenario", XID79, "--publish")
    assert p.returncode == 1, p.stderr
    (line,) = (d / "log" / "events.jsonl").read_text().splitlines()
    event = json.loads(line)
    assert (event["node"], event["replay"], event["status"]) == ("gpu001", "xid79-fallen-off-bus.yaml", "fail")
    assert 'gpuhc_node_healthy{stage="passive"} 0.0' in (d / "prom" / "gpuhc-passive.prom").read_text()
    assert not (d / "state").exists()  # published, but its memory was still a temporary one


def test_a_replay_given_a_state_dir_uses_it(live, tmp_path):
    cfg, d = live
    p = gpuhc("check", "--config", str(cfg), "--nvml-scenario", HEALTHY, "--state-dir", str(tmp_path / "mine"))
    assert p.returncode == 0 and (tmp_path / "mine" / "state.json").is_file() and list(d.iterdir()) == []


def test_a_live_run_still_publishes(live, tmp_path):
    """Only replays stay quiet. (A live run here reads this machine: no NVML is a FAIL, which is
    still a run worth publishing; the config's `sources` stands in for a fake node.)"""
    cfg, d = live
    doc = yaml.safe_load(cfg.read_text())
    doc["sources"] = {"nvml_scenario": HEALTHY, "kernel_log": str(tmp_path / "empty.log")}
    (tmp_path / "empty.log").write_text("")
    cfg.write_text(yaml.safe_dump(doc))
    p = gpuhc("check", "--config", str(cfg), "--node", "n7", "--json")
    assert json.loads(p.stdout)["replay"] is None
    assert json.loads((d / "log" / "events.jsonl").read_text())["node"] == "n7"
    assert (d / "state" / "state.json").is_file()


# ---------------------------------------------------------------------------- baseline capture (item 5)


@pytest.mark.parametrize("scenario, says", [
    (MISSING7, "gpu-count 0000:db:00.0: fail: gpu at 0000:db:00.0 on the PCI bus but not visible to NVML"),
    (XID79, "xid gpu3: fail: Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus"),
])
def test_baseline_capture_refuses_a_node_that_fails_its_passive_checks(tmp_path, scenario, says):
    out = tmp_path / "baseline.yaml"
    p = gpuhc("baseline", "capture", "--nvml-scenario", scenario, "-o", str(out))
    assert usage_error(p) == ("gpuhc: error: node does not look healthy (1 problem(s) above); a baseline would "
                              "make them look normal. Fix the node, or pass --force")
    assert f"gpuhc: warning: {says}" in p.stderr
    assert not out.exists()


def test_a_forced_baseline_says_it_was_forced_and_why(tmp_path):
    out = tmp_path / "baseline.yaml"
    p = gpuhc("baseline", "capture", "--nvml-scenario", XID79, "-o", str(out), "--force")
    assert p.returncode == 0, p.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["forced"] == {"problems": ["xid gpu3: fail: Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus"]}
    shown = gpuhc("baseline", "show", str(out))
    assert "FORCED: captured with --force despite 1 problem(s):" in shown.stdout.splitlines()


def test_a_healthy_capture_is_not_marked_forced(tmp_path):
    out = tmp_path / "baseline.yaml"
    assert gpuhc("baseline", "capture", "--nvml-scenario", HEALTHY, "-o", str(out)).returncode == 0
    assert "forced" not in yaml.safe_load(out.read_text())


def test_baseline_show_of_a_minimal_file_prints_no_none(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("version: 1\n")
    p = gpuhc("baseline", "show", str(path))
    assert p.returncode == 0 and "None" not in p.stdout
    assert p.stdout.splitlines()[0] == "baseline of unknown captured unknown (driver unknown)"


# ---------------------------------------------------------------------------- prolog GPUs (item 6)


def test_a_job_gpu_that_nvml_does_not_list_fails_the_prolog_stage(tmp_path):
    """SLURM_JOB_GPUS=6,7 where gres.conf declares 8 GPUs, NVML lists 7 and nothing else tells
    (no PCI bus listing, no expected count): before, WARN and exit 0."""
    scenario = tmp_path / "seven.yaml"
    scenario.write_text(f"extends: {HEALTHY}\ncount: 7\npci_gpus: null\n"
                        "gres: {conf: \"Name=gpu File=/dev/nvidia[0-7]\\n\"}\n")
    p = gpuhc("check", "--json", "--stage", "prolog", "--gpus", "6,7", "--nvml-scenario", str(scenario))
    assert p.returncode == 1, p.stderr
    failing = [(r["check"], r["value"]) for r in json.loads(p.stdout)["results"] if r["status"] == "fail"]
    assert failing == [("gpu-count", [7])]


# ---------------------------------------------------------------------------- bounds (item 9)


@pytest.mark.parametrize("args, says", [
    (["check", "--demo", "--gpus", "0-99999999999"], "'0-99999999999': GPU indices go up to 1023"),
    (["snapshot", "--nvml-scenario", HEALTHY, "--timeout", "nan"], "'nan' is not a finite number"),
    (["snapshot", "--nvml-scenario", HEALTHY, "--timeout", "-1"], "'-1' is not between 0.1 and 3600 seconds"),
    (["baseline", "capture", "--nvml-scenario", HEALTHY, "--timeout", "inf"], "'inf' is not a finite number"),
])
def test_values_past_their_bounds_are_usage_errors(args, says):
    """Before: MemoryError (exit 3) for the GPU range; "timed out after nans" for the NaN."""
    assert says in usage_error(gpuhc(*args))


# ---------------------------------------------------------------------------- words (item 12)


def test_exit_3_means_the_same_in_the_readme_and_in_help():
    readme = " ".join((ROOT / "README.md").read_text().split())
    helptext = " ".join(gpuhc("--help").stdout.split())
    for text in (readme, helptext):
        assert "3 gpuhc could not judge" in text and "internal error" not in text


def test_config_checks_with_an_unknown_profile_names_the_option():
    line = usage_error(gpuhc("config", "checks", "--profile", "nosuch"))
    assert "--profile" in line and "unknown GPU profile 'nosuch'" in line


def test_verbose_lines_do_not_repeat_their_subject():
    p = gpuhc("check", "--demo", "-v")
    lines = [x for x in p.stdout.splitlines() if x.startswith("  ")]
    assert any(x.startswith("  PASS  ecc gpu0: ") for x in lines)
    assert not [x for x in lines if re.match(r"\s+\S+\s+\S+ (\S+): \1\b", x)]


def test_the_json_schema_example_has_the_shape_of_a_real_report():
    """docs/json-schema.md once showed an Xid `value` of 79; the real one is an object."""
    doc = (ROOT / "docs" / "json-schema.md").read_text()
    example = json.loads(re.search(r"```json\n(\{.*?\n\})\n```", doc, re.S).group(1))
    real = json.loads(gpuhc("check", "--json", "--nvml-scenario", XID79).stdout)
    assert set(example) == set(real)
    (xid,) = [r for r in real["results"] if r["check"] == "xid"]
    assert set(example["results"][0]) == set(xid)
    assert set(example["results"][0]["value"]) == set(xid["value"])


def test_a_snapshot_of_a_replay_keeps_the_recorded_host():
    p = gpuhc("snapshot", "--nvml-scenario", str(SCENARIOS / "healthy-8xh200.yaml"))
    assert p.returncode == 0 and yaml.safe_load(p.stdout)["hostname"] == "gpu101"


def test_a_fifo_or_a_link_given_as_a_scenario_is_refused_not_read(tmp_path):
    """A FIFO would block the run forever; a link someone planted could lead root anywhere."""
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    assert usage_error(gpuhc("check", "--nvml-scenario", str(fifo))) == (
        f"gpuhc: error: {fifo}: cannot read scenario: not a regular file")
    link = tmp_path / "l.yaml"
    link.symlink_to(HEALTHY)
    assert usage_error(gpuhc("check", "--nvml-scenario", str(link))) == (
        f"gpuhc: error: {link}: cannot read scenario: is a symbolic link; not following it")
