"""gpuhc/sources/kernel_log_storage.py: the kernel's disk, NFS and own-state lines, read under
the kernel log's record rules (docs/security.md, "Kernel log"): a record the kernel did not
write is nothing, whatever its text. Lines are the peers' (tests/fixtures/parity/cases.json
cites each case)."""

from __future__ import annotations

from gpuhc.model.kernel import EventKind
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.parity import cases


def peer(case_id: str) -> list[str]:
    return next(c["lines"] for c in cases() if c["id"] == case_id)


def kinds(lines: list[str], **kw) -> list[tuple]:
    return [(e.kind, e.state, e.device) for e in parse_lines(lines, **kw).events]


def test_each_form_names_its_state_and_device():
    assert kinds(peer("gpu181")) == [(EventKind.STORAGE, "md_failed", "sdb3")]
    assert kinds(peer("gpu207")) == [(EventKind.STORAGE, "nvme_disabled", "nvme0")]
    assert kinds(peer("gpu203")) == [(EventKind.STORAGE, "nvme_timeout", "nvme0")]
    assert kinds(peer("gpu189")) == [(EventKind.STORAGE, "fs_readonly", "dm-6")]
    assert kinds(peer("gpu233")) == [(EventKind.NFS, "not_responding", "nfs-prod-01.example.com")]
    assert kinds(peer("gpu236")) == [(EventKind.NFS, "ok", "nfs-prod-01.example.com")]
    assert kinds(peer("gpu172")) == [(EventKind.HOST_KERNEL, "soft_lockup", "CPU18")]
    assert kinds(peer("gpu253")) == [(EventKind.HOST_KERNEL, "file_max", None)]  # dmesg --decode, ISO stamp
    assert kinds(peer("gpu252")) == [(EventKind.HOST_KERNEL, "file_max", None)]  # dmesg --decode --notime


def test_a_panic_names_whether_the_hardware_caused_it():
    def panics(case_id):
        return [e.code for e in parse_lines(peer(case_id)).events if e.kind is EventKind.HOST_KERNEL]

    assert panics("gpu265") == [1]  # Fatal Machine check
    assert panics("gpu263") == [1]  # NMI: Not continuing
    assert panics("gpu264") == [0]  # panic_on_oom
    assert panics("gpu261") == [0]  # VFS: Unable to mount root fs


def test_a_record_the_kernel_did_not_write_is_nothing():
    line = peer("gpu249")[0]  # VFS: file-max limit 1000000 reached
    assert kinds([line]) == [(EventKind.HOST_KERNEL, "file_max", None)]
    # the same text written from user space: a user facility in dmesg --decode, in /dev/kmsg
    assert kinds(["user  :warn  : " + line]) == []
    assert kinds([f"12,4000,1000000,-;{line}"], boot_time=0.0, live=True) == []
    # a task's name first is the task's line (block/blk-core.c prints current->comm)
    assert kinds(peer("gpu212")) == []
