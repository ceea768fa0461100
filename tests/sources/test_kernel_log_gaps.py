"""Records lost before gpuhc read them (issue 29): users can flood the kernel log (a network
device in their own namespace prints unthrottled) and push a real Xid out of the ring buffer
before the next run. A gap in /dev/kmsg's sequence numbers, since the previous run's last record
or inside one read, is a WARN naming how many; it never drains (docs/security.md, "Kernel log")."""

from __future__ import annotations

import errno

from gpuhc.checks import xid
from gpuhc.model.result import Status
from gpuhc.sources import kernel_log as kl
from tests.helpers.kmsg_reads import script_reads
from tests.helpers.snapshots import context, healthy_node

BOOT = "1c0ffee0-aaaa-bbbb-cccc-000000000001"


def read(tmp_path, monkeypatch, records: list) -> object:
    script_reads(monkeypatch, kl, list(records) + [BlockingIOError(errno.EAGAIN, "again")])
    monkeypatch.setattr(kl, "boot_time", lambda: 1_700_000_000.0)
    dev, bid = tmp_path / "kmsg", tmp_path / "boot_id"
    dev.write_text("")
    bid.write_text(BOOT + "\n")
    return kl.KmsgSource(str(dev), boot_id_path=str(bid)).read()


def judge(log, prev=None):
    snap = healthy_node(time=log.last_time)
    snap.kernel = log
    return xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], prev=prev))


def rec(seq: int, text: str = "eth0: link up") -> bytes:
    return f"6,{seq},{seq * 1000},-;{text}\n SUBSYSTEM=net\n".encode()


def test_a_gap_since_the_previous_run_is_a_warning_naming_how_many(tmp_path, monkeypatch):
    first = judge(read(tmp_path, monkeypatch, [rec(10), rec(11), rec(12)]))
    assert [r.status for r in first.results] == [Status.PASS]
    # the next run finds the buffer starting at 500: 487 records (13..499) went unread
    later = read(tmp_path, monkeypatch, [rec(500), rec(501)])
    assert (later.first_seq, later.seq_lost) == (500, 0)
    out = judge(later, prev=first.state)
    warns = [r for r in out.results if r.status is Status.WARN]
    assert len(warns) == 1 and warns[0].message.startswith("487 kernel log record(s) were lost"), out.results
    assert Status.FAIL not in [r.status for r in out.results]
    # no gap: nothing said
    again = judge(read(tmp_path, monkeypatch, [rec(500), rec(501), rec(502)]), prev=out.state)
    assert [r.status for r in again.results] == [Status.PASS]


def test_records_overwritten_during_the_read_count_too(tmp_path, monkeypatch):
    log = read(tmp_path, monkeypatch, [rec(1), OSError(errno.EPIPE, "Broken pipe"), rec(40)])
    assert (log.first_seq, log.seq_lost) == (1, 38)
    assert "38 kernel log record(s) were lost" in " ".join(r.message for r in judge(log).results)


def test_a_first_run_or_a_new_boot_says_nothing_of_older_records(tmp_path, monkeypatch):
    assert [r.status for r in judge(read(tmp_path, monkeypatch, [rec(9000)])).results] == [Status.PASS]
    first = judge(read(tmp_path, monkeypatch, [rec(10)]))
    moved = read(tmp_path, monkeypatch, [rec(1)])
    moved.boot_id = "another-boot"
    assert [r.status for r in judge(moved, prev=first.state).results] == [Status.PASS]


def test_a_plain_file_copy_of_kmsg_has_no_sequence_to_judge(tmp_path, monkeypatch):
    log = read(tmp_path, monkeypatch, [b"6,1,1000,-;a\n6,5,2000,-;b\n"])  # one chunk holding two records
    assert (log.first_seq, log.seq_lost) == (None, 0)
