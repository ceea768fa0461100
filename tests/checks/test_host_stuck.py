"""host's stuck processes (gpuhc/checks/host_stuck.py): stuck means no progress, and where it
waits decides what it buys. The runs read a /proc tree in a directory through the live reader
(gpuhc/sources/host.py), every 5 minutes as the health check runs, for an hour."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuhc.checks import host
from gpuhc.model.host import HostReading
from gpuhc.model.result import Action, Status
from gpuhc.sources.host import HostLive, settings_for
from tests.helpers.fake_proc import FakeProc
from tests.helpers.snapshots import T0, context, healthy_node

CHECK = host.CHECKS[0]
EVERY = 300.0  # slurm.conf's HealthCheckInterval in examples/slurm/
HOUR = 12


def judge(h: HostReading, prev=None, time=T0, **t):
    return CHECK.judge(replace(healthy_node(1, time=time), host=h), context(CHECK, prev=prev, baseline=None, **t))


def runs(tmp_path, step, n=HOUR, mounts=None, **t):
    """``n`` health checks ``EVERY`` seconds apart; ``step(i)`` sets /proc before run i. The
    stuck-process findings of each run, as (status, subject, action)."""
    reader = HostLive(settings_for({"host": {**CHECK.defaults, **t}}), str(tmp_path))
    state, seen = None, []
    for i in range(n + 1):
        step(i)
        h = reader.read()
        if mounts is not None:
            h = replace(h, mounts=mounts)
        out = judge(h, prev=state, time=T0 + i * EVERY, **t)
        state = out.state
        seen.append([(r.status, r.subject, r.action) for r in out.results if r.subject.startswith("pid")])
    return seen, out


def test_an_nfs_reader_whose_cpu_time_grows_is_never_stuck(tmp_path):
    """Issue 43: in state D at every run, in a long NFS read that sleeps and wakes in between."""
    proc = FakeProc(tmp_path)
    proc.process(500, "python", "D", "rpc_wait_bit_killable")
    seen, out = runs(tmp_path, lambda i: proc.set(500, "python", "D", "rpc_wait_bit_killable", 100 + 7 * i, 50 + 40 * i))
    assert seen == [[]] * (HOUR + 1)
    assert out.state["dstate"]["500/12345"]["since"] == T0 + HOUR * EVERY  # each run a fresh start


def test_a_users_fuse_mount_that_never_answers_warns_for_an_hour_and_never_drains(tmp_path):
    """Any user can mount FUSE and park a process behind a server that never answers."""
    proc = FakeProc(tmp_path)
    proc.process(600, "ls", "D", "request_wait_answer", fds=("/dev/nvidia0",))
    seen, out = runs(tmp_path, lambda i: None)
    assert seen[0] == [] and all(s == [(Status.WARN, "pid600", Action.NONE)] for s in seen[1:])
    (r,) = [r for r in out.results if r.subject == "pid600"]
    assert r.evidence == "stuck-process" and r.value["wait"] == "fuse"
    assert "no progress for 3600s (a mount any user can make: never drained)" in r.message


def test_a_process_stuck_in_the_gpu_driver_holding_a_gpu_for_an_hour_fails(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(700, "python", "D", "os_acquire_rwlock_write", cpu=52000, switches=9000,
                 fds=("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia2"))
    seen, out = runs(tmp_path, lambda i: None)
    assert seen[0] == []  # first sight: one sample says nothing of progress
    assert seen[1] == [(Status.WARN, "pid700", Action.NONE)]  # 300 s >= dstate_warn_s
    assert all(s == [(Status.FAIL, "pid700", Action.DRAIN_REBOOT)] for s in seen[2:])  # 600 s on
    (r,) = [r for r in out.results if r.subject == "pid700"]
    assert r.message == ("process 700 (python) stuck in uninterruptible sleep in os_acquire_rwlock_write (the GPU "
                         "driver), no progress for 3600s, holding a GPU")
    assert r.evidence == "stuck-process" and r.value == {"stuck_s": 3600.0, "wait": "gpu-driver",
                                                         "wchan": "os_acquire_rwlock_write", "holds_gpu": True}


def test_in_the_driver_without_a_gpu_file_it_only_warns(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(710, "nvidia-smi", "D", "os_acquire_mutex", fds=("/dev/nvidiactl",))
    seen, _ = runs(tmp_path, lambda i: None)
    assert seen[-1] == [(Status.WARN, "pid710", Action.NONE)]


def test_one_moment_of_progress_starts_the_count_again(tmp_path):
    proc = FakeProc(tmp_path)
    proc.process(720, "python", "D", "uvm_gpu_retain_by_uuid", fds=("/dev/nvidia0",))
    woke = {3: 51}  # it ran once between runs 2 and 3, then never again
    seen, out = runs(tmp_path, lambda i: proc.set(720, "python", "D", "uvm_gpu_retain_by_uuid", 100,
                                                  50 if i < 3 else woke[3]), n=4)
    assert [s[0][0] if s else None for s in seen] == [None, Status.WARN, Status.FAIL, None, Status.WARN]
    assert out.state["dstate"]["720/12345"]["since"] == T0 + 3 * EVERY


@pytest.mark.parametrize("mounts, status", [
    (None, Status.WARN),  # the site's mounts answer (or none is named): one slow server's
    ({"/home": {"ok": False, "seconds": 5.0, "error": "no answer within 5s", "fstype": "nfs4"}}, Status.FAIL),
    ({"/scratch/u": {"ok": False, "seconds": 5.0, "error": "no answer within 5s", "fstype": "fuse.sshfs"}}, Status.WARN),
])
def test_a_file_system_wait_drains_only_when_the_sites_own_mount_probe_fails(tmp_path, mounts, status):
    proc = FakeProc(tmp_path)
    proc.process(800, "python", "D", "nfs_wait_bit_killable")
    seen, out = runs(tmp_path, lambda i: None, n=3, mounts=mounts)
    assert seen[-1][0][:2] == (status, "pid800")
    stuck = [r for r in out.results if r.subject == "pid800"][0]
    assert ("and mount /home fails" in stuck.message) == (status is Status.FAIL)
    # the mount's evidence: its server is the fault, so a person, not a reboot (gpuhc/catalog/evidence.py)
    assert stuck.evidence == "mount"
    assert stuck.action is (Action.DRAIN_TICKET if status is Status.FAIL else Action.NONE)


def test_a_reused_pid_and_an_unreadable_sample_start_nothing():
    stuck = {"pid": 4242, "comm": "python", "wchan": "os_acquire_mutex", "wait": "gpu-driver", "start": 99,
             "cpu": 10, "switches": 5, "holds_gpu": True}
    first = judge(HostReading(dstate=[stuck]))
    late = judge(HostReading(dstate=[stuck]), prev=first.state, time=T0 + 700)
    assert [r.status for r in late.results] == [Status.FAIL]
    reused = judge(HostReading(dstate=[{**stuck, "start": 5000}]), prev=late.state, time=T0 + 800)
    assert [r.status for r in reused.results] == [Status.PASS]
    unknown = judge(HostReading(dstate=[{**stuck, "switches": None}]), prev=late.state, time=T0 + 900)
    assert [r.status for r in unknown.results] == [Status.PASS] and unknown.state == {"dstate": {}}
    old_format = judge(HostReading(dstate=[stuck]), prev={"dstate": {"4242/99": T0 - 9999}}, time=T0 + 1000)
    assert [r.status for r in old_format.results] == [Status.PASS]  # a first-seen time alone is no sample


def test_wait_channel_lists_are_whole_names_or_prefixes():
    errors = CHECK.validate({**CHECK.defaults, "dstate_gpu_wchan": ["nv"], "dstate_fs_wchan": ["n_"],
                             "dstate_fuse_wchan": ["fuse*"]})
    assert errors == [
        "dstate_fs_wchan: want a list of kernel function names, or prefixes ending in '_' (at least 3 characters, "
        "e.g. 'nv_'), got ['n_']",
        "dstate_fuse_wchan: want a list of kernel function names, or prefixes ending in '_' (at least 3 characters, "
        "e.g. 'nv_'), got ['fuse*']"]
