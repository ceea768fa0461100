"""The kernel log sources: /dev/kmsg reading, dmesg with its fallback, files, and errors.

The device and the dmesg binary are the hardware boundary, so they are stood in for: a copy
of /dev/kmsg in a file (plus scripted os.read results for EAGAIN/EPIPE), and a small script
playing dmesg.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest

from gpuhc.errors import SourceError
from gpuhc.model.kernel import EventKind
from gpuhc.sources import kernel_log as kl
from tests.helpers.kmsg_reads import script_reads
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "kernel_log"


def _boot_id(tmp_path: Path, value: str = "1c0ffee0-aaaa-bbbb-cccc-000000000001") -> str:
    p = tmp_path / "boot_id"
    p.write_text(value + "\n")
    return str(p)


def test_kmsg_copy_in_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(kl, "boot_time", lambda: 1_000_000.0)
    log = kl.KmsgSource(str(FIX / "kmsg.log"), boot_id_path=_boot_id(tmp_path)).read()
    assert [(e.code, e.seq) for e in log.events] == [(31, 101), (79, 102)]
    assert log.events[0].time == pytest.approx(1_000_008.0005)  # since-boot made epoch
    assert (log.source, log.last_seq, log.boot_id) == (str(FIX / "kmsg.log"), 103, "1c0ffee0-aaaa-bbbb-cccc-000000000001")


def test_kmsg_eagain_and_epipe(tmp_path, monkeypatch):
    """One record per read; EPIPE (record overwritten under us) skips; EAGAIN ends the read."""
    script = [b"4,1,1000,-;NVRM: Xid (PCI:0000:01:00): 13, a\n", OSError(errno.EPIPE, "Broken pipe"),
              b"4,3,2000,-;NVRM: Xid (PCI:0000:02:00): 31, b\n", BlockingIOError(errno.EAGAIN, "again"),
              b"4,4,3000,-;never read\n"]
    script_reads(monkeypatch, kl, script)
    dev = tmp_path / "kmsg"
    dev.write_text("")
    log = kl.KmsgSource(str(dev), boot_id_path=_boot_id(tmp_path)).read()
    assert [(e.code, e.seq) for e in log.events] == [(13, 1), (31, 3)]
    assert len(script) == 1


def test_kmsg_unreadable_raises_source_error(tmp_path):
    with pytest.raises(SourceError, match="nope"):
        kl.KmsgSource(str(tmp_path / "nope")).read()


USER_RECORD = "2025-01-21T02:21:33,000000+00:00 NVRM: Xid (PCI:0000:aa:00): 79, a user's record\n"


def _fake_dmesg(tmp_path: Path, iso_ok: bool, plain: str, iso: str = "", rc: int = 0) -> str:
    """A stand-in dmesg: prints `iso` for --time-format=iso (or fails like util-linux < 2.23)."""
    script = tmp_path / "dmesg"
    (tmp_path / "iso.txt").write_text(iso)
    (tmp_path / "plain.txt").write_text(plain)
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, pathlib\n"
        f"d = pathlib.Path({str(tmp_path)!r})\n"
        # without --kernel, util-linux dmesg also prints records user space wrote into /dev/kmsg,
        # which its text cannot tell from the kernel's
        f"sys.stdout.write('' if '--kernel' in sys.argv else {USER_RECORD!r})\n"
        "if '--time-format=iso' in sys.argv:\n"
        f"    if not {iso_ok!r}:\n"
        "        sys.stderr.write('dmesg: unrecognized option\\n'); sys.exit(1)\n"
        "    sys.stdout.write((d / 'iso.txt').read_text()); sys.exit(0)\n"
        f"sys.stderr.write('dmesg: read kernel buffer failed: Operation not permitted\\n' if {rc} else '')\n"
        f"sys.stdout.write((d / 'plain.txt').read_text()); sys.exit({rc})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_dmesg_prefers_iso(tmp_path):
    iso = (FIX / "dmesg_iso_decode.log").read_text()
    exe = _fake_dmesg(tmp_path, True, plain="", iso=iso.replace("kern  :warn  : ", "").replace("kern  :info  : ", ""))
    log = kl.DmesgSource(binary=exe, boot_id_path=_boot_id(tmp_path)).read()
    assert [e.code for e in log.events] == [48, 63, 94, 94]
    assert log.source == "dmesg" and log.boot_id


def test_dmesg_falls_back_to_plain_with_boot_time(tmp_path, monkeypatch):
    monkeypatch.setattr(kl, "boot_time", lambda: 1_700_000_000.0)
    exe = _fake_dmesg(tmp_path, False, plain=(FIX / "dmesg_plain.log").read_text())
    log = kl.DmesgSource(binary=exe).read()
    assert log.events[-1].code == 79
    assert log.events[-1].time == pytest.approx(1_700_002_000.00001)


def test_dmesg_failure_names_the_binary_and_reason(tmp_path):
    exe = _fake_dmesg(tmp_path, False, plain="", rc=1)
    with pytest.raises(SourceError, match=r"exit 1.*Operation not permitted"):
        kl.DmesgSource(binary=exe).read()


def test_dmesg_timeout(tmp_path):
    script = tmp_path / "slow"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    script.chmod(0o755)
    with pytest.raises(SourceError, match="timed out"):
        kl.DmesgSource(binary=str(script), timeout_s=0.5).read()


def test_dmesg_found_without_path(monkeypatch):
    """Slurm runs its programs with no PATH: dmesg must still be found in the usual places."""
    monkeypatch.setenv("PATH", "")
    exe = kl.DmesgSource()._find()
    assert os.path.basename(exe) == "dmesg" and os.access(exe, os.X_OK)


def test_live_falls_back_to_dmesg(tmp_path):
    exe = _fake_dmesg(tmp_path, True, plain="", iso="2025-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:01:00): 79, x\n")
    live = kl.LiveKernelLog(kl.KmsgSource(str(tmp_path / "no-kmsg")), kl.DmesgSource(binary=exe), previous_boot=False)
    log = live.read()
    assert log.source == "dmesg" and [e.kind for e in log.events] == [EventKind.XID]


def test_live_reports_both_failures(tmp_path):
    exe = _fake_dmesg(tmp_path, False, plain="", rc=1)
    live = kl.LiveKernelLog(kl.KmsgSource(str(tmp_path / "no-kmsg")), kl.DmesgSource(binary=exe), previous_boot=False)
    with pytest.raises(SourceError, match=r"no-kmsg.*exit 1"):
        live.read()


def test_file_source_reads_and_names_itself():
    log = kl.FileKernelLog(str(FIX / "journal.log"), year=2024).read()
    assert log.source.endswith("journal.log") and len(log.events) == 3 and log.boot_id is None


def test_file_source_invalid_utf8(tmp_path):
    p = tmp_path / "bin.log"
    p.write_bytes(b"\xff\xfe[ 1.0] NVRM: Xid (PCI:0000:01:00): 13, \xc3(\n\x00\x01garbage\n")
    log = kl.FileKernelLog(str(p)).read()
    assert [e.code for e in log.events] == [13]


@pytest.mark.parametrize("make", [lambda p: p / "missing.log", lambda p: p])
def test_file_source_unreadable_names_path(tmp_path, make):
    path = make(tmp_path)
    with pytest.raises(SourceError, match=str(path)):
        kl.FileKernelLog(str(path)).read()


def test_boot_helpers(tmp_path):
    assert 0 < kl.boot_time() <= __import__("time").time()
    assert kl.boot_id(_boot_id(tmp_path, "abc")) == "abc"
    assert kl.boot_id(str(tmp_path / "none")) is None
