"""Who holds a GPU and who they are (gpuhc/node/holders.py), on /proc trees in a directory.

The ``status`` and ``stat`` files are real ones (tests/fixtures/jobs/proc/README.md says where
each was read); the trees around them are the layout proc(5) gives: ``comm``, ``exe`` (a link
the kernel writes), ``fd/`` links."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from gpuhc.model.deadline import Deadline
from gpuhc.node import holders as h
from gpuhc.node.holders import Identity, gpu_holders, identity, real_uid, scan_fds, start_from_stat

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / "proc"
WRITER_START = 61013  # field 22 of writer-1.stat


def process(root: Path, pid: int, comm: str = "python3", status: str = "user.status", stat: str = "writer-1.stat",
            exe: str | None = "/usr/bin/python3.11", fds: tuple[str, ...] = ()) -> Path:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    if status:
        shutil.copy(REAL / status, d / "status")
    if stat:
        shutil.copy(REAL / stat, d / "stat")
    if exe is not None:
        os.symlink(exe, d / "exe")
    for n, target in enumerate(fds, start=3):
        os.symlink(target, d / "fd" / str(n))
    return d


# ------------------------------------------------------------------------------ who a process is


@pytest.mark.parametrize("status, uid", [("user.status", 1000), ("nobody.status", 65534), ("root.status", 0),
                                         ("setuid.status", 1000),  # real uid 1000, effective 0: the user's
                                         ("forged-name.status", 1000)])  # a name cannot add a Uid: line
def test_the_real_uid_is_the_kernels_status_line(tmp_path, status, uid):
    process(tmp_path, 7, status=status)
    assert real_uid(str(tmp_path), 7) == uid
    assert identity(str(tmp_path), 7).uid == uid


def test_identity_reads_name_program_and_start_once(tmp_path):
    process(tmp_path, 21938, comm="py\x1bthon", exe="/opt/conda/bin/python3.11 (deleted)")
    who = identity(str(tmp_path), 21938)
    assert who == Identity(21938, uid=1000, name="py\\x1bthon", exe="/opt/conda/bin/python3.11 (deleted)",
                           start=WRITER_START)
    assert start_from_stat((REAL / "writer-1.stat").read_text()) == WRITER_START
    # the name in stat's parentheses may hold spaces and ")": fields are counted from the last one
    assert start_from_stat("1 (a) b) S " + " ".join(["0"] * 18) + " 777 1") == 777


def test_the_exe_link_is_read_never_followed(tmp_path):
    """A link the kernel writes is read as text: its target need not exist, and a directory it
    names is not entered."""
    process(tmp_path, 8, exe="/nonexistent/bin/daemon")
    assert identity(str(tmp_path), 8).exe == "/nonexistent/bin/daemon"
    process(tmp_path, 9, exe=None)  # not permitted (non-dumpable, no CAP_SYS_PTRACE) or a kernel thread
    assert identity(str(tmp_path), 9).exe is None


def test_gone_and_unknown_are_told_apart(tmp_path):
    assert identity(str(tmp_path), 404) == Identity(404, gone=True)  # exited, or another PID namespace's
    d = process(tmp_path, 10, status="", stat="")
    (d / "comm").write_text("x" * 1000)  # no kernel writes that: not procfs, names nobody
    assert identity(str(tmp_path), 10) == Identity(10, exe="/usr/bin/python3.11")
    os.symlink("/etc/shadow", d / "status")  # a link planted for a file the kernel writes is not read
    assert real_uid(str(tmp_path), 10) is None


def test_a_pid_reused_during_the_read_is_no_ones_identity(tmp_path, monkeypatch):
    """The kernel gives the pid to a new process between the reads (simulated at the readlink of
    exe): none of what was read is kept, so a name and a uid of two processes never pair up."""
    d = process(tmp_path, 11, status="root.status")
    first = identity(str(tmp_path), 11)
    real_readlink = os.readlink

    def reused(path, *a, **kw):
        out = real_readlink(path, *a, **kw)
        if str(path).endswith("/exe"):
            (d / "stat").write_text((REAL / "writer-1.stat").read_text().replace(f" {WRITER_START} ", " 99999 ", 1))
        return out

    monkeypatch.setattr(h.os, "readlink", reused)
    assert identity(str(tmp_path), 11) == Identity(11)
    assert first.start == WRITER_START and first.same(first)
    assert not first.same(Identity(11, start=99999)) and not Identity(11).same(Identity(11))


# ------------------------------------------------------------------------------ who holds a GPU


def test_nvml_and_fd_together_each_marked_how_it_was_seen(tmp_path, monkeypatch):
    process(tmp_path, 100, fds=("/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm", "/home/u/log"))  # both
    process(tmp_path, 200, comm="nv-hostengine", status="root.status", fds=("/dev/nvidiactl",))  # fd only
    process(tmp_path, 300, fds=())  # NVML lists it, its fd/ shows no GPU file (MIG, or a pid of another namespace)
    process(tmp_path, 400, fds=("/dev/nvidia1",))  # fd/ not ours to read
    real_scandir = os.scandir

    def scandir(path):
        if str(path).endswith("/400/fd"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(h.os, "scandir", scandir)
    scan = scan_fds(str(tmp_path), time.monotonic() + 10)
    assert scan.files == {100: {"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"}, 200: {"/dev/nvidiactl"}}
    assert scan.denied == {400} and scan.stopped_at is None
    got = {x.pid: x for x in gpu_holders(str(tmp_path), scan, nvml_pids=[100, 300, 400, 555])}
    assert {p: (x.seen, x.fd) for p, x in got.items()} == {
        100: ("both", "read"), 200: ("fd", "read"), 300: ("nvml", "read"), 400: ("nvml", "denied"),
        555: ("nvml", "gone")}
    assert got[100].devices == ("/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl") and got[400].devices == ()
    assert got[200].who.name == "nv-hostengine" and got[200].who.uid == 0
    assert got[400].who.uid == 1000  # who it is reads even where its descriptors do not
    assert got[555].who == Identity(555, gone=True)


def test_a_scan_past_its_bounds_says_where_it_stopped(tmp_path):
    for pid in (1, 2, 3):
        process(tmp_path, pid, fds=("/dev/nvidia0",))
    scan = scan_fds(str(tmp_path), time.monotonic() + 10, max_pids=2)
    assert set(scan.files) == {1, 2} and scan.stopped_at == 3
    assert [(x.pid, x.fd) for x in gpu_holders(str(tmp_path), scan, [3])] == [(1, "read"), (2, "read"), (3, "unread")]
    late = scan_fds(str(tmp_path), time.monotonic() - 1)
    assert late.files == {} and late.stopped_at == 1
    assert scan_fds(str(tmp_path / "nope"), time.monotonic() + 10).error


# ------------------------------------------------------------------------------ one answer for every reader


def test_the_reset_plan_and_occupancy_name_a_process_alike(tmp_path):
    """The same process, read by the reset plan's holder scan and by occupancy: one name. Before,
    the plan cut a too-long comm to 64 characters while occupancy called it unknown, and occupancy
    wrote a control character as "?" while the plan escaped it."""
    from gpuhc.slurm.repair.reset_probe import holders
    from gpuhc.sources.gpu_procs import OccupancyLive
    from tests.helpers.fake_pynvml import FakeGpu, FakeNvml

    process(tmp_path, 4242, comm="py\x1bthon", fds=("/dev/nvidia0",))
    d = process(tmp_path, 4343, fds=("/dev/nvidia0",))
    (d / "comm").write_text("y" * 100)
    found, problems = holders(str(tmp_path), Deadline.after(10))
    plan = {x.pid: x.comm for x in found}
    occ = OccupancyLive(module=FakeNvml([FakeGpu(compute_procs=[(4242, 1 << 30), (4343, 1 << 30)])]),
                        proc_root=str(tmp_path)).read()
    seen = {p.pid: p.name for p in occ.gpus[0].processes}
    assert not problems and plan == {4242: "py\\x1bthon", 4343: "?"}
    assert seen == {4242: "py\\x1bthon", 4343: None}  # the plan's "?" is its word for unknown


def test_the_reset_plan_says_when_more_processes_than_it_looks_at_run(tmp_path, monkeypatch):
    """Before, the processes past the bound were left out in silence; now the plan is told holders
    may be missing, and refuses as for any unread part."""
    from gpuhc.slurm.repair import reset_probe

    for pid in (1, 2):
        process(tmp_path, pid, fds=("/dev/nvidia0",))
    monkeypatch.setattr(reset_probe, "MAX_PIDS", 1)
    found, problems = reset_probe.holders(str(tmp_path), Deadline.after(10))
    assert [x.pid for x in found] == [1]
    assert problems == ["process scan stopped at pid 2 (time or size bound): holders may be missing"]


def test_the_services_check_and_the_watcher_read_the_same_owner(tmp_path):
    """The services check's daemon and the watcher's process owner: both the identity of
    holders.py (a set-uid program counts as its user, not as root)."""
    from gpuhc.sources.host import DAEMONS, PIDFILES, HostLive
    from gpuhc.sources.job_activity import JobResolver

    proc = tmp_path / "proc"
    process(proc, 12, status="setuid.status")
    assert JobResolver(str(proc)).owner_of(12) == identity(str(proc), 12).uid == 1000
    pidfile = tmp_path / PIDFILES["persistenced"]
    pidfile.parent.mkdir(parents=True)
    pidfile.write_text("13\n")
    live = HostLive({}, str(tmp_path))
    process(proc, 13, comm=DAEMONS["persistenced"], status="root.status", exe="/usr/bin/true")
    assert live._pidfile_runs("persistenced")
    shutil.copy(REAL / "setuid.status", proc / "13" / "status")  # a user's set-uid namesake
    assert not live._pidfile_runs("persistenced")
    shutil.copy(REAL / "root.status", proc / "13" / "status")
    (proc / "13" / "comm").write_text("bash\n")  # root's, but another program's pid
    assert not live._pidfile_runs("persistenced")
