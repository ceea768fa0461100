"""The kernel-log reader decides each line's shape by itself (gpuhc/sources/kernel_log_parse.py,
kernel_log_prefix.py): a cut first line, ``dmesg -H`` relative stamps, syslog priorities and
RFC 5424, and records behind one wrapper in a recording (never on a live source). Fixtures:
tests/fixtures/kernel_log/shapes/ (README: which are real lines and which real records
re-stamped)."""

from __future__ import annotations

import os

import pytest

from gpuhc.checks import xid
from gpuhc.model.kernel import EventKind
from gpuhc.model.result import Status
from gpuhc.sources import kernel_log_parse
from gpuhc.sources.kernel_log_file import read_file
from gpuhc.sources.kernel_log_parse import parse_lines
from gpuhc.sources.kernel_log_record import KernelRecord
from tests.helpers.snapshots import context, healthy_node

SHAPES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "kernel_log", "shapes")
# A real record (congphase/my-t450s troubleshoot_log.md, quoting nvidia-bug-report.log)
T450S = "Mar 21 20:18:56 pc kernel: [   65.315783] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, " \
        "GPU has fallen off the bus."


def _lines(name: str) -> list[str]:
    with open(os.path.join(SHAPES, name), encoding="utf-8") as f:
        return f.read().split("\n")


def test_a_cut_first_line_never_hides_the_xid_after_it():
    log = read_file(os.path.join(SHAPES, "cut_first_line_dmesg_xid79_gpud.log"))
    assert [e.code for e in log.events if e.kind is EventKind.XID] == [79] and log.unread_lines == 0


def test_a_cut_ctime_first_line_keeps_its_date_so_the_replay_judges_the_xid():
    log = read_file(os.path.join(SHAPES, "cut_first_line_dmesg_T_xid119_gpud.log"))
    assert log.last_time == max(e.time for e in log.events)  # the cut line did not move "now" a year on
    snap = healthy_node(time=log.last_time + 1)  # a replay judges at the log's latest time
    snap.kernel = log
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert any("119" in r.message and r.status is not Status.PASS for r in out.results), out.results


def test_a_line_with_no_shape_is_named_by_count_and_first_line_and_hides_nothing():
    lines = ["GPU-509665ad-b600-ac93-3616-d754b23d636d", "[Sun Feb 23 16:24:18 2025] NVRM: GPU Board Serial Number: 1",
             "stray text a person typed", "[Sun Feb 23 16:24:19 2025] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, y"]
    log = parse_lines(lines)
    assert (log.unread_lines, log.unread_first_line) == (2, 1)
    assert [e.code for e in log.events] == [79]
    assert parse_lines(["NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, y"]).unread_lines == 0  # bare text: a shape


def test_dmesg_H_dates_each_line_from_its_anchor_and_reads_aer_and_mce():
    log = parse_lines(_lines("dmesg_H_aer_fatal_mce_storm_restamped.log"), year=2026)
    aer = [e for e in log.events if e.kind is EventKind.AER]
    mce = [e for e in log.events if e.kind is EventKind.MCE]
    assert {e.state for e in aer} >= {"fatal", "recovery_failed"}
    assert any(e.state == "uncorrected" for e in mce)
    anchor = parse_lines(["[Dec 4 10:00] x"], year=2026).last_time
    assert anchor is not None and all(anchor <= e.time < anchor + 120 for e in aer + mce)
    assert log.relative_unanchored == 0


def test_dmesg_H_without_an_anchor_is_judged_as_recent_and_says_so():
    log = parse_lines(_lines("dmesg_H_no_anchor_aer_fatal_restamped.log"))
    assert log.relative_unanchored == 8 and 0 < log.last_time < 1
    assert any(e.state == "fatal" for e in log.events if e.kind is EventKind.AER)


def test_a_quoted_record_is_read_from_a_recording_and_never_from_a_live_source():
    lines = _lines("quoted_markdown_syslog_xid79_t450s.log")
    assert [(e.kind, e.code) for e in parse_lines(lines).events] == [(EventKind.XID, 79)]
    assert parse_lines(lines, live=True).events == []


@pytest.mark.parametrize("wrapper", [
    "2025-03-21T20:18:57.012Z logrelay fluent-bit[4242]: ",  # a relay's own syslog line (constructed)
    "kern.log.1:",  # grep -H over rotated logs
    "> > ",  # a mail quoted twice
])
def test_a_relayed_record_counts_in_a_recording_only(wrapper):
    assert [e.code for e in parse_lines([wrapper + T450S]).events] == [79]
    assert parse_lines([wrapper + T450S], live=True).events == []


# A real raw dmesg record (tests/fixtures/kernel_log/real/06_..., leptonai/gpud's README), its
# since-boot stamp its own
RAW_XID79 = _lines(os.path.join("..", "real", "06_dmesg_xid79_fallen_off_bus_with_sxid20034_gpud_readme.log"))[2]


@pytest.mark.parametrize("wrapper", [
    # rsyslog's RSYSLOG_TraditionalFileFormat (``%TIMESTAMP% %HOSTNAME% %syslogtag%%msg%``, rsyslog
    # docs, "Reserved template names") around a line that imfile (its ``Tag`` parameter) or a
    # fluent-bit tail input read from a file of plain ``dmesg`` output: the relay's own syslog line
    "Mar 21 20:18:57 relay fluent-bit[4242]: ",
    "Mar 21 20:18:57 relay dmesg-follow: ",  # imfile's Tag="dmesg-follow:", no pid
    "host1 ",  # a collector's host column
])
def test_a_relays_line_around_a_raw_since_boot_record_reads_the_records_own_stamp(wrapper):
    log = parse_lines([wrapper + RAW_XID79], year=2025)
    assert [(e.code, e.time) for e in log.events] == [(79, 6781741.548779)]  # the record's clock, not the relay's
    assert parse_lines([wrapper + RAW_XID79], live=True).events == []


