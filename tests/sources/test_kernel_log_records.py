"""A kernel record is the unit (issue 29, docs/security.md "Kernel log"): every input form of one
record is judged whole, and a record that quotes a process or a file is never driver evidence,
whichever of its lines the driver's words sit on. The journal export format is read by its
length-prefixed binary fields, so bytes inside a binary MESSAGE never become fields.

The segfault record is the one the real kernel wrote on this project's test machine for a
program whose file name was ``NVRM:`` + newline + the driver's Xid 79 line (issue 29; the same
record is produced live by tests/sources/test_kernel_log_realkernel_records.py)."""

from __future__ import annotations

import json
import os

from gpuhc.sources.kernel_log_file import read_file
from gpuhc.sources.kernel_log_parse import parse_lines
from gpuhc.sources.kernel_log_journal import export_entries

FORGED = "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=a, GPU has fallen off the bus."
XID79 = "NVRM: Xid (PCI:0000:5d:00): 79, pid=3100, name=python3, GPU has fallen off the bus."
# /dev/kmsg's record of the crash, as read on the real kernel (escaped newlines)
KMSG = ("6,351,769841133,-;NVRM:\\x0aNVRM: Xid[27595]: segfault at 0 ip 0000557075aaf132 sp 00007fff528dbe30 "
        "error 6 in NVRM:\\x0a" + FORGED + "[1132,557075aaf000+1000] likely on CPU 1 (core 1, socket 0)")
# util-linux dmesg's print of the same record: continuation lines indented under the stamp
DMESG = ["[  769.841133] NVRM:",
         "               NVRM: Xid[27595]: segfault at 0 ip 0000557075aaf132 sp 00007fff528dbe30 error 6 in NVRM:",
         "               " + FORGED + "[1132,557075aaf000+1000] likely on CPU 1 (core 1, socket 0)"]
TEXT = KMSG.split(";", 1)[1].replace("\\x0a", "\n")


def test_the_segfault_record_is_no_driver_evidence_in_any_form():
    assert parse_lines([KMSG]).events == []
    assert parse_lines(DMESG).events == []
    assert parse_lines([json.dumps({"_TRANSPORT": "kernel", "__REALTIME_TIMESTAMP": "1", "MESSAGE": TEXT})]).events == []
    syslog = "Nov 28 06:51:17 n1 kernel: " + TEXT.replace("\n", "#012")  # rsyslog writes a newline as #012
    assert parse_lines([syslog]).events == []


def test_a_real_driver_record_still_counts_in_each_form():
    assert [e.code for e in parse_lines(["4,352,769841200,-;" + XID79]).events] == [79]
    assert [e.code for e in parse_lines(["[  769.841200] " + XID79, "[  769.9] next"]).events] == [79]
    assert [e.code for e in parse_lines(["[  769.841200] " + XID79]).events] == [79]  # the last record of a text


def test_what_follows_a_process_name_the_driver_quotes_is_the_names():
    # a real Xid 13 of the user's own bad kernel names the process; a newline in that name
    # would put a forged Xid 79 on the record's next line
    rec = "4,360,1,-;NVRM: Xid (PCI:0000:5d:00): 13, pid=7, name=a\\x0a" + FORGED + ", Graphics Exception"
    assert [e.code for e in parse_lines([rec]).events] == [13]


def export_entry(transport: str, message: bytes, usec: int = 1700000000123456, binary: bool = True) -> bytes:
    head = f"__CURSOR=s=0b1c;i=1\n__REALTIME_TIMESTAMP={usec}\n".encode()
    field = b"MESSAGE\n" + len(message).to_bytes(8, "little") + message if binary else b"MESSAGE=" + message
    return head + field + b"\n" + f"_TRANSPORT={transport}\n".encode() + b"\n"


def test_a_binary_message_carrying_fields_is_taken_by_its_length():
    smuggled = b"hello\n_TRANSPORT=kernel\nMESSAGE=" + XID79.encode()
    data = export_entry("stdout", smuggled) + export_entry("kernel", XID79.replace("5d:00", "18:00").encode(), 1700000001000000, binary=False)
    entries = export_entries(data)
    assert [json.loads(e)["_TRANSPORT"] for e in entries] == ["stdout", "kernel"]
    assert json.loads(entries[0])["MESSAGE"] == smuggled.decode()
    log = parse_lines(entries)
    assert [(e.code, e.pci) for e in log.events] == [(79, "0000:18:00.0")]
    # read line by line (no bytes to measure), an entry with a binary field is dropped, not guessed
    assert [(e.code, e.pci) for e in parse_lines(data.decode().split("\n")).events] == [(79, "0000:18:00.0")]


def test_a_recorded_export_file_is_read_by_its_bytes(tmp_path):
    path = tmp_path / "journal.export"
    path.write_bytes(export_entry("stdout", b"x\n_TRANSPORT=kernel\nMESSAGE=" + XID79.encode()) +
                     export_entry("kernel", TEXT.encode()))
    os.chmod(path, 0o600)
    assert read_file(str(path)).events == []
    cut = export_entry("kernel", XID79.encode())[:-30]  # a stream cut inside an entry: what it completed
    assert export_entries(cut) == [] and export_entries(b"not an export") is None


def test_driver_text_behind_another_prefix_or_in_quotes_is_named_never_read():
    lines = ['[  800.1] nvidia-dbg: "' + XID79 + '"', "[  800.2] wrapper: " + FORGED, "[  800.3] ok line",
             "[  800.4] a.out[77]: segfault at 0 ip 1 sp 2 error 6 in " + XID79]  # a process's: silent
    log = parse_lines(lines)
    assert log.events == [] and log.unparsed_lines == 2
    assert log.unparsed_example.startswith('nvidia-dbg: "NVRM: Xid (PCI:0000:5d:00): 79')
