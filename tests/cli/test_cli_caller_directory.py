"""Root never runs code from where it stands (issue 45): a ``gpuhc/`` package and a ``yaml.py``
a user left in a world-writable directory are never imported by any entry point started there:
the console script, ``python3 -I -m gpuhc``, the active checks' worker, and each Slurm shim with
``GPUHC_BIN`` in its documented Python form (and the older form without ``-I``, which the shims'
``cd /`` also makes safe). docs/security.md, "Root never runs code from where it stands"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

HEALTHY = str(REPO / "examples" / "scenarios" / "healthy-8xh100.yaml")
VENV_BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture
def planted(tmp_path):
    """A mode-1777 directory holding a ``gpuhc`` package and a ``yaml`` module that each leave a
    marker file when imported; returns (the directory, the markers)."""
    shared = tmp_path / "shared"
    (shared / "gpuhc").mkdir(parents=True)
    shared.chmod(0o1777)
    markers = {name: tmp_path / f"imported-{name}" for name in ("gpuhc", "yaml")}
    (shared / "gpuhc" / "__init__.py").write_text(f"open({str(markers['gpuhc'])!r}, 'w').write('planted')\n")
    (shared / "yaml.py").write_text(f"open({str(markers['yaml'])!r}, 'w').write('planted')\n")
    return shared, markers


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUHC_CONFIG", "GPUHC_DEBUG")}
    env.update(extra)
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _imported(markers: dict[str, Path]) -> list[str]:
    return [name for name, path in markers.items() if path.exists()]


def test_the_plant_is_real_python_m_from_that_directory_imports_it(planted):
    """The control: the planted package does run when Python looks in the caller's directory, so
    the tests below that see no marker prove something."""
    shared, markers = planted
    _run([sys.executable, "-m", "gpuhc", "--version"], shared, _env())
    assert _imported(markers) == ["gpuhc"]


@pytest.mark.parametrize("argv", [
    [str(VENV_BIN / "gpuhc"), "check", "--nvml-scenario", HEALTHY],
    [sys.executable, "-I", "-m", "gpuhc", "check", "--nvml-scenario", HEALTHY],
    [str(VENV_BIN / "gpuhc"), "check", "--demo"],
], ids=["console-script", "python-I-m", "demo"])
def test_passive_check_from_a_world_writable_directory_imports_nothing_from_it(planted, argv):
    shared, markers = planted
    cp = _run(argv, shared, _env())
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert _imported(markers) == []


@pytest.mark.parametrize("python_form", [False, True], ids=["console-script", "python-I-m"])
def test_the_active_worker_started_from_a_world_writable_directory_imports_nothing_from_it(planted, tmp_path,
                                                                                           python_form):
    """``check --stage epilog`` starts the real worker (no GPU here: it says hello and the
    parent judges "no NVIDIA GPU"); neither it nor the parent imports the planted package."""
    shared, markers = planted
    head = [sys.executable, "-I", "-m", "gpuhc"] if python_form else [str(VENV_BIN / "gpuhc")]
    cp = _run([*head, "check", "--json", "--stage", "epilog", "--nvml-scenario", HEALTHY], shared, _env())
    results = {r["check"]: r for r in json.loads(cp.stdout)["results"]}
    # the worker ran: its hello decided the result (it never says "did not start")
    assert results["topology"]["status"] in ("pass", "n/a", "warn", "fail"), results["topology"]
    assert "did not start" not in results["topology"]["message"]
    assert _imported(markers) == []


@pytest.mark.parametrize("kind", ["healthcheck", "prolog", "epilog"])
@pytest.mark.parametrize("gpuhc_bin", [
    f"{sys.executable} -I -m gpuhc",  # the documented Python form
    f"{sys.executable} -m gpuhc",  # the older form: the shim's cd / keeps it safe too
    "",  # unset: the console script found on PATH
], ids=["python-I-m", "python-m", "console-script"])
def test_each_shim_started_from_a_world_writable_directory_imports_nothing_from_it(planted, tmp_path, kind,
                                                                                  gpuhc_bin):
    """The shim as slurmd starts it (no environment but the node's name and what the admin set),
    from a caller's world-writable directory."""
    shared, markers = planted
    env = {"SLURMD_NODENAME": "gpu001", "GPUHC_STATE_DIR": str(tmp_path / "state"),
           "PATH": f"{VENV_BIN}:{SYSTEM_PATH}"}
    if gpuhc_bin:
        env["GPUHC_BIN"] = gpuhc_bin
    cp = _run(["/bin/sh", str(REPO / "slurm" / f"{kind}.sh"), "--nvml-scenario", HEALTHY], shared, env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"gpuhc {kind} gpu001" in cp.stderr and "PASS" in cp.stderr, cp.stderr
    assert _imported(markers) == []
