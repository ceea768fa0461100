"""The stuck-process reader (gpuhc/sources/host_stuck.py, through gpuhc/sources/host.py) on a
/proc tree in a directory. Wait channels are real ones from public reports, cited where used."""

from __future__ import annotations

import pytest

from gpuhc.checks import host
from gpuhc.sources.host import HostLive, settings_for
from gpuhc.sources.host_stuck import MAX_STUCK, wait_class
from tests.helpers.fake_proc import FakeProc

LISTS = settings_for({"host": host.CHECKS[0].defaults})["dstate_wchan"]


def live(tmp_path) -> HostLive:
    return HostLive(settings_for({"host": host.CHECKS[0].defaults}), str(tmp_path))


@pytest.mark.parametrize("wchan, cls", [
    # in the driver: os_acquire_rwlock_write is where RM's lock waits (NVIDIA/open-gpu-kernel-modules#968),
    # uvm_page_tree_get_ptes_async where UVM's mutex did (rwth-i6/returnn#1480)
    ("os_acquire_rwlock_write", "gpu-driver"), ("uvm_page_tree_get_ptes_async", "gpu-driver"),
    ("nv_open_device", "gpu-driver"), ("nvidia_ioctl", "gpu-driver"),
    # FUSE: request_wait_answer (hanwen/go-fuse#261's /proc/<pid>/stack), fuse_wait_aborted (libfuse/libfuse#509)
    ("request_wait_answer", "fuse"), ("request_wait_answer.isra.0", "fuse"), ("fuse_wait_aborted", "fuse"),
    ("rpc_wait_bit_killable", "file-system"), ("nfs_wait_bit_killable", "file-system"),
    # kernel functions that merely contain a driver's letters: the substring match took them
    ("nvme_poll", None), ("nvme_submit_user_cmd", None), ("invalidate_inode_pages2_range", None),
    ("ll_back_merge_fn", None), ("unix_wait_for_peer", None), ("do_fuse_thing", None),
    ("0", None), ("", None),
])
def test_wait_channels_match_whole_prefixes_or_whole_names(wchan, cls):
    assert wait_class(wchan, LISTS) == cls


def test_a_whole_name_entry_is_no_prefix():
    lists = {"fuse": ["request_wait_answer"], "gpu-driver": ["nv"]}
    assert wait_class("request_wait_answer_x", lists) is None
    assert wait_class("nvme_poll", lists) is None and wait_class("nv", lists) == "gpu-driver"


def test_a_killable_sleep_the_kernel_does_not_count_as_blocked_is_seen(tmp_path):
    """procs_blocked is 0 (a TASK_KILLABLE sleep is no I/O wait), yet the process's stat says D:
    read it, with its progress sample and the GPU files it holds."""
    proc = FakeProc(tmp_path, blocked=0)
    proc.process(4242, "python", "D", "os_acquire_rwlock_write", cpu=9000, switches=777,
                 fds=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia3", "/home/u/log.txt"))
    proc.process(4300, "bash", "S", "do_wait")
    proc.process(4301, "nvidia-smi", "D", "os_acquire_mutex", fds=("/dev/nvidiactl",))
    got = sorted(live(tmp_path).read().dstate, key=lambda p: p["pid"])
    assert got == [
        {"pid": 4242, "start": 12345, "comm": "python", "wchan": "os_acquire_rwlock_write", "wait": "gpu-driver",
         "cpu": 9000, "switches": 777, "holds_gpu": True},
        {"pid": 4301, "start": 12345, "comm": "nvidia-smi", "wchan": "os_acquire_mutex", "wait": "gpu-driver",
         "cpu": 100, "switches": 50, "holds_gpu": False},  # /dev/nvidiactl alone is every NVML client's
    ]


def test_waits_in_no_listed_function_and_running_processes_are_left_out(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(10, "tar", "D", "ext4_sync_file")
    proc.process(11, "cp", "R", "0")
    proc.process(12, "ls", "D", "request_wait_answer")
    got = live(tmp_path).read().dstate
    assert [(p["pid"], p["wait"]) for p in got] == [(12, "fuse")]
    assert "holds_gpu" not in got[0]  # the fd walk is for the driver's waits only


def test_what_a_user_writes_is_read_bounded_and_escaped(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(20, "x) D 1 2\x1b[31m", "D", "fuse_" + "a" * 5000)
    (p,) = live(tmp_path).read().dstate
    assert p["wait"] == "fuse" and len(p["wchan"]) <= 67  # 64 and an ellipsis
    assert p["comm"].isprintable() and "\x1b" not in p["comm"]


def test_a_progress_counter_not_there_is_unknown_not_zero(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(30, "python", "D", "nv_wait_open_complete_interruptible")
    (tmp_path / "proc/30/status").write_text("Name:\tpython\nState:\tD (disk sleep)\n")
    (p,) = live(tmp_path).read().dstate
    assert p["switches"] is None and p["cpu"] == 100


def test_at_most_so_many_stuck_processes_are_sampled(tmp_path):
    proc = FakeProc(tmp_path)
    for pid in range(100, 100 + MAX_STUCK + 20):
        proc.process(pid, "ls", "D", "request_wait_answer")
    assert len(live(tmp_path).read().dstate) == MAX_STUCK


def test_the_walk_is_off_with_both_bounds_off(tmp_path):
    FakeProc(tmp_path).process(40, "python", "D", "os_acquire_mutex")
    off = settings_for({"host": {**host.CHECKS[0].defaults, "dstate_warn_s": None, "dstate_fail_s": None}})
    assert HostLive(off, str(tmp_path)).read().dstate is None
