"""The previous boot's panic (gpuhc/sources/prev_boot.py): pstore's dmesg records, else the
previous boot's journal, read once per boot, bounded, never through a link.

The panic lines are leptonai/gpud's test inputs (components/os/kmsg_matcher_test.go at 4a8de33,
tests/fixtures/parity/cases.json: "Fatal Machine check", "Out of memory panic_on_oom",
"Incomplete panic interrupted by new event"), written here in the shapes pstore and journalctl
give them: pstore's "Panic#1 Part1" header (fs/pstore/platform.c) and each line's ``<level>``,
as a dmesg record in pstore holds them; journalctl's ``-o short-iso`` stamp."""

from __future__ import annotations

import os
import stat
import time

import pytest

from gpuhc.checks import kernel_health
from gpuhc.model.kernel import EventKind
from gpuhc.model.result import Status
from gpuhc.sources import prev_boot
from gpuhc.sources.prev_boot import previous_boot_panics
from tests.helpers.panic_lines import MCE, OOM, WHEN
from tests.helpers.snapshots import context, healthy_node

JOURNAL = ["2025-10-16T20:47:19+0000 V09 kernel: Kernel panic - not syncing: hung_task: blocked tasks",
           "2025-10-16T20:47:19+0000 V09 kernel: NMI backtrace for cpu 31 skipped: idling at intel_idle+0x87/0x130"]


def _pstore(tmp_path, **records: list[str]):
    d = tmp_path / "pstore"
    d.mkdir(exist_ok=True)
    for name, lines in records.items():
        f = d / name.replace("_", "-")
        f.write_text("\n".join(lines) + "\n")
        os.utime(f, (WHEN, WHEN))  # pstore stamps each record's file with the record's time
    return str(d)


def _journalctl(tmp_path, body: str) -> str:
    exe = tmp_path / "journalctl"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_pstore_record_gives_the_panic_its_hardware_cause_and_the_records_time(tmp_path):
    (ev,) = previous_boot_panics("boot-2", str(tmp_path / "cache"), _pstore(tmp_path, dmesg_ramoops_0=MCE))
    assert (ev.kind, ev.state, ev.code, ev.time) == (EventKind.HOST_KERNEL, "panic", 1, WHEN)
    (sw,) = previous_boot_panics("boot-3", str(tmp_path / "cache2"), _pstore(tmp_path, dmesg_ramoops_0=OOM))
    assert sw.code == 0  # software's own panic


def test_read_once_per_boot(tmp_path):
    cache, store = str(tmp_path / "cache"), _pstore(tmp_path, dmesg_efi_175620440600001=MCE)
    assert len(previous_boot_panics("boot-2", cache, store)) == 1
    os.remove(os.path.join(store, "dmesg-efi-175620440600001"))  # (systemd-pstore archives the files)
    assert len(previous_boot_panics("boot-2", cache, store)) == 1  # this boot: the cache
    assert previous_boot_panics("boot-3", cache, store, _journalctl(tmp_path, "exit 1")) == []  # a new boot reads again


def test_a_link_a_fifo_and_other_names_in_pstore_are_never_read(tmp_path):
    store = _pstore(tmp_path)
    target = tmp_path / "elsewhere"
    target.write_text("\n".join(MCE) + "\n")
    os.symlink(target, os.path.join(store, "dmesg-ramoops-1"))
    os.mkfifo(os.path.join(store, "dmesg-ramoops-2"))  # a reader that opened it would block here
    (tmp_path / "pstore" / "console-ramoops-0").write_text("\n".join(MCE) + "\n")  # not a dmesg record
    assert previous_boot_panics("b", str(tmp_path / "cache"), store, _journalctl(tmp_path, "exit 1")) == []


def test_a_huge_record_is_read_from_its_end_within_the_bound(tmp_path):
    store = _pstore(tmp_path)
    with open(os.path.join(store, "dmesg-ramoops-0"), "w") as f:
        f.write("<6>[    1.000000] noise\n" * 200_000)  # ~4.6 MB before the panic
        f.write("\n".join(MCE[1:]) + "\n")
    assert [e.code for e in previous_boot_panics("b", None, store)] == [1]


def test_without_pstore_the_previous_boots_journal_is_read(tmp_path):
    exe = _journalctl(tmp_path, "printf '%s\\n' " + " ".join(f"'{line}'" for line in JOURNAL))
    (ev,) = previous_boot_panics("b", None, str(tmp_path / "no-pstore"), exe)
    assert ev.code == 0 and ev.time == pytest.approx(1760647639.0)


def test_a_journalctl_that_never_ends_or_hangs_costs_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(prev_boot, "TIMEOUT_S", 1.0)
    monkeypatch.setattr(prev_boot, "MAX_JOURNAL_BYTES", 1 << 20)
    for body in ("yes 'Oct 16 20:47:19 V09 kernel: noise'", "sleep 30"):
        t0 = time.monotonic()
        assert previous_boot_panics("b", None, str(tmp_path / "none"), _journalctl(tmp_path, body)) == []
        assert time.monotonic() - t0 < 10


def test_an_unsafe_cache_is_not_believed(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / prev_boot.CACHE_FILE).write_text('{"boot_id": "b", "panics": [{"time": 1, "message": "x", "code": 1}]}')
    (cache / prev_boot.CACHE_FILE).chmod(0o666)  # others could have written it
    assert previous_boot_panics("b", str(cache), str(tmp_path / "none"), _journalctl(tmp_path, "exit 1")) == []
    assert stat.S_IMODE(os.stat(cache / prev_boot.CACHE_FILE).st_mode) == 0o644  # written afresh, by the rules


def test_kernel_health_warns_once_per_boot_on_the_live_logs_previous_boot_panic(tmp_path):
    from gpuhc.sources import kernel_log as kl

    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,5000000,-;Linux version 6.8.0\n")
    boot = tmp_path / "boot_id"
    boot.write_text("boot-2\n")
    log = kl.LiveKernelLog(kl.KmsgSource(str(kmsg), boot_id_path=str(boot)),
                           pstore_dir=_pstore(tmp_path, dmesg_ramoops_0=MCE), journalctl=_journalctl(tmp_path, "exit 1"))
    snap = healthy_node(time=WHEN + 600)
    snap.kernel = log.read()
    check = kernel_health.CHECKS[0]
    first = check.judge(snap, context(check, prev={"cursor": {"boot_id": "boot-1"}}))  # the first run after the reboot
    (r,) = first.results
    assert r.status is Status.WARN and r.evidence == "panic-hardware" and "caused by the hardware" in r.message
    snap.kernel = log.read()  # the next run of the same boot: from the cache, and nothing new
    assert [x.status for x in check.judge(snap, context(check, prev=first.state)).results] == [Status.PASS]
    import gpuhc.files.parsecache as pc

    assert os.path.exists(os.path.join(pc.cache_dir(), prev_boot.CACHE_FILE))
