"""`gpuhc doctor` without a live Slurm: slurm.conf missing, the per-node expected counts, the
admin host's checks where slurmdbd does not answer. The live cluster: tests/slurm_real/test_doctor.py."""

from __future__ import annotations

import json
import os

from gpuhc.cli.doctor_cmd import expected_rows
from gpuhc.config.load import load_config
from gpuhc.slurm.read.slurmconf import parse_text
from tests.helpers.cli import gpuhc
from tests.helpers.paths import REPO


def doctor(tmp_path, *args: str, config: str = "{}\n"):
    (tmp_path / "gpuhc.yaml").write_text(config)
    return gpuhc("doctor", "--config", str(tmp_path / "gpuhc.yaml"), "--no-sinfo", "--json", *args)


def test_no_slurm_conf_is_a_blocker_with_its_fix(tmp_path):
    cp = doctor(tmp_path, "--slurm-conf", str(tmp_path / "nope.conf"), "--no-admin-host")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    out = json.loads(cp.stdout)
    (f,) = [f for f in out["findings"] if f["setting"] == "slurm.conf"]
    assert f["status"] == "blocker" and "cannot read" in f["found"] and "--slurm-conf" in f["fix"]


def test_a_bad_config_is_a_blocker_row_saying_what_the_hooks_run_on(tmp_path):
    cp = doctor(tmp_path, "--slurm-conf", str(REPO / "slurm" / "slurm.conf.example"), config="slurm:\n  mode: loud\n")
    assert cp.returncode == 1 and "Traceback" not in cp.stderr, cp.stderr
    assert "slurm.mode" in cp.stdout and "built-in defaults (observe mode)" in cp.stdout


def test_each_node_gets_its_entry_and_count_slurm_first(tmp_path):
    (tmp_path / "gpuhc.yaml").write_text('hosts:\n  - match: "gpu[01-02]"\n    node:\n      expected_gpus: 4\n'
                                         '  - match: "old*"\n    node:\n      expected_gpus: 2\n')
    cfg = load_config(str(tmp_path / "gpuhc.yaml"), "gpu01")
    conf = parse_text("NodeName=gpu[01-04] Gres=gpu:h100:8\nNodeName=n2,login1 CPUs=8\n")
    rows = {r["node"]: r for r in expected_rows(["gpu01", "gpu03", "n2", "old7"], conf, cfg.overrides, None)}
    assert (rows["gpu01"]["expected"], rows["gpu01"]["status"], rows["gpu01"]["hosts_entries"]) == (
        8, "warn", ["hosts[0] gpu[01-02]"])  # the config says 4: Slurm's 8 is used, and doctor says so
    assert (rows["gpu03"]["expected"], rows["gpu03"]["from"], rows["gpu03"]["status"]) == (8, "slurm.conf", "ok")
    assert (rows["n2"]["expected"], rows["n2"]["from"]) == (0, "slurm.conf")
    assert (rows["old7"]["expected"], rows["old7"]["from"]) == (2, "config")  # not in slurm.conf


def test_the_admin_host_without_slurmdbd_and_without_results_dir(tmp_path):
    cp = doctor(tmp_path, "--slurm-conf", str(REPO / "slurm" / "slurm.conf.example"), "--admin-host",
                config="slurm:\n  sacctmgr: /nonexistent/sacctmgr\n")
    out = json.loads(cp.stdout)
    got = {f["setting"]: f["status"] for f in out["findings"]}
    assert got["sweep account gpuhc"] == "warn" and got["sweep.results_dir"] == "blocker", out["findings"]
    assert cp.returncode == 1


def test_observe_mode_shows_what_it_would_have_done_and_every_act_in_force(tmp_path):
    """A fresh install's observe mode: doctor says which acts are on and what observe mode would
    have done in the last 7 days (issue 50, points 1 and 2)."""
    import time

    log = tmp_path / "events.jsonl"
    now = time.time()
    lines = [{"node": n, "started": now - 3600, "stage": "passive",
              "slurm": {"action": "none", "observed": "drain", "reason": f"gpuhc: {cause} on gpu3"}}
             for n, cause in (("gpu001", "xid79"), ("gpu002", "ecc uncorrectable"))]
    lines.append({"node": "gpu009", "started": now - 30 * 86400, "stage": "passive",
                  "slurm": {"action": "none", "observed": "drain", "reason": "gpuhc: old thing"}})  # too old
    log.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))  # as gpuhc writes
    cp = doctor(tmp_path, "--slurm-conf", str(REPO / "slurm" / "slurm.conf.example"),
                config=f"slurm:\n  mode: observe\noutput:\n  event_log: {log}\n")
    rows = {f["setting"]: f for f in json.loads(cp.stdout)["findings"]}
    assert rows["observed"]["found"] == ("in the last 7 days it would have drain 2 node(s) (gpu001, gpu002); "
                                         "causes: ecc, xid")
    assert rows["acts"]["found"].startswith("on: active checks after every job") or "off: drain, resume" in \
        rows["acts"]["found"], rows["acts"]
    assert rows["slurm.mode"]["found"].startswith("observe")


def test_in_a_pipe_each_finding_is_one_plain_row_never_folded(tmp_path):
    """Not a wide terminal (a pipe here): one line a finding, its fix on the next, whole paths."""
    (tmp_path / "gpuhc.yaml").write_text("{}\n")
    cp = gpuhc("doctor", "--config", str(tmp_path / "gpuhc.yaml"), "--no-sinfo", "--slurm-conf",
               str(REPO / "slurm" / "slurm.conf.example"))
    lines = cp.stdout.splitlines()
    assert lines[0].startswith("gpuhc doctor on ") and lines[-1].startswith("worst: ")
    hc = [line for line in lines if line.startswith("blocker  HealthCheckProgram: ")]
    assert hc == ["blocker  HealthCheckProgram: /usr/local/share/gpuhc/slurm/healthcheck.sh: no such executable on "
                  "this node"] or os.path.exists("/usr/local/share/gpuhc/slurm/healthcheck.sh"), lines
    assert not any(set(line) & set("│┃─━╭╰") for line in lines), "a table was drawn"


def test_site_test_mode_node_is_held_to_the_configs_count_without_a_warning(tmp_path):
    """README's site test mode: a CPU node (no Gres) plays a recorded 8-GPU node; a run holds it
    to the hosts: entry's count, so doctor does too, and asks nobody to drop it."""
    scenario = tmp_path / "test-scenario.yaml"
    scenario.write_text("{}\n")
    (tmp_path / "gpuhc.yaml").write_text(f'hosts:\n  - match: "cpu017"\n    node:\n      expected_gpus: 8\n'
                                         f"    sources:\n      test_scenario: {scenario}\n")
    cfg = load_config(str(tmp_path / "gpuhc.yaml"), "cpu017")
    conf = parse_text("NodeName=cpu017 CPUs=8\nNodeName=gpu01 Gres=gpu:h100:8\n")
    rows = {r["node"]: r for r in expected_rows(["cpu017", "gpu01"], conf, cfg.overrides, None)}
    assert (rows["cpu017"]["expected"], rows["cpu017"]["status"]) == (8, "ok")
    assert rows["cpu017"]["from"].startswith("config (a recorded node")
    assert (rows["gpu01"]["expected"], rows["gpu01"]["from"]) == (8, "slurm.conf")
