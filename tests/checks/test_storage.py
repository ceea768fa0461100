"""storage and kernel-health (gpuhc/checks/storage.py, kernel_health.py) on the kernel's own
lines: the peers' test lines (tests/fixtures/parity/cases.json cites each case's peer, file,
commit and test; gpud labels 202, 206, 210, 215, 220 and 231 "real example"). A local disk's
fault fails at once; the NFS server's trouble drains only once held over runs; an NFS server
that says OK again, say nothing (the shipped config on the healthy recordings:
tests/project/test_shipped_config_healthy.py)."""

from __future__ import annotations

import pytest

from gpuhc.checks import kernel_health, storage
from gpuhc.checks.storage import local_device
from gpuhc.model.result import Action, Status
from gpuhc.run.hold import hold
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.parity import cases
from tests.helpers.snapshots import context, healthy_node

STORAGE, HEALTH = storage.CHECKS[0], kernel_health.CHECKS[0]


def peer(*ids: str) -> list[str]:
    by_id = {c["id"]: c["lines"] for c in cases()}
    return [line for i in ids for line in by_id[i]]


def judge(check, lines: list[str], prev: dict | None = None, now: float | None = None):
    snap = healthy_node()
    snap.kernel = parse_lines(lines)
    snap.kernel.boot_id = "boot-a"
    snap.time = now or snap.kernel.last_time or snap.time
    return check.judge(snap, context(check, prev=prev))


def brief(out) -> list[tuple]:
    return [(r.status, r.action, r.subject, r.evidence) for r in out.results]


@pytest.mark.parametrize("case, device, what", [
    ("gpu174", "nvme0n1p1", "md array member failed"),  # RAID0's "detected, failing array."
    ("gpu206", "nvme4", "NVMe controller disabled after a failed reset"),
    ("gpu215", "dm-0", "I/O error"),  # Buffer I/O error
    ("gpu220", "dm-0", "I/O error"),  # ext4's superblock write
    ("gcm353", "nvme2n1", "I/O error"),  # the block layer's, three lines: one incident
    ("gpu182", "md0", "file system gone read-only"),
])
def test_a_local_disks_fault_fails_at_once_with_a_ticket(case, device, what):
    out = judge(STORAGE, peer(case))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_TICKET, device, "disk")]
    assert what in out.results[0].message
    # held: the next run, the same log, still fails (a degraded array does not heal itself)
    again = judge(STORAGE, peer(case), prev=out.state)
    assert [r.status for r in again.results] == [Status.FAIL]


def test_an_nvme_namespace_without_a_path_is_the_fabrics_evidence_held_before_it_drains():
    # native multipath says it for NVMe over fabrics as for a local drive; a local drive that is
    # gone also says "Disabling device after reset failure", which fails at once
    out = judge(STORAGE, peer("gpu193"))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_TICKET, "nvme0n1", "remote-storage")]
    assert "NVMe namespace nvme0n1 lost every path" in out.results[0].message
    held, _ = hold(out.results, None, 1_751_000_000.0, None)
    assert [r.status for r in held] == [Status.WARN]


def test_an_nvme_timeout_warns_and_the_failed_reset_after_it_fails():
    timeout = judge(STORAGE, peer("gpu202"))
    assert brief(timeout) == [(Status.WARN, Action.NONE, "nvme4", "disk")]
    out = judge(STORAGE, peer("gpu202", "gpu206"))  # the same controller, eight minutes later
    assert [(r.status, r.subject) for r in out.results] == [(Status.FAIL, "nvme4"), (Status.WARN, "nvme4")]


def _runs(lines: list[str], minutes: list[float]) -> list:
    """One run of storage per minute given, through the evidence holds as the runner applies them.
    The live node's log: its records carry the time /dev/kmsg gives them (a minute before the
    first run), which the peer's bare line does not; the rest is the line as parsed."""
    from dataclasses import replace

    t0 = 1_751_000_000.0
    log = parse_lines(lines)
    log.events = [replace(e, time=t0 - 60) for e in log.events]
    log.boot_id = "boot-a"
    prev, held, seen = None, None, []
    for m in minutes:
        t = t0 + m * 60
        snap = healthy_node(time=t)
        snap.kernel = log
        out = STORAGE.judge(snap, context(STORAGE, prev=prev))
        results, held = hold(out.results, held, t, None)
        prev = out.state
        seen.append(results)
    return seen


def test_an_nfs_server_not_responding_warns_and_drains_only_once_held_over_runs():
    lines = peer("gpu232")  # nfs: server 7.247.192.16 not responding, timed out
    seen = _runs(lines, [0, 5, 10, 15])
    assert [[r.status for r in rs] for rs in seen] == [[Status.WARN]] * 3 + [[Status.FAIL]]
    assert "drains when held 3 runs over 15 min" in seen[0][0].message
    assert (seen[-1][0].action, seen[-1][0].evidence) == (Action.DRAIN_TICKET, "remote-storage")


def test_an_nfs_server_that_answers_again_clears_it_and_a_lock_reclaim_failure_only_warns():
    # the same server's OK line after it (gpud's "server OK" case)
    assert [r.status for r in judge(STORAGE, peer("gpu232", "gpu235")).results] == [Status.PASS]
    out = judge(STORAGE, peer("gpu237"))
    assert brief(out) == [(Status.WARN, Action.NONE, "node", "remote-storage")]
    assert [r.status for r in judge(STORAGE, peer("gpu237"), prev=out.state).results] == [Status.PASS]  # once