def test_the_kernels_own_syslog_copy_keeps_its_wall_clock_stamp():
    (ev,) = parse_lines(["2025-03-21T20:18:57Z logrelay fluent-bit[4242]: " + T450S], year=2025).events
    assert ev.time == parse_lines(["Mar 21 20:18:56 x"], year=2025).last_time  # "pc kernel: [ 65.3]": syslog's


RECORD = T450S.split("] ", 1)[1]


@pytest.mark.parametrize("line, codes", [
    ("kern.log:2025-03-21T20:18:56.315783+00:00 pc kernel: " + RECORD, [79]),  # grep -H over rsyslog's ISO files
    ("kern.log.1:12:2025-03-21T20:18:56+0000 pc kernel: " + RECORD, [79]),  # grep -Hn, journalctl -o short-iso
    ("syslog:<4>1 2025-03-21T20:18:56Z pc kernel - - - " + RECORD, [79]),  # grep -H over RFC 5424
    ("syslog:<14>1 2025-03-21T20:18:56Z pc kernel - - - " + RECORD, []),  # ... of the user facility
    ("kern.log:2025-03-21T20:18:56+00:00 pc gpud[9]: " + RECORD, []),  # a program's line, no stamp of its own
])
def test_grep_H_over_iso_and_rfc5424_logs_reads_the_kernels_records_only(line, codes):
    assert [e.code for e in parse_lines([line]).events] == codes
    assert parse_lines([line], live=True).events == []


@pytest.mark.parametrize("line", [
    "user  :err   : " + T450S.split("kernel: ", 1)[1],  # dmesg --decode of a user-space record
    "<14>[   65.315783] " + T450S.split("] ", 1)[1],  # dmesg -r of a user-space record
    "<14>1 2025-03-21T20:18:56Z pc kernel - - - " + T450S.split("] ", 1)[1],  # RFC 5424, user facility
    "Mar 21 20:18:56 pc gpud[9]: NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, GPU has fallen off the bus.",
])
def test_a_record_a_facility_names_as_a_programs_or_with_no_stamp_of_its_own_is_not_unwrapped(line):
    assert parse_lines([line]).events == []


@pytest.mark.parametrize("line", [
    "<4>[   65.315783] " + T450S.split("] ", 1)[1],  # dmesg -r
    "<4>" + T450S,  # RFC 3164 with its priority
    "<4>1 2025-03-21T20:18:56.315783+00:00 pc kernel - - - " + T450S.split("] ", 1)[1],  # RFC 5424
    "<4>1 2025-03-21T20:18:56Z pc kernel - - [meta seq=\"1\"] " + T450S.split("] ", 1)[1],
    "2025-03-21T20:18:56.315783+0000 pc kernel: " + T450S.split("] ", 1)[1],  # journalctl -o short-iso-precise
    "Mar 21 20:18:56.315783 pc kernel: " + T450S.split("] ", 1)[1],  # journalctl -o short-precise
])
def test_syslog_priorities_and_rfc5424_read_the_kernels_records(line):
    assert [e.code for e in parse_lines([line], year=2025).events] == [79]


# One real healthy kernel line (../realdata 04, leptonai/gpud PR 1209) re-stamped in every shape.
HEALTHY = "workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times, consider switching to WQ_UNBOUND"


@pytest.mark.parametrize("prefix", [
    "[  117.984502] ", "[Sun Feb 23 16:24:18 2025] ", "2024-11-15T05:39:15,491363+00:00 ", "[Dec 4 10:00] ",
    "[  +0.000844] ", "Feb 14 05:03:41 000-000-00000-1-gpu-1 kernel: ", "2025-02-14T05:03:41+0000 gpu-1 kernel: ",
    "Feb 14 05:03:41.123456 gpu-1 kernel: ", "<6>Feb 14 05:03:41 gpu-1 kernel: ", "<6>1 2025-02-14T05:03:41Z gpu-1 kernel - - - ",
    "6,3964,206764307,-;", "> [Sun Feb 23 16:24:18 2025] ",
])
def test_a_healthy_log_in_every_shape_is_read_clean(prefix):
    log = parse_lines([prefix + HEALTHY] * 3, year=2025)
    assert (log.events, log.unread_lines, log.unparsed_lines) == ([], 0, 0) and log.last_time is not None


def test_a_record_reader_receives_each_record_with_its_time_and_whether_the_kernel_wrote_it(monkeypatch):
    got: list[KernelRecord] = []

    class Probe:
        words = ("hogged CPU",)

        def wants(self, text: str) -> bool:
            return "hogged" in text or "segfault" in text

        def feed(self, rec: KernelRecord):
            got.append(rec)

    monkeypatch.setattr(kernel_log_parse, "READERS", (Probe,))
    parse_lines(["[  1.5] " + HEALTHY, "[  2.5] a.out[7]: segfault at 0 ip 1 sp 2 error 6 hogged",
                 "relay: [  3.5] " + HEALTHY])
    assert [(r.time, r.kernel, r.wrapped) for r in got] == [(1.5, True, False), (2.5, False, False), (3.5, True, True)]


def test_the_xid_check_says_when_relative_stamps_had_no_anchor():
    lines = [ln.replace("nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)", T450S.split("] ", 1)[1])
             for ln in _lines("dmesg_H_no_anchor_aer_fatal_restamped.log")]
    snap = healthy_node(time=2e9)
    snap.kernel = parse_lines(lines)
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert any("judged as recent" in r.message and r.status is Status.WARN for r in out.results)
    assert any(r.status is Status.FAIL for r in out.results)  # the Xid 79 in them still counts
