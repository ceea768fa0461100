"""The real kernel, issue 29: a user's crashing program whose file name carries a newline and the
driver's exact Xid 79 line. The kernel's segfault record quotes the file name, so the forged line
becomes the continuation of one facility-0 record. gpuhc reads the record as the unit (it quotes a
process and a file, so none of its lines is driver evidence) in every form that record reaches
it: /dev/kmsg, real ``dmesg`` text, and the journal's JSON and export forms built from the same
real record. The old code said FAIL xid ... Xid 79 on the kmsg and dmesg forms.

Needs root (an unprivileged user, /dev/kmsg) and a C compiler; skipped only without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from gpuhc.checks import xid
from gpuhc.model.result import Status
from gpuhc.sources.kernel_log import DmesgSource, KmsgSource
from gpuhc.sources.kernel_log_parse import parse_lines
from gpuhc.sources.kernel_log_journal import export_entries
from tests.helpers.snapshots import context, healthy_node
from tests.helpers.unprivileged import make_user

KMSG = "/dev/kmsg"
FORGED = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=a, GPU has fallen off the bus."
CRASH_C = "int main(void) { *(volatile int *)0 = 6; return 0; }\n"


@pytest.fixture
def user():
    if not shutil.which("cc"):
        pytest.skip("needs a C compiler")
    if not os.access(KMSG, os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    yield from make_user("gpuhcr")


def _records() -> list[str]:
    fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    out = []
    try:
        while True:
            try:
                out.append(os.read(fd, 16384).decode("utf-8", "replace").split("\n", 1)[0])
            except BlockingIOError:
                return out
            except BrokenPipeError:
                continue
    finally:
        os.close(fd)


def _judged(log) -> list[Status]:
    snap = healthy_node(time=log.last_time)
    snap.kernel = log
    return [r.status for r in xid.CHECKS[0].judge(snap, context(xid.CHECKS[0])).results]


def test_a_file_name_with_a_newline_and_a_driver_line_forges_nothing_in_any_form(user):
    work = tempfile.mkdtemp(prefix="gpuhc-forge-")
    try:
        os.chmod(work, 0o755)
        src = os.path.join(work, "crash.c")
        with open(src, "w") as f:
            f.write(CRASH_C)
        exe = os.path.join(work, "NVRM:\n" + FORGED)
        subprocess.run(["cc", "-O0", "-o", exe, src], check=True, capture_output=True)
        os.chmod(exe, 0o755)
        seen: list[str] = []
        for _attempt in range(3):  # printk's rate limit may drop one; it refills in 5 s
            run = subprocess.run([exe], user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True,
                                 cwd=work)
            assert run.returncode == -11, run  # SIGSEGV, under the unprivileged uid
            time.sleep(0.2)
            seen = [r for r in _records() if "segfault" in r and "GPU has fallen off the bus" in r]
            if seen:
                break
            time.sleep(5)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open("/proc/sys/debug/exception-trace") as f:
        if f.read().strip() != "1" and not seen:
            pytest.skip("this kernel does not log unhandled segfaults (debug.exception-trace is 0)")
    assert seen, "the segfault record did not reach /dev/kmsg"
    record = seen[-1]
    # one facility-0 record whose escaped newline puts the driver's exact line on a line of its own
    assert int(record.split(",", 1)[0]) >> 3 == 0 and "\\x0a" + FORGED in record, record

    log = KmsgSource().read()
    assert not [e for e in log.events if FORGED[6:40] in (e.message or "")], log.events
    assert Status.FAIL not in _judged(log)
    dm = DmesgSource().read()  # util-linux dmesg prints the record's lines indented under its stamp
    assert not [e for e in dm.events if "0000:18:00" in (e.pci or "")], dm.events
    assert Status.FAIL not in _judged(dm)

    # the journal's forms of the same real record: JSON, and export with MESSAGE as a binary field
    text = record.split(";", 1)[1].replace("\\x0a", "\n")
    usec = int(time.time() * 1e6)
    as_json = json.dumps({"__REALTIME_TIMESTAMP": str(usec), "_TRANSPORT": "kernel", "MESSAGE": text})
    assert parse_lines([as_json]).events == []
    body = text.encode()
    export = (f"__CURSOR=s=1;i=1\n__REALTIME_TIMESTAMP={usec}\n_TRANSPORT=kernel\n").encode() + b"MESSAGE\n" + \
        len(body).to_bytes(8, "little") + body + b"\n\n"
    entries = export_entries(export)
    assert len(entries) == 1 and json.loads(entries[0])["MESSAGE"] == text
    assert parse_lines(entries).events == []
