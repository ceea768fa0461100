"""install.sh and a virtual environment that is already there: a failed run leaves it as it was
and removes the release it was building; pip's failures named.

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
import threading
from pathlib import Path

import pytest

from tests.helpers.base_python import base_python
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


def test_a_failed_run_removes_what_it_built_and_leaves_the_venv_in_use_alone(tmp_path):
    """A working venv (an installed node's /opt/gpuhc, of the layout before releases) is not
    touched because an upgrade could not reach the index: the new release goes, the cause is
    named (the layout with releases: tests/install/test_upgrade.py)."""
    venv = tmp_path / "v"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    before = sorted(p.name for p in venv.rglob("*"))
    cp = install(venv)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "pip failed: the package index http://127.0.0.1:9/simple cannot be reached" in cp.stderr, cp.stderr
    assert f"removed the unfinished release {venv}.releases/" in cp.stderr and f"{venv} is as it was" in cp.stderr
    assert venv.is_dir() and not venv.is_symlink() and sorted(p.name for p in venv.rglob("*")) == before
    assert list((tmp_path / "v.releases").iterdir()) == []


def test_a_fresh_target_that_fails_leaves_nothing_in_its_place(tmp_path):
    venv = tmp_path / "v"
    cp = install(venv)
    assert cp.returncode == 2 and not venv.exists() and not venv.is_symlink(), cp.stderr
    assert list((tmp_path / "v.releases").iterdir()) == []


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
