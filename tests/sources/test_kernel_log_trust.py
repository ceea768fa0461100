"""Only the driver speaks for the driver (issue 18, docs/security.md "Kernel log"): records
that are not the kernel's, kernel lines that begin with a process's name, and text that is
not the driver's exact grammar are never events that drain.

Lines shaped like the kernel's own prints, with user-chosen names where the kernel puts a
process name; the real records of this host are in tests/fixtures/kernel_log/real/ and
tests/sources/test_kernel_log_realkernel.py."""

from __future__ import annotations

import json

import pytest

from gpuhc.checks import xid
from gpuhc.model.result import Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.snapshots import context, healthy_node

XID79 = "NVRM: Xid (PCI:0000:5d:00): 79, pid=1, name=x, GPU has fallen off the bus."


@pytest.mark.parametrize("line", [
    "[ 10.0] NVRM Xid()79[6273]: segfault at 0 ip 0000000000401136 sp 00007ffc error 6 in a.out[401000+1000]",
    "[ 10.0] NVRM GPU lost[6273]: segfault at 0 ip 0000000000401136 sp 00007ffc error 6",
    "[ 10.0] NVRM: Xid (PCI:[6273]: segfault at 0 ip 0000000000401136 sp 00007ffc error 6",
    "[ 10.0] traps: NVRM: GPU 0000[6273] general protection fault ip:401136 sp:7ffc error:0",
    "[ 10.0] NVRM: GPU lost/6273: potentially unexpected fatal signal 11.",
    "[ 10.0] NVRM: GPU lost invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
    "[ 10.0] NVRM: GPU lost (6273): drop_caches: 3",
    "[ 10.0] GSP task watchd[6273]: segfault at 0 ip 0000000000401136 sp 00007ffc error 6",
])
def test_kernel_lines_that_begin_with_a_process_name_are_never_driver_evidence(line):
    log = parse_lines([line])
    assert log.events == [] and log.unparsed_lines == 0  # not even a warning: it is not the driver


def test_a_newline_in_text_a_segfault_line_quotes_does_not_start_a_driver_line():
    # the kernel escapes a newline inside one record as \x0a; a file name the segfault line
    # quotes may hold one. The driver's own three-line record still reads.
    forged = "6,10,100,-;a.out[6273]: segfault at 0 ip 1 sp 2 error 6 in x\\x0a" + XID79 + "[401000+1000]"
    dressed = "6,11,100,-;NVRM: Xid (PCI:[6273]: segfault at 0 in x\\x0a" + XID79
    real = ("3,12,200,-;NVRM: The NVIDIA GPU 0000:ba:00.0\\x0aNVRM: (PCI ID: 10de:2330) installed in this system "
            "has\\x0aNVRM: fallen off the bus and is not responding to commands.")
    log = parse_lines([forged, dressed, real])
    assert [(e.kind.value, e.pci, e.seq) for e in log.events] == [("fallen_off_bus", "0000:ba:00.0", 12)]
    # the same in plain dmesg text, where the quoted line goes on unstamped
    log = parse_lines(["[ 10.0] a.out[6273]: segfault at 0 ip 1 sp 2 error 6 in x", XID79 + "[401000+1000]"])
    assert log.events == []


@pytest.mark.parametrize("prefix, kernel", [
    ("0", True), ("3", True), ("7", True),  # facility 0: the kernel's own
    ("8", False), ("12", False), ("14", False), ("30", False), ("191", False),  # user, daemon, local7
])
def test_kmsg_records_count_only_with_the_kernels_facility(prefix, kernel):
    log = parse_lines([f"{prefix},5,100,-;{XID79}"])
    assert [e.code for e in log.events] == ([79] if kernel else [])
    assert log.last_seq == 5  # the cursor still moves past it


@pytest.mark.parametrize("transport, kernel", [("kernel", True), ("syslog", False), ("journal", False),
                                                ("stdout", False), (None, False)])
def test_journal_json_entries_count_only_with_the_kernel_transport(transport, kernel):
    entry = {"MESSAGE": XID79, "__REALTIME_TIMESTAMP": "1700000000123456", "SYSLOG_IDENTIFIER": "kernel"}
    if transport:
        entry["_TRANSPORT"] = transport
    log = parse_lines([json.dumps(entry)])
    assert [(e.code, e.time) for e in log.events] == ([(79, 1700000000.123456)] if kernel else [])
    assert log.last_time == 1700000000.123456


