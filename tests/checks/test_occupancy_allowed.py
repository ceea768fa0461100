"""occupancy's allowed_processes (gpuhc/checks/occupancy.py): a monitor holding a context on
every GPU (DCGM's nv-hostengine) is no stray, but only by its exact name AND its owner's uid; a
user's process named like it is a stray (docs/security.md). The campaign (issue 35) drained a
healthy node for such a monitor at the prolog."""

from __future__ import annotations

import os

import pytest

from gpuhc.checks.base import Context
from gpuhc.checks.occupancy import CHECKS, allowed_rules, judge
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources.gpu_procs import OccupancyLive
from tests.helpers.fake_pynvml import FakeGpu, FakeNvml

GiB = 1 << 30
DEFAULTS = CHECKS[0].defaults


def one(*procs: GpuProcess, used: float = 512.0):
    snap = Snapshot("n1", 0.0, occupancy=Occupancy(available=True, gpus=[
        GpuOccupancy(0, memory_used_mib=used, processes=list(procs))]))
    (r,) = judge(snap, Context(thresholds=dict(DEFAULTS))).results
    return r


def test_dcgms_host_engine_as_root_is_allowed_by_default_with_its_memory():
    assert DEFAULTS["allowed_processes"] == [{"name": "nv-hostengine", "uid": 0}]
    r = one(GpuProcess(3311, "nv-hostengine", 509.0, uid=0))
    assert r.status is Status.PASS and "allowed: pid 3311 (nv-hostengine, 0.5 GiB)" in r.message
    big = one(GpuProcess(3311, "nv-hostengine", 1500.0, uid=0), used=1503.0)
    assert big.status is Status.PASS  # its own memory is not the finding


def test_a_users_process_named_like_the_monitor_is_a_stray():
    r = one(GpuProcess(48211, "nv-hostengine", 1600.0, uid=1000), used=1603.0)
    assert r.status is Status.FAIL and r.action.drains and r.value == [48211]
    for p in (GpuProcess(7, "nv-hostengine", 509.0, uid=None),  # owner unknown: not allowed
              GpuProcess(7, "nv-hostengine", 509.0, uid=0, gone=True),  # /proc does not have it
              GpuProcess(7, "nv-hostengin", 509.0, uid=0)):  # the exact name only
        assert one(p).status is Status.FAIL, p


def test_a_stray_beside_the_monitor_is_named_alone():
    r = one(GpuProcess(3311, "nv-hostengine", 509.0, uid=0), GpuProcess(4242, "python3", 2048.0, uid=1000),
            used=2560.0)
    assert r.status is Status.FAIL and r.value == [4242] and "nv-hostengine" not in r.message
    leak = one(GpuProcess(3311, "nv-hostengine", 509.0, uid=0), used=3000.0)  # memory no process explains
    assert leak.status is Status.FAIL and "with no process listed" in leak.message


def test_a_site_adds_its_service_account_and_bad_entries_are_config_errors():
    site = [{"name": "nv-hostengine", "uid": 0}, {"name": "dcgm-exporter", "uid": 998}]
    assert allowed_rules({"allowed_processes": site}) == (("dcgm-exporter", 998), ("nv-hostengine", 0))
    assert not CHECKS[0].validate({**DEFAULTS, "allowed_processes": site})
    for bad, why in ((["nv-hostengine"], "want a mapping"), ([{"name": "x", "uid": "root"}], "numeric uid"),
                     ([{"name": "a-name-longer-than-15", "uid": 0}], "1-15 printable"),
                     ([{"name": "x", "uid": 0, "user": "root"}], "want a mapping"), ("nv-hostengine", "want a list")):
        problems = CHECKS[0].validate({**DEFAULTS, "allowed_processes": bad})
        assert problems and why in problems[0], (bad, problems)
    assert allowed_rules({"allowed_processes": [{"name": "x", "uid": -1}]}) == ()


def proc(tmp_path, pid: int, name: str, uid: int) -> str:
    d = tmp_path / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(name + "\n")
    # /proc/<pid>/status as the kernel writes it (real, effective, saved, fs uids); the directory
    # itself stays root's, as the kernel shows it for a process that set itself non-dumpable
    (d / "status").write_text(f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\n"
                              f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    return str(tmp_path / "proc")


def test_the_epilog_does_not_wait_for_an_allowed_monitor_but_waits_for_its_namesake(tmp_path):
    gpu = FakeGpu(compute_procs=[(3311, 509 << 20)], memory=(512 << 20, 80 * GiB))
    rules = allowed_rules(DEFAULTS)
    root = proc(tmp_path / "a", 3311, "nv-hostengine", 0)
    occ = OccupancyLive(wait_s=5.0, poll_s=0.01, module=FakeNvml([gpu]), proc_root=root, settle_mib=1024,
                        allowed=rules).read()
    assert occ.waited_s < 0.5 and occ.gpus[0].processes[0].uid == 0
    root = proc(tmp_path / "b", 3311, "nv-hostengine", 1000)
    occ = OccupancyLive(wait_s=0.3, poll_s=0.01, module=FakeNvml([gpu]), proc_root=root, settle_mib=1024,
                        allowed=rules).read()
    # a user's namesake whose /proc/<pid> is root's (non-dumpable): its real uid says whose it is
    assert os.stat(f"{root}/3311").st_uid == os.getuid()
    assert occ.waited_s >= 0.3 and occ.gpus[0].processes[0].uid == 1000
