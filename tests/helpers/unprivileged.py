"""A throw-away unprivileged user for the real-kernel tests (a process under an ordinary uid is
what an attacker on a node has). Needs root and useradd; the test is skipped only without them."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from typing import Iterator

import pytest


def make_user(prefix: str = "gpuhck") -> Iterator:
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create an unprivileged user")
    name = prefix + uuid.uuid4().hex[:8]
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a user: {made.stderr.strip()}")
    import pwd

    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
