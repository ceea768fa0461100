"""The real kernel: a user names a process like a driver line, makes it segfault, and gpuhc's
kernel log source reads the real /dev/kmsg and stays PASS (issue 18, docs/security.md).

Needs root (to create an unprivileged user and to read and write /dev/kmsg); skipped only where
the user cannot be created. Whether the kernel logs the segfault depends on
``debug.exception-trace`` (the x86 ``show_unhandled_signals`` switch) and the printk rate limit:
the test says which it found. Either way it also writes records into /dev/kmsg from user space
(as root: /dev/kmsg is root's to write on most systems), which the kernel stamps facility 1
whatever level they ask for, and checks that none is driver evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpuhc.checks import xid
from gpuhc.model.result import Status
from gpuhc.sources.kernel_log import KmsgSource
from tests.helpers.snapshots import context, healthy_node
from tests.helpers.paths import REPO
from tests.helpers.unprivileged import make_user

KMSG = "/dev/kmsg"
# comm holds 15 characters: each name is a driver line's first words, as far as they fit
NAMES = ("NVRM Xid()79", "NVRM GPU lost", "NVRM: Xid (PCI:", "GSP task watchd")
_SEGFAULT = "import ctypes,sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); ctypes.string_at(0)"
# What a root-run program could write: the driver's exact grammar, levels 0 and 4
FORGED = ("<4>NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
          "<0>NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.")


@pytest.fixture
def user():
    yield from make_user("gpuhck")


def _last_seq() -> int:
    """The sequence number of the newest record now in the ring buffer."""
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    seq = -1
    try:
        while True:
            try:
                seq = int(os.read(fd, 16384).split(b",", 2)[1])
            except BlockingIOError:
                return seq
            except BrokenPipeError:
                continue
    finally:
        os.close(fd)


def _records_since(seq: int) -> list[str]:
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    out = []
    try:
        while True:
            try:
                rec = os.read(fd, 16384).decode("utf-8", "replace")
            except BlockingIOError:
                return out
            except BrokenPipeError:
                continue
            if int(rec.split(",", 2)[1]) > seq:
                out.append(rec.split("\n", 1)[0])
    finally:
        os.close(fd)


def _python_for(pw) -> str:
    """A Python the new user may run (a venv under root's home may not be reachable)."""
    for exe in ("/usr/bin/python3", sys.executable):
        ok = subprocess.run([exe, "-c", "pass"], user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                            capture_output=True)
        if ok.returncode == 0:
            return exe
    pytest.skip("no Python the unprivileged user can run")


def test_a_user_process_named_like_a_driver_line_segfaults_and_the_check_stays_pass(user, tmp_path):
    state_dir = tmp_path / "state"
    if not os.access(KMSG, os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg is not readable and writable here")
    start = _last_seq()
    exe = _python_for(user)
    seen: list[str] = []
    for name in NAMES:
        for _attempt in range(3):  # printk's rate limit may drop one; it refills in 5 s
            run = subprocess.run([exe, "-c", _SEGFAULT, name], user=user.pw_uid, group=user.pw_gid,
                                 extra_groups=[], capture_output=True)
            assert run.returncode == -11, run  # SIGSEGV, under the unprivileged uid
            time.sleep(0.2)
            hits = [r for r in _records_since(start) if f";{name}[" in r and "segfault" in r]
            if hits:
                seen.extend(hits)
                break
            time.sleep(5)
    with open("/proc/sys/debug/exception-trace") as f:
        traced = f.read().strip() == "1"
    if traced:
        # the kernel logs unhandled segfaults here: every name reached the real log, as its own
        # facility-0 record, which is exactly what issue 18 turned into a drain
        assert len(seen) == len(NAMES), seen
        assert all(r.split(",", 1)[0] in {str(n) for n in range(8)} for r in seen)
    for text in FORGED:
        with open(KMSG, "w") as f:
            f.write(text + "\n")
    forged = [r for r in _records_since(start) if "name=x, GPU has fallen" in r or "0000:18:00.0: GPU has" in r]
    assert len(forged) == 2 and all(int(r.split(",", 1)[0]) >> 3 == 1 for r in forged), forged

    log = KmsgSource().read()  # gpuhc's own source, on the real /dev/kmsg
    assert [e for e in log.events if e.seq is not None and e.seq > start] == []
    snap = healthy_node(time=log.last_time)
    snap.kernel = log
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert [r.status for r in out.results] == [Status.PASS], [r.message for r in out.results]

    # and the command an admin runs, on the same real log (issue 18: it said FAIL xid ... Xid 79)
    healthy = os.path.join(REPO, "examples", "scenarios",
                           "healthy-8xh100.yaml")
    cli = subprocess.run([sys.executable, "-m", "gpuhc", "check", "--json", "--nvml-scenario", healthy,
                          "--kernel-log", "kmsg", "--state-dir", str(state_dir)], capture_output=True, text=True,
                         timeout=300, env={k: v for k, v in os.environ.items() if k != "GPUHC_CONFIG"})
    (r,) = [r for r in json.loads(cli.stdout)["results"] if r["check"] == "xid"]
    assert r["status"] == "pass", r
