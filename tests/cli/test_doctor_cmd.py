"""`gpuhc doctor` without a live Slurm: slurm.conf missing, the per-node expected counts, the
admin host's checks where slurmdbd does not answer. The live cluster: tests/slurm_real/test_doctor.py."""

from __future__ import annotations

import json

from gpuhc.cli.doctor_cmd import expected_rows
from gpuhc.config import load_config
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
