"""Upgrade without a gap (issue 50, point 5): install.sh builds the new release beside the one in
use and switches the link with one rename, so `gpuhc check` started in a loop during a re-install
never fails; a failed install leaves the release in use running; `--rollback` goes back one.

These install for real through pip, with this machine's pip configuration (its index or
mirror, as CI's install tests have): `--venv DIR`, the same code path as the node install's
/opt/gpuhc (the root install in a Debian root: tests/install/test_debian.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.base_python import base_python
from tests.helpers.paths import REPO

pytestmark = pytest.mark.install


def _install(venv: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(["sh", str(REPO / "install.sh"), "--venv", str(venv), "--gpu", "none", *args],
                            env={**os.environ, "PYTHON": base_python(), **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _done(p: subprocess.Popen) -> str:
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out
    return out


def _releases(venv: Path) -> list[str]:
    return sorted(p.name for p in Path(f"{venv}.releases").iterdir())


def test_check_runs_in_a_loop_through_a_reinstall_and_never_fails(tmp_path):
    venv = tmp_path / "v"
    _done(_install(venv))
    first = os.readlink(venv)
    runs, failed = 0, []
    p = _install(venv)
    while p.poll() is None or runs == 0:
        cp = subprocess.run([str(venv / "bin" / "gpuhc"), "check", "--demo"], capture_output=True, text=True,
                            timeout=120)
        runs += 1
        if cp.returncode != 0:
            failed.append(cp.stderr[-300:])
    _done(p)
    assert runs >= 5 and failed == [], (runs, failed)
    second = os.readlink(venv)
    assert second != first and _releases(venv) == sorted([Path(first).name, Path(second).name])
    # one more: the oldest goes, the one before stays for --rollback
    _done(_install(venv))
    assert Path(first).name not in _releases(venv) and Path(second).name in _releases(venv)
    out = _done(_install(venv, "--rollback"))
    assert os.readlink(venv) == second and "stays for a roll forward" in out
    assert subprocess.run([str(venv / "bin" / "gpuhc"), "check", "--demo"], capture_output=True).returncode == 0


def test_a_failed_upgrade_leaves_the_release_in_use_running(tmp_path):
    venv = tmp_path / "v"
    _done(_install(venv))
    using = os.readlink(venv)
    bad = _install(venv, env={"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                              "PIP_RETRIES": "0", "PIP_DEFAULT_TIMEOUT": "5", "PIP_FIND_LINKS": ""})
    out, _ = bad.communicate(timeout=300)
    assert bad.returncode == 2 and f"{venv} is as it was" in out, out
    assert os.readlink(venv) == using and _releases(venv) == [Path(using).name]
    assert subprocess.run([str(venv / "bin" / "gpuhc"), "--version"], capture_output=True).returncode == 0


def test_a_venv_of_the_layout_before_releases_becomes_the_one_to_roll_back_to(tmp_path):
    venv = tmp_path / "v"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "old-marker").write_text("the venv that was here")
    old = venv / "bin" / "gpuhc"  # the gpuhc it ran (a stand-in: what matters is that it runs)
    old.write_text("#!/bin/sh\necho 'gpuhc 0.0.9 (the layout before releases)'\n")
    old.chmod(0o755)
    _done(_install(venv))
    assert venv.is_symlink() and (Path(f"{venv}.releases") / "0-before-releases" / "old-marker").exists()
    _done(_install(venv, "--rollback"))
    assert (venv / "old-marker").read_text() == "the venv that was here"
    assert subprocess.run([str(venv / "bin" / "gpuhc"), "--version"], capture_output=True, text=True).stdout.startswith(
        "gpuhc 0.0.9")


def test_a_venv_of_the_layout_before_releases_whose_gpuhc_does_not_run_is_not_kept(tmp_path):
    """A venv left half-made (no gpuhc that runs) is no release to roll back to: replaced, said."""
    venv = tmp_path / "v"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    out = _done(_install(venv))  # stdout and stderr together
    assert "was a broken virtual environment (its gpuhc does not run)" in out, out
    assert not (Path(f"{venv}.releases") / "0-before-releases").exists()


def test_a_relative_venv_path_links_to_its_release_wherever_it_is_run_from(tmp_path):
    cp = subprocess.run(["sh", str(REPO / "install.sh"), "--venv", "sub/v", "--gpu", "none"], cwd=tmp_path,
                        env={**os.environ, "PYTHON": base_python()}, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    link = tmp_path / "sub" / "v"
    assert os.readlink(link).startswith(f"{tmp_path}/sub/v.releases/")
    assert subprocess.run([str(link / "bin" / "gpuhc"), "--version"], capture_output=True).returncode == 0