def test_lines_not_the_kernels_are_nothing():
    # XFS/Btrfs never print ext4's words; RAID1 prints "disabling device."; a task's name first
    for case in ("gpu187", "gpu188", "gpu190", "gpu177", "gpu210", "gpu197", "gpu238"):
        assert [r.status for r in judge(STORAGE, peer(case)).results] == [Status.PASS], case


def test_which_block_devices_are_the_nodes_own():
    assert all(local_device(d) for d in ("sda1", "nvme0n1p1", "dm-0", "md0", "nvme4"))
    assert not any(local_device(d) for d in ("nbd0", "rbd3", "drbd1", "loop7", "zram0", "sr0", None, ""))


@pytest.mark.parametrize("case, what, evidence", [
    ("gpu171", "soft lockup", "kernel-health"),
    ("gpu264", "kernel panic (a previous boot's)", "kernel-health"),  # panic_on_oom: software
    ("gpu265", "kernel panic (a previous boot's) caused by the hardware", "panic-hardware"),  # Fatal Machine check
    ("gpu263", "kernel panic (a previous boot's) caused by the hardware", "panic-hardware"),  # NMI: Not continuing
    ("gpu249", "file-max limit reached", "kernel-health"),
])
def test_the_kernels_own_state_warns_once(case, what, evidence):
    out = judge(HEALTH, peer(case))
    assert brief(out) == [(Status.WARN, Action.NONE, "node", evidence)]
    assert out.results[0].message.startswith(what)
    assert [r.status for r in judge(HEALTH, peer(case), prev=out.state).results] == [Status.PASS]


def _fixture(name: str) -> list[str]:
    from tests.helpers.paths import FIXTURES

    return (FIXTURES / "node" / name).read_text().splitlines()


def test_dmesg_H_deltas_without_an_anchor_are_judged_as_recent_and_a_bad_sector_fails():
    # jfikar/HDD-repair README: `dmesg` with relative stamps, no absolute anchor (a grep of it)
    lines = _fixture("dmesg_H_no_anchor_critical_medium_error_hdd_repair.log")
    log = parse_lines(lines)
    assert log.relative_unanchored == len(lines)  # said in the report: undated deltas, read as recent
    out = judge(STORAGE, lines)
    assert brief(out) == [(Status.FAIL, Action.DRAIN_TICKET, "sdd", "disk")]
    assert "I/O error x12" in out.results[0].message and "critical medium error" in out.results[0].message


def test_dmesg_H_quoted_in_mail_dates_each_report_from_its_anchor_and_a_hang_outside_the_gpu_driver_warns():
    from gpuhc.checks import hung_task

    # linux-bluetooth, 2022-05-30 (a reply quoting the report with "> "): [May29 12:23], then deltas
    lines = _fixture("dmesg_H_quoted_hung_rfcomm_linux_bluetooth.log")
    log = parse_lines(lines, year=2022)
    hung = [e for e in log.events if e.kind.value == "hung_task"]
    assert [(e.device, e.state) for e in hung] == [("krfcommd", "rfcomm kernel"), ("a.out", "rfcomm kernel")]
    import datetime

    first = datetime.datetime.fromtimestamp(hung[0].time)
    assert (first.month, first.day, first.hour, first.minute) == (5, 29, 12, 23)
    assert 0 < hung[1].time - hung[0].time < 0.001  # the deltas add up from the anchor
    check = hung_task.CHECKS[0]
    snap = healthy_node(time=hung[-1].time + 60)
    snap.kernel = log
    out = check.judge(snap, context(check))
    assert [(r.status, r.evidence) for r in out.results] == [(Status.WARN, "stuck-process")] * 2


def test_an_xfs_shutdown_fails_the_disk_it_is_on():
    # linux-xfs, 2024-06-03: the superblock write verifier finds corruption; XFS shuts down
    out = judge(STORAGE, _fixture("xfs_shutdown_linux_xfs_sb_fdblocks.log"))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_TICKET, "dm-4", "disk")]
    assert "file system gone read-only or shut down" in out.results[0].message


def test_btrfs_forced_readonly_fails_the_disk_and_the_mailers_wraps_are_named():
    # linux-btrfs, 2020-11-02: a transaction aborted, the file system forced read-only
    lines = _fixture("btrfs_forced_readonly_linux_btrfs_mail.log")
    assert parse_lines(lines).unread_lines == 4  # the wrapped halves, named, never read as records
    assert brief(judge(STORAGE, lines)) == [(Status.FAIL, Action.DRAIN_TICKET, "sdf", "disk")]


def test_an_io_error_on_a_disk_the_kernel_attached_as_removable_only_warns():
    # stlink-org/stlink, src/stlink-lib/sg.c: a dmesg in a comment; a 32 MB USB mass-storage
    # device attached as removable, then read past its end (2.6-era end_request / "on device")
    lines = _fixture("removable_usb_io_error_stlink.log")
    out = judge(STORAGE, lines)
    assert brief(out) == [(Status.WARN, Action.NONE, "sdb", "disk")]
    assert "removable disk" in out.results[0].message and "x3" in out.results[0].message
    # without the line that attached it as removable, the same errors are the node's disk
    no_attach = [line for line in lines if "removable" not in line]
    assert brief(judge(STORAGE, no_attach)) == [(Status.FAIL, Action.DRAIN_TICKET, "sdb", "disk")]
