"""Recorded kernel logs bigger than the part read whole (issue: an Xid 79 six minutes before the
last line of a 200 MB log gave PASS; so did one behind a single 33 MB line).

The files are made in tmp_path: a sparse hole stands for the months of log before, and the
last 33 MiB are real-looking lines, so the Xid lies beyond the 32 MiB read whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhc.checks import xid
from gpuhc.errors import SourceError
from gpuhc.model.result import Action, Status
from gpuhc.sources import kernel_log_file
from gpuhc.sources.kernel_log import FileKernelLog
from tests.helpers.snapshots import context, healthy_node
from tests.helpers.paths import REPO

ROOT = REPO
HEALTHY = str(ROOT / "examples" / "scenarios" / "healthy-8xh100.yaml")
T = 1_740_000_000  # the log's last line
HOLE = 160 << 20  # with the lines after it: a 200 MB file
XID79 = "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ",000000+00:00"


def _flood(t0: float, t1: float, nbytes: int) -> bytes:
    size = len(f"{iso(t0)} systemd[1]: {'x' * 200}\n")
    n = nbytes // size + 1  # at least nbytes
    return "".join(f"{iso(t0 + (t1 - t0) * i / n)} systemd[1]: {'x' * 200}\n" for i in range(n)).encode()


def _big_log(path: Path, after_xid: bytes) -> Path:
    with open(path, "wb") as f:
        f.truncate(HOLE)  # sparse: months of older log
        f.seek(HOLE)
        f.write(f"\n{iso(T - 3 * 86400)} NVRM: Xid (PCI:0000:2a:00): 48, an old one, outside the window\n".encode())
        f.write(f"{iso(T - 360)} {XID79}\n".encode())
        f.write(after_xid)
        f.write(f"{iso(T)} systemd[1]: the last line\n".encode())
    return path


@pytest.fixture(scope="module")
def flooded(tmp_path_factory) -> Path:
    """A 200 MB log: the Xid 79, then 33 MiB of other lines in its last five minutes."""
    return _big_log(tmp_path_factory.mktemp("big") / "kern.log", _flood(T - 300, T - 1, 33 << 20))


def _judge(log):
    snap = healthy_node(time=log.last_time)
    snap.kernel = log
    return xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))


def test_an_xid_beyond_the_part_read_whole_is_found_in_a_200_mb_log(flooded):
    assert flooded.stat().st_size > 190e6
    with open(flooded, "rb") as f:
        f.seek(-kernel_log_file.TAIL_BYTES, os.SEEK_END)
        assert b"Xid" not in f.read()  # the Xid is not in the part read whole
    log = FileKernelLog(str(flooded)).read()
    assert [(e.code, e.time) for e in log.events] == [(48, T - 3 * 86400), (79, T - 360)]
    assert (log.last_time, log.covered_from, log.partial) == (T, None, "")  # the scan reached the start
    fails = [(r.status, r.action, r.subject) for r in _judge(log).results]
    assert fails == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu3")]


def test_the_command_line_fails_that_node(flooded, tmp_path):
    p = subprocess.run([sys.executable, "-m", "gpuhc", "check", "--json", "--nvml-scenario", HEALTHY,
                        "--kernel-log", str(flooded), "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "GPUHC_CONFIG"})
    assert p.returncode == 1, p.stderr
    (r,) = [r for r in json.loads(p.stdout)["results"] if r["check"] == "xid"]
    assert (r["status"], r["subject"], r["message"]) == ("fail", "gpu3", "Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus")


def test_a_single_33_mb_line_after_the_xid_does_not_hide_it(tmp_path):
    path = tmp_path / "kern.log"
    with open(path, "wb") as f:
        f.write(f"{iso(T - 360)} {XID79}\n".encode())
        f.truncate(f.tell() + (33 << 20))  # one 33 MB "line" (NUL bytes), then the last line
        f.seek(0, os.SEEK_END)
        f.write(f"\n{iso(T)} systemd[1]: the last line\n".encode())
    log = FileKernelLog(str(path)).read()
    assert [(e.code, e.time) for e in log.events] == [(79, T - 360)] and log.last_time == T
    assert [r.status for r in _judge(log).results] == [Status.FAIL]


def test_a_read_that_cannot_reach_back_over_the_window_warns(flooded, monkeypatch):
    monkeypatch.setattr(kernel_log_file, "SCAN_BYTES", 256 << 10)  # the Xid is ~1 MiB before the tail
    monkeypatch.setattr(kernel_log_file, "CHUNK", 128 << 10)
    log = FileKernelLog(str(flooded)).read()
    assert log.events == [] and log.partial and T - 300 <= log.covered_from < T
    (r,) = _judge(log).results
    assert r.status is Status.WARN and not r.action.drains
    assert r.message.startswith(f"kernel log {flooded} is too big to read whole (")
    assert "Xids earlier in the 24h window were not seen" in r.message


def test_a_read_that_reached_back_over_the_window_says_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_log_file, "TAIL_BYTES", 1 << 20)
    monkeypatch.setattr(kernel_log_file, "CHUNK", 256 << 10)
    path = tmp_path / "kern.log"
    path.write_bytes(_flood(T - 9 * 86400, T - 8 * 86400, 2 << 20) + f"{iso(T - 360)} {XID79}\n".encode()
                     + _flood(T - 300, T, 2 << 20))
    log = FileKernelLog(str(path)).read()
    assert [e.code for e in log.events] == [79]
    assert log.partial and log.covered_from <= T - kernel_log_file.COVER_S  # stopped once far enough back
    assert [r.status for r in _judge(log).results] == [Status.FAIL]


def test_a_symlink_is_refused_not_followed(tmp_path):
    real = tmp_path / "real.log"
    real.write_text(f"{iso(T)} {XID79}\n")
    link = tmp_path / "kern.log"
    link.symlink_to(real)
    with pytest.raises(SourceError, match="symbolic link"):
        FileKernelLog(str(link)).read()
