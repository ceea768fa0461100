"""install.sh and a virtual environment that is already there: reused when whole, rebuilt (and
said) when broken, and never left half-made when the run fails; pip's failures named.

These run on this machine's python3 (which has ensurepip) with pip's own configuration shut out
(PIP_CONFIG_FILE=/dev/null, no find-links): the package index is a local server this test runs,
so every run ends at pip without the network, quickly. The whole install from PyPI on a stock
Debian 12, with and without python3-venv, is tests/install/test_debian.py's.
"""

from __future__ import annotations

import http.server
import os
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

pytestmark = pytest.mark.install


def env(index: str) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and "proxy" not in k.lower()}
    return {**keep, "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index, "PIP_RETRIES": "0",
            "PIP_DEFAULT_TIMEOUT": "5", "PYTHON": base_python()}


def install(venv: Path, index: str = "http://127.0.0.1:9/simple") -> subprocess.CompletedProcess:
    """install.sh --venv with an index at ``index`` (the default: a closed port)."""
    return subprocess.run(["sh", str(REPO / "install.sh"), "--venv", str(venv), "--gpu", "none"],
                          env=env(index), capture_output=True, text=True, timeout=300)


def base_python() -> str:
    cp = subprocess.run([sys.executable, "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                        text=True, check=True)
    return cp.stdout.strip()


def test_a_venv_an_interrupted_run_left_is_rebuilt_and_a_failed_run_leaves_none(tmp_path):
    venv = tmp_path / "v"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / ".gpuhc-install-incomplete").touch()  # what a run stopped half-way leaves
    cp = install(venv)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert (f"install.sh: {venv} is a broken virtual environment (an earlier install.sh run stopped before it "
            "finished): rebuilding it") in cp.stderr, cp.stderr
    # the index is unreachable: the rebuilt venv goes again, and the cause is named
    assert "pip failed: the package index http://127.0.0.1:9/simple cannot be reached" in cp.stderr, cp.stderr
    assert f"removed the unfinished virtual environment {venv}" in cp.stderr
    assert not venv.exists()


def test_a_venv_of_another_python_is_rebuilt(tmp_path):
    """A venv whose python says 3.9 (RHEL 9's python3) where install.sh runs another."""
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.9.18\n")
    (venv / "bin" / "python").write_text("#!/bin/sh\ncase \"$*\" in *version_info*) echo 3.9 ;; esac\n")
    (venv / "bin" / "python").chmod(0o755)
    cp = install(venv)
    assert "is a broken virtual environment (it runs Python 3.9, not" in cp.stderr, cp.stderr
    assert cp.returncode == 2 and not venv.exists()


def test_a_whole_venv_is_reused_and_kept_when_pip_fails(tmp_path):
    """A working venv (an installed node's /opt/gpuhc) is not removed because an upgrade could
    not reach the index; its marker stays, so that the next run rebuilds it."""
    venv = tmp_path / "v"
    subprocess.run([base_python(), "-m", "venv", str(venv)], check=True)
    cp = install(venv)
    assert cp.returncode == 2 and "rebuilding" not in cp.stderr, cp.stderr
    assert (venv / "bin" / "python").exists() and (venv / ".gpuhc-install-incomplete").exists()
    again = install(venv)
    assert "an earlier install.sh run stopped before it finished): rebuilding it" in again.stderr


def test_a_directory_that_is_not_a_venv_is_left_alone(tmp_path):
    target = tmp_path / "opt"
    target.mkdir()
    (target / "data").write_text("someone's")
    cp = install(target)
    assert cp.returncode == 2 and "exists and is not a virtual environment" in cp.stderr, cp.stderr
    assert (target / "data").read_text() == "someone's"


@pytest.fixture
def tls_index(tmp_path):
    """An HTTPS index on 127.0.0.1 whose certificate no CA signed: what pip meets behind a
    proxy that re-signs TLS with the site's own CA."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def test_a_tls_failure_is_named_as_one(tmp_path, tls_index):
    cp = install(tmp_path / "v", tls_index)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "pip failed: TLS to the package index failed (a certificate not trusted by" in cp.stderr and "PIP_CERT=" in cp.stderr, cp.stderr
    assert not (tmp_path / "v").exists()
