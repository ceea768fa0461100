"""A throw-away unprivileged user for the real-kernel tests (a process under an ordinary uid is
what an attacker on a node has), and such a process that shows as root's in /proc. Needs root and useradd; the
test is skipped only without them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
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



@contextmanager
def namesake(user, name: str, setuid: bool = True) -> Iterator[subprocess.Popen]:
    """What any user can start: a set-uid-root program (a copy of sleep here, as passwd or su
    would be) run through a link named ``name``. The kernel names the process after the link
    (comm, 15 characters) and shows /proc/<pid> as owned by its effective uid, root; its real
    uid, the first of status's ``Uid:`` line, stays the user's. ``setuid=False``: the same
    program without the bit, as a service that dropped to its account runs."""
    where = tempfile.mkdtemp(prefix="gpuhc-namesake-", dir="/tmp")
    try:
        os.chmod(where, 0o755)  # the user must reach the program
        program = os.path.join(where, "sleep")
        shutil.copy("/bin/sleep", program)
        os.chmod(program, 0o4755 if setuid else 0o755)
        link = os.path.join(where, name)
        os.symlink(program, link)
        p = subprocess.Popen([link, "120"], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                             stdin=subprocess.DEVNULL, cwd="/")
        shown = 0 if setuid else user.pw_uid
        try:
            deadline = time.monotonic() + 10
            while os.stat(f"/proc/{p.pid}").st_uid != shown or _comm(p.pid) != name[:15]:
                assert time.monotonic() < deadline and p.poll() is None, "the program did not start"
                time.sleep(0.02)
            yield p
        finally:
            p.kill()
            p.wait()
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()
