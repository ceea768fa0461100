"""A config typo does not turn checking off (gpuhc/state/config_guard.py), and a gpuhc that cannot run
is loud (slurm/shim.sh): issue 50, point 3. The hooks run as Slurm runs them, in a subprocess, on a
recorded healthy node."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gpuhc.export.prometheus import HELP
from tests.helpers.live_paths import isolated
from tests.helpers.paths import REPO, SCENARIOS


def _config(tmp_path, extra: str = "", mode: str = "enforce") -> str:
    return (f"output:\n  event_log: {tmp_path}/events.jsonl\n  prometheus_textfile: {tmp_path}/prom/gpuhc.prom\n"
            f"sources:\n  nvml_scenario: {SCENARIOS}/healthy-8xh100.yaml\n"
            f"slurm:\n  mode: {mode}\n  syslog: false\n  log_file: {tmp_path}/slurm.log\n{extra}")


def _hook(tmp_path, hook: str, config) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "GPUHC_CONFIG": str(config),
           "GPUHC_STATE_DIR": str(tmp_path / "st"), "SLURMD_NODENAME": "n7"}
    # (in a mount namespace of its own: the built-in defaults a run falls back on name the live paths)
    return subprocess.run(isolated([sys.executable, "-m", "gpuhc", hook]), env=env, capture_output=True, text=True,
                          timeout=60)


def _last_event(tmp_path) -> dict:
    return json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])


def _metric(tmp_path, stage: str) -> list[str]:
    text = (tmp_path / "prom" / f"gpuhc-{stage}.prom").read_text()
    return [line for line in text.splitlines() if line.startswith("gpuhc_config_error")]


@pytest.fixture
def node(tmp_path):
    (tmp_path / "st").mkdir()
    (tmp_path / "prom").mkdir()
    return tmp_path


@pytest.mark.parametrize("hook,stage", [("healthcheck", "passive"), ("prolog", "prolog")])
def test_a_typo_after_a_good_run_keeps_checking_on_the_last_good_config_and_says_so(node, hook, stage):
    cfg = node / "gpuhc.yaml"
    cfg.write_text(_config(node, mode="observe"))
    good = _hook(node, hook, cfg)
    assert good.returncode == 0, good.stderr
    assert (node / "st" / "config.last-good.yaml").read_text() == cfg.read_text()
    assert _metric(node, stage) == [f'gpuhc_config_error{{stage="{stage}"}} 0.0']

    cfg.write_text(_config(node, mode="observe").replace("  syslog: false\n", "  syslog: false\n  resume_aftr: 3\n"))
    bad = _hook(node, hook, cfg)
    # the checks ran (69 results of a healthy node), on the copy, and the run says why
    assert bad.returncode == 0 and "PASS" in bad.stderr and "Traceback" not in bad.stderr
    assert f"gpuhc {hook} n7: error: config does not load ({cfg}:9: slurm.resume_aftr: unknown key" in bad.stderr
    event = _last_event(node)
    assert event["results"] and event["config_error"]["file"] == str(cfg) and event["config_error"]["line"] == 9
    assert event["config_error"]["using"] == f"last good copy {node}/st/config.last-good.yaml"
    assert any("judging on the last good copy" in n for n in event["notes"])
    (line,) = _metric(node, stage)
    assert line.startswith("gpuhc_config_error{") and f'file="{cfg}"' in line and 'line="9"' in line
    assert line.endswith(" 1.0")
    # the copy is the good file, not overwritten by the broken one
    assert "resume_aftr" not in (node / "st" / "config.last-good.yaml").read_text()


def test_with_no_last_good_config_the_checks_run_on_the_defaults_in_observe_mode(node):
    cfg = node / "gpuhc.yaml"
    cfg.write_text("slurm:\n  mode: enforce\n  resume_after: many\n")
    out = _hook(node, "healthcheck", cfg)
    # no GPUs on this machine without the recording: the defaults judge the real node, and
    # whatever they find, observe mode sends nothing to Slurm
    assert out.returncode in (0, 1, 3) and "Traceback" not in out.stderr
    assert "judging on the built-in defaults (observe mode)" in out.stderr
    assert not (node / "st" / "config.last-good.yaml").exists()


def test_a_dangling_test_scenario_link_is_loud_and_the_run_goes_on(node):
    link = node / "scenario.yaml"
    link.symlink_to(SCENARIOS / "healthy-8xh100.yaml")
    cfg = node / "gpuhc.yaml"
    (node / "empty.log").write_text("")
    cfg.write_text(_config(node).replace(f"  nvml_scenario: {SCENARIOS}/healthy-8xh100.yaml\n",
                                         f"  test_scenario: {link}\n  kernel_log: {node}/empty.log\n"))
    assert _hook(node, "healthcheck", cfg).returncode == 0
    link.unlink()
    link.symlink_to(node / "gone.yaml")
    out = _hook(node, "prolog", cfg)
    assert out.returncode == 0 and "sources.test_scenario" in out.stderr and "no such file" in out.stderr
    # the last good copy names the same link: the defaults then, in observe mode
    assert "judging on the built-in defaults (observe mode)" in out.stderr


# ------------------------------------------------------------------ the shims


def _shim(tmp_path, hook: str, gpuhc_bin: str) -> subprocess.CompletedProcess:
    env = {"GPUHC_BIN": gpuhc_bin, "GPUHC_TEXTFILE_DIR": str(tmp_path / "tf")}
    return subprocess.run(["/bin/sh", str(REPO / "slurm" / f"{hook}.sh")], env=env, capture_output=True, text=True,
                          timeout=30)


@pytest.fixture
def textfiles(tmp_path):
    (tmp_path / "tf").mkdir(mode=0o755)
    if os.geteuid() != 0:
        pytest.fail("the shim writes its metric only into a directory root owns: run as root (tests/run.sh does)")
    return tmp_path / "tf"


@pytest.mark.parametrize("hook,code", [("healthcheck", 3), ("prolog", 0), ("epilog", 0)])
def test_a_missing_gpuhc_is_a_syslog_line_and_a_metric_and_never_a_slurm_drain(tmp_path, textfiles, hook, code):
    out = _shim(tmp_path, hook, str(tmp_path / "no-such-gpuhc"))
    assert out.returncode == code and "not found: no checks" in out.stderr
    text = (textfiles / f"gpuhc-shim-{hook}.prom").read_text()
    assert f'gpuhc_shim_error{{hook="{hook}",error="missing"}} 1' in text
    assert f"# HELP gpuhc_shim_error {HELP['gpuhc_shim_error']}\n" in text  # the one help text, said twice


def test_a_gpuhc_that_dies_is_reported_and_a_later_good_run_clears_it(tmp_path, textfiles):
    dies = tmp_path / "dies"
    dies.write_text("#!/bin/sh\nkill -SEGV $$\n")
    dies.chmod(0o755)
    out = _shim(tmp_path, "prolog", str(dies))
    assert out.returncode == 0 and "died with exit status 139" in out.stderr
    assert 'error="exit 139"' in (textfiles / "gpuhc-shim-prolog.prom").read_text()
    fine = tmp_path / "fine"
    fine.write_text("#!/bin/sh\nexit 1\n")  # gpuhc's own word (unhealthy): passed through
    fine.chmod(0o755)
    assert _shim(tmp_path, "prolog", str(fine)).returncode == 1
    assert not (textfiles / "gpuhc-shim-prolog.prom").exists()


# ------------------------------------------------------------------ where an admin looks


def test_doctor_and_fleet_name_the_node_that_runs_on_a_stand_in(node):
    cfg = node / "gpuhc.yaml"
    cfg.write_text(_config(node, mode="observe"))
    assert _hook(node, "healthcheck", cfg).returncode == 0
    cfg.write_text(_config(node, mode="observe") + "sweeep: {}\n")
    assert _hook(node, "healthcheck", cfg).returncode == 0
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "GPUHC_STATE_DIR": str(node / "st")}
    doc = subprocess.run([sys.executable, "-m", "gpuhc", "doctor", "--config", str(cfg), "--no-sinfo", "--node", "n7",
                          "--json"], env=env, capture_output=True, text=True, timeout=60)
    row = json.loads(doc.stdout)["findings"][0]
    assert doc.returncode == 1 and row["setting"] == "config" and row["status"] == "blocker"
    assert f"{cfg}:10: sweeep: unknown key" in row["found"] and "last good copy" in row["found"]
    fleet = subprocess.run([sys.executable, "-m", "gpuhc", "fleet", "config-errors", "--config", str(node / "st" /
                            "config.last-good.yaml"), "--json"], env=env, capture_output=True, text=True, timeout=60)
    (one,) = json.loads(fleet.stdout)["nodes"]
    assert fleet.returncode == 1 and one["node"] == "n7" and "sweeep" in one["error"]
    cfg.write_text(_config(node, mode="observe"))  # fixed: the node drops out at its next run
    assert _hook(node, "healthcheck", cfg).returncode == 0
    fleet = subprocess.run([sys.executable, "-m", "gpuhc", "fleet", "config-errors", "--config", str(cfg), "--json"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert fleet.returncode == 0 and json.loads(fleet.stdout)["nodes"] == []


def test_a_last_good_copy_others_can_write_is_refused_and_the_defaults_serve(node):
    """The copy is root's (0600 in the state directory); one that others could have written is
    not trusted: the run says so and judges on the defaults, in observe mode."""
    if os.geteuid() != 0:
        pytest.fail("the file-safety rule is root's: run as root (tests/run.sh does)")
    cfg = node / "gpuhc.yaml"
    cfg.write_text(_config(node, mode="enforce"))
    assert _hook(node, "healthcheck", cfg).returncode == 0
    copy = node / "st" / "config.last-good.yaml"
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    copy.chmod(0o666)
    cfg.write_text(_config(node) + "typo: 1\n")
    out = _hook(node, "healthcheck", cfg)
    assert "judging on the built-in defaults (observe mode)" in out.stderr and "Traceback" not in out.stderr