def test_journal_json_message_as_bytes_and_bad_entries():
    raw = list((XID79 + " \xff").encode("latin-1"))
    log = parse_lines([json.dumps({"_TRANSPORT": "kernel", "MESSAGE": raw, "__REALTIME_TIMESTAMP": "1"}),
                       '{"_TRANSPORT": "kernel", "MESSAGE": 5}', '{"broken": ', "{}", "[1, 2]"])
    assert [e.code for e in log.events] == [79] and log.unparsed_lines == 0


@pytest.mark.parametrize("line, kernel", [
    ("Mar 29 15:38:59 host kernel: " + XID79, True),
    ("Mar 29 15:38:59 host kernel[4242]: " + XID79, False),  # the kernel has no pid: logger -t kernel
    ("Mar 29 15:38:59 host mytool: " + XID79, False),
    ("Mar 29 15:38:59 host mytool[12]: " + XID79, False),
    ("kern  :err   : [ 12.0] " + XID79, True),  # dmesg --decode names the facility
    ("user  :err   : [ 12.0] " + XID79, False),
    ("daemon:warn  : 2025-01-21T02:21:33,498559+00:00 " + XID79, False),
    ("10.0.0.5: user: warning: [2026-04-22T21:30:51.5Z]: " + XID79, False),  # talosctl dmesg
    ("10.0.0.5: kern: warning: [2026-04-22T21:30:51.5Z]: " + XID79, True),
    ("gpud[812]: " + XID79, False),  # bare, with a program's tag
    ("kernel: " + XID79, True),
])
def test_syslog_decode_and_talos_lines_count_only_when_they_name_the_kernel(line, kernel):
    assert [e.code for e in parse_lines([line], year=2026).events] == ([79] if kernel else [])


def test_a_forged_or_edited_xid_warns_and_never_drains():
    snap = healthy_node(time=2000.0)
    snap.kernel = parse_lines(["[ 1999.0] NVRM: Xid (PCI:0000:5d:00) 79, GPU has fallen off the bus.",
                               "[ 1999.1] NVRM: Xid (PCI:...): 48, DBE"])
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert [r.status for r in out.results] == [Status.WARN]
    assert "never drain" in out.results[0].message


def test_the_drivers_own_lines_still_fail():
    snap = healthy_node(time=2000.0)  # gpu3 is 0000:5d:00.0
    snap.kernel = parse_lines(["[ 1999.0] " + XID79, "[ 1999.5] NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."])
    out = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))
    assert [(r.status, r.subject) for r in out.results] == [(Status.FAIL, "gpu3")]


def _export(transport: str | None, message: str, usec: str = "1700000000123456") -> list[str]:
    fields = [f"__CURSOR=s=0b1c;i={len(message)}", f"__REALTIME_TIMESTAMP={usec}", "__MONOTONIC_TIMESTAMP=99",
              "SYSLOG_IDENTIFIER=kernel"]
    return fields + ([f"_TRANSPORT={transport}"] if transport else []) + [f"MESSAGE={message}", ""]


@pytest.mark.parametrize("transport, kernel", [("kernel", True), ("syslog", False), ("stdout", False), (None, False)])
def test_journal_export_entries_count_only_with_the_kernel_transport(transport, kernel):
    log = parse_lines(_export(transport, XID79))
    assert [(e.code, e.time) for e in log.events] == ([(79, 1700000000.123456)] if kernel else [])


def test_journal_export_entries_in_a_row_and_one_cut_off_at_the_end():
    lines = _export("syslog", XID79) + _export("kernel", XID79.replace("5d:00", "18:00"), "1700000001000000")
    lines += _export("kernel", "NVRM: Xid (PCI:0000:19:00): 48, DBE")[:-1]  # no blank line after the last
    log = parse_lines(lines)
    assert [(e.code, e.pci) for e in log.events] == [(79, "0000:18:00.0"), (48, "0000:19:00.0")]
    assert log.last_time == 1700000001.0


def test_a_journal_entry_holding_a_quoted_newline_reads_like_its_kmsg_record():
    forged = {"_TRANSPORT": "kernel", "__REALTIME_TIMESTAMP": "1700000000000000",
              "MESSAGE": "a.out[6273]: segfault at 0 ip 1 sp 2 error 6 in x\n" + XID79}
    real = {"_TRANSPORT": "kernel", "__REALTIME_TIMESTAMP": "1700000001000000",
            "MESSAGE": "NVRM: The NVIDIA GPU 0000:ba:00.0\nNVRM: (PCI ID: 10de:2330) installed in this system has\n"
                       "NVRM: fallen off the bus and is not responding to commands."}
    log = parse_lines([json.dumps(forged), json.dumps(real)])
    assert [(e.kind.value, e.pci) for e in log.events] == [("fallen_off_bus", "0000:ba:00.0")]
