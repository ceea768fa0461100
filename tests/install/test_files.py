"""The files an admin installs next to gpuhc (examples/): tmpfiles.d, the systemd units, the cron
line, shell completion and install.sh's CUDA detection. Each one run by the tool that reads it
where this machine has the tool (systemd-tmpfiles), else held against the others."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.paths import REPO

EX = REPO / "examples"


def unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # systemd keys are case-sensitive
    cp.read_string((EX / "systemd" / name).read_text())
    return cp


def gpuhc_bin() -> list[str]:
    script = Path(sys.executable).parent / "gpuhc"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gpuhc"]


def test_tmpfiles_makes_gpuhcs_directories_with_safe_modes(tmp_path):
    cp = subprocess.run(["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(EX / "tmpfiles.d" / "gpuhc.conf")],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    modes = {p: stat.S_IMODE((tmp_path / p).stat().st_mode) for p in
             ("var/lib/gpuhc", "var/log/gpuhc", "var/lib/gpuhc/postmortem")}
    assert modes == {"var/lib/gpuhc": 0o755, "var/log/gpuhc": 0o755, "var/lib/gpuhc/postmortem": 0o700}
    # the paths are the ones the shipped config writes to
    config = (REPO / "etc" / "gpuhc.yaml").read_text()
    assert "state_dir: /var/lib/gpuhc" in config and "/var/log/gpuhc/" in config
    assert "postmortem_dir: /var/lib/gpuhc/postmortem" in config


def test_sweep_timer_runs_what_cron_runs_with_a_runtime_directory():
    svc, timer = unit("gpuhc-sweep.service"), unit("gpuhc-sweep.timer")
    assert svc["Service"]["RuntimeDirectory"] == "gpuhc" and svc["Service"]["User"] == "gpuhc"
    assert svc["Service"]["SuccessExitStatus"] == "4"  # breaker held a drain: not a unit failure
    exec_argv = shlex.split(svc["Service"]["ExecStart"])
    cron = next(ln for ln in (EX / "sweep" / "cron").read_text().splitlines() if ln.startswith("*/30"))
    cron_argv = shlex.split(cron.split(">>")[0])[6:]  # after the schedule and the user
    # the same lock and the same two steps, with the unit's absolute paths
    assert exec_argv[:3] == ["/usr/bin/flock", "-n", "/run/gpuhc/sweep.cron.lock"] == ["/usr/bin/" + cron_argv[0],
                                                                                        *cron_argv[1:3]]
    assert exec_argv[-1].replace("/usr/local/bin/", "") == cron_argv[-1]
    assert timer["Timer"]["OnCalendar"] == "*:0/30" and timer["Install"]["WantedBy"] == "timers.target"
    tmpfiles = (EX / "tmpfiles.d" / "gpuhc-sweep.conf").read_text()
    assert any(ln.split()[:2] == ["d", "/run/gpuhc"] and ln.split()[3] == "gpuhc"
               for ln in tmpfiles.splitlines() if ln and not ln.startswith("#"))


def test_retest_unit_runs_quarantine_retest():
    svc = unit("gpuhc-retest.service")
    assert shlex.split(svc["Service"]["ExecStart"]) == ["/usr/local/bin/gpuhc", "quarantine", "retest"]
    assert "slurmd.service" in svc["Unit"]["After"]


def test_watch_unit_runs_the_node_watcher_and_install_does_not_enable_it():
    svc = unit("gpuhc-watch.service")
    argv = shlex.split(svc["Service"]["ExecStart"])
    assert argv[:2] == ["/usr/local/bin/gpuhc", "watch"] and 10 <= float(argv[argv.index("--interval") + 1]) <= 15
    cp = subprocess.run([*gpuhc_bin(), *argv[1:], "--help"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "--interval" in cp.stdout, cp.stderr
    installer = (REPO / "install.sh").read_text()
    assert "examples/systemd/*.service" in installer  # copied with the other units ...
    # ... and enabled by nobody but the admin: an upgrade restarts it only where the admin enabled it
    said = [ln.strip() for ln in installer.splitlines() if "gpuhc-watch" in ln and not ln.strip().startswith("#")]
    verbs = {v for ln in said for v in re.findall(r"systemctl ([a-z-]+)", ln)}
    assert said and verbs == {"is-active", "try-restart"}, said


@pytest.mark.parametrize("words,cword,want", [
    ("gpuhc quar", 1, {"quarantine"}),
    ("gpuhc quarantine re", 2, {"release", "reset", "retest", "retire"}),
    ("gpuhc drain-report --js", 2, {"--json"}),
])
def test_shell_completion_completes_gpuhcs_commands(words, cword, want):
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_GPUHC_COMPLETE": "bash_complete"}
    cp = subprocess.run([*gpuhc_bin()], env=env, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    got = {line.split(",", 1)[1] for line in cp.stdout.splitlines() if "," in line}
    assert got == want


@pytest.mark.parametrize("banner,libcuda,want", [
    ("| NVIDIA-SMI 575.57.08   Driver Version: 575.57.08   CUDA Version: 12.9     |", None, "gpu"),
    ("| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0     |", None, "gpu-cuda13"),
    (None, "libcuda.so.535.183.01", "gpu"),
    (None, "libcuda.so.580.65.06", "gpu-cuda13"),
    (None, None, "none"),
])
def test_install_picks_cupy_from_the_driver(tmp_path, banner, libcuda, want):
    """install.sh's --gpu auto, with a stand-in nvidia-smi (the real banner's layout) or a
    driver's libcuda; only the detection runs (the script up to its python3 lookup)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if banner:
        (bindir / "nvidia-smi").write_text(f"#!/bin/sh\necho '{banner}'\n")
        (bindir / "nvidia-smi").chmod(0o755)
    script = (REPO / "install.sh").read_text()
    # Only the detection: the functions and the case that maps it, then print the extras.
    head = script.split("# PYTHON names another interpreter")[0]
    libdir = tmp_path / "lib"
    libdir.mkdir()
    if libcuda:
        (libdir / libcuda).touch()
    dirs = 'libcuda_dirs="/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/aarch64-linux-gnu"'
    assert dirs in head
    test = tmp_path / "detect.sh"
    test.write_text(head.replace(dirs, f'libcuda_dirs="{libdir}"') + 'echo "extras=${extras:-none}"\n')
    for tool in ("sed", "head", "dirname"):  # PATH is this directory only: no real nvidia-smi
        (bindir / tool).symlink_to(shutil.which(tool))
    cp = subprocess.run(["/bin/sh", str(test)], env={"PATH": str(bindir)}, capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == f"extras={want}"


def test_install_names_the_rhel9_recipe_for_an_old_python(tmp_path):
    """RHEL 9's python3 is 3.9: install.sh stops with exit 2 and says what to do (README,
    "Offline nodes"). The stand-in interpreter answers the version probe as 3.9 would."""
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    cp = subprocess.run(["sh", str(REPO / "install.sh"), "--venv", str(tmp_path / "v"), "--gpu", "none"],
                        env={**os.environ, "PYTHON": str(old)}, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "older than 3.10" in cp.stderr and "PYTHON=python3.11 sh install.sh" in cp.stderr
    assert not (tmp_path / "v").exists()
