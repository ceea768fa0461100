"""The live host reader (gpuhc/sources/host.py) on a directory standing in for "/", with real
child processes: a mount that answers, one that hangs (its probe must not hang the read), and
a stand-in Fabric Manager process (no systemd here: the daemon's process is what is looked for)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from gpuhc.sources.host import HostLive, count_cpus, settings_for
from tests.helpers.unprivileged import make_user, namesake


def tree(tmp_path, files: dict[str, str]):
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


@pytest.mark.parametrize("text, n", [("0-63\n", 64), ("0-3,8-11\n", 8), ("0\n", 1), ("", None), ("0-x", None)])
def test_count_cpus(text, n):
    assert count_cpus(text) == n


def test_cpus_memory_and_edac(tmp_path):
    root = tree(tmp_path, {"sys/devices/system/cpu/online": "0-223\n",
                           "proc/meminfo": "MemTotal:       2113470000 kB\nMemFree: 1 kB\n",
                           "sys/devices/system/edac/mc/mc0/ce_count": "3\n",
                           "sys/devices/system/edac/mc/mc0/ue_count": "0\n",
                           "sys/devices/system/edac/mc/mc1/ce_count": "garbage\n"})
    r = HostLive({"cpus": True, "memory": True, "edac": True}, str(root)).read()
    assert (r.cpus_online, r.mem_total_kib) == (224, 2113470000)
    assert r.edac == {"mc0": {"ce": 3, "ue": 0}}  # an unreadable counter is left out, never zero
    assert HostLive({"edac": True}, str(tmp_path / "nowhere")).read().edac is None  # no EDAC: unknown


def test_pci_watch_walks_up_from_each_device(tmp_path):
    devices = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    gpu = devices / "0000:02:00.0"
    nic = tmp_path / "sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0"
    disk = tmp_path / "sys/devices/pci0000:00/0000:00:03.0"
    for d, vendor, cls in ((gpu, "0x10de", "0x030200"), (nic, "0x15b3", "0x020700"), (disk, "0x8086", "0x010802")):
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor)
        (d / "class").write_text(cls)
    bus = tmp_path / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    for d in (gpu, nic, disk):
        (bus / d.name).symlink_to(d)
    got = HostLive({"pci_watch": True}, str(tmp_path)).read().pci_watch
    assert got == {"0000:02:00.0": {"role": "gpu", "upstream": ["0000:01:00.0", "0000:00:01.0"]},
                   "0000:05:00.0": {"role": "nic", "upstream": ["0000:00:02.0"]}}


def test_a_mount_that_answers_and_one_that_hangs(tmp_path):
    """The hung one is a real child that never answers: the read ends at its deadline."""
    hang = tmp_path / "bin" / "stat"
    hang.parent.mkdir()
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    os.symlink("/proc", tmp_path / "proc")  # mountinfo: the real one
    live = HostLive({"mounts": ["/", "/no/such/mount"], "mount_timeout_s": 5.0}, str(tmp_path))
    r = live.read()
    assert r.mounts["/"]["ok"] is True and r.mounts["/"]["error"] is None
    assert r.mounts["/no/such/mount"] == {"ok": False, "seconds": 0.0, "error": "not mounted"}
    hung = HostLive({"mounts": ["/"], "mount_timeout_s": 0.5}, str(tmp_path), owner=os.getuid())
    hung.stat_search = (str(hang),)
    os.chmod(tmp_path / "bin", 0o755)
    t0 = time.monotonic()
    r = hung.read()
    assert time.monotonic() - t0 < 15.0  # ended at its deadline, long before the child's 30 s
    assert r.mounts["/"]["ok"] is False and r.mounts["/"]["error"] == "no answer within 0.5s"


def test_scratch_free_space(tmp_path):
    r = HostLive({"scratch": str(tmp_path), "mount_timeout_s": 5.0}, "/").read()
    assert r.scratch["path"] == str(tmp_path)
    assert 0 < r.scratch["free_bytes"] <= r.scratch["total_bytes"]


def test_a_stand_in_fabric_manager_is_seen_running(tmp_path, monkeypatch):
    os.symlink("/proc", tmp_path / "proc")
    unit = tmp_path / "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("")
    settings = settings_for({"services": {"fabricmanager": "auto", "persistenced": "auto", "dcgm": "off",
                                          "probe_timeout_s": 1.0}})
    mine = walk_only(monkeypatch)
    before = HostLive(settings, str(tmp_path)).read().services
    assert before["fabricmanager"] == {"expected": True, "running": False, "answering": None, "error": None}
    assert before["persistenced"]["expected"] is False and "dcgm" not in before
    fm = tmp_path / "nv-fabricmanager"
    shutil.copy("/bin/sleep", fm)
    proc = subprocess.Popen([str(fm), "30"])
    mine.add(proc.pid)
    try:
        time.sleep(0.2)
        after = HostLive(settings, str(tmp_path), owner=os.getuid()).read().services
        # the same process under another user's uid is a user's program named like the daemon
        impostor = HostLive(settings, str(tmp_path), owner=os.getuid() + 1).read().services
    finally:
        proc.kill()
        proc.wait()
    assert after["fabricmanager"]["running"] is True
    assert impostor["fabricmanager"]["running"] is False


def test_a_hung_host_engine_probe_ends_at_its_deadline(tmp_path):
    """dcgmi runs only from a directory of the owner's, as an argv list, killed at its deadline."""
    os.symlink("/proc", tmp_path / "proc")
    engine = tmp_path / "nv-hostengine"
    shutil.copy("/bin/sleep", engine)
    tools = tmp_path / "bin"
    tools.mkdir(mode=0o755)
    dcgmi = tools / "dcgmi"
    dcgmi.write_text("#!/bin/sh\nexec sleep 30\n")
    dcgmi.chmod(0o755)
    live = HostLive({"services": {"dcgm": "on"}, "probe_timeout_s": 0.5}, str(tmp_path), owner=os.getuid())
    live.dcgmi_search = (str(dcgmi),)
    proc = subprocess.Popen([str(engine), "30"])
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        got = live.read().services["dcgm"]
        took = time.monotonic() - t0
        dcgmi.chmod(0o777)  # a tool others could rewrite is never run
        refused = live.read().services["dcgm"]
    finally:
        proc.kill()
        proc.wait()
    assert got == {"expected": True, "running": True, "answering": False, "attempts": 3,
                   "error": "dcgmi discovery -l: no answer within 0.5s"}
    assert took < 15.0  # ended at its deadline, long before the child's 30 s
    assert refused["answering"] is None and refused["error"] == "dcgmi not installed in a root-owned system directory"


def test_one_slow_host_engine_answer_is_retried_within_the_run(tmp_path):
    """issue 43: a dcgmi that misses its bound once and answers the next time is answering."""
    os.symlink("/proc", tmp_path / "proc")
    engine = tmp_path / "nv-hostengine"
    shutil.copy("/bin/sleep", engine)
    tools = tmp_path / "bin"
    tools.mkdir(mode=0o755)
    dcgmi = tools / "dcgmi"
    once = tmp_path / "answered-once"
    dcgmi.write_text(f"#!/bin/sh\nif [ -e {once} ]; then exit 0; fi\n: > {once}\nexec sleep 30\n")
    dcgmi.chmod(0o755)
    live = HostLive({"services": {"dcgm": "on"}, "probe_timeout_s": 0.5, "probe_budget_s": 5.0}, str(tmp_path),
                    owner=os.getuid())
    live.dcgmi_search = (str(dcgmi),)
    proc = subprocess.Popen([str(engine), "30"])
    try:
        time.sleep(0.2)
        got = live.read().services["dcgm"]
    finally:
        proc.kill()
        proc.wait()
    assert got == {"expected": True, "running": True, "answering": True, "error": None, "attempts": 2}


def test_retries_stop_at_the_shared_deadline():
    from gpuhc.sources.host_probes import retried

    asked, slept = [], []
    got = retried(lambda t: (asked.append(t), (False, "down"))[1], 3.0, time.monotonic() + 0.2, sleep=slept.append)
    # the first pause (0.5 s) does not fit in the 0.2 s left: one try, no sleep
    assert got == {"answering": False, "error": "down"} and len(asked) == 1 and slept == []


def test_settings_read_only_what_the_checks_judge():
    assert settings_for({"xid": {}}) == {}
    assert settings_for({"pcie-aer": {}}) == {"pci_watch": True}
    s = settings_for({"host": {"mounts": ["/home"], "scratch": None, "dstate_warn_s": None, "dstate_fail_s": None}})
    assert s["mounts"] == ["/home"] and s["dstate"] is False and s["scratch"] is None


def test_a_pid_file_names_the_daemon_without_a_walk_of_proc(tmp_path, monkeypatch):
    """nvidia-persistenced's own pid file, a live process of that name: running, and no /proc walk."""
    os.symlink("/proc", tmp_path / "proc")
    unit = tmp_path / "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("")
    daemon = tmp_path / "nvidia-persistenced"
    shutil.copy("/bin/sleep", daemon)
    proc = subprocess.Popen([str(daemon), "30"])
    pidfile = tmp_path / "var/run/nvidia-persistenced/nvidia-persistenced.pid"
    pidfile.parent.mkdir(parents=True)
    pidfile.write_text(f"{proc.pid}\n")
    live = HostLive({"services": {"persistenced": "auto"}, "probe_timeout_s": 0.5}, str(tmp_path), owner=os.getuid())
    monkeypatch.setattr(HostLive, "procs", lambda self: pytest.fail("walked /proc though the pid file answered"))
    try:
        time.sleep(0.2)
        got = live.read().services["persistenced"]
    finally:
        proc.kill()
        proc.wait()
    # running; its socket is not there, so it does not answer
    assert got["running"] is True and got["answering"] is False and "socket" in got["error"]


@pytest.fixture
def user():
    yield from make_user("gpuhch")


def walk_only(monkeypatch, *procs: subprocess.Popen) -> set[int]:
    """The /proc walk sees this test's processes alone (``procs``, and any pid the test adds to the
    set returned). The walk itself is real; the rest of the machine is not this test's: a parallel
    test's root-run namesake of the daemon is, rightly, the service to the code under test, and
    made these tests flaky under CI's workers."""
    real = HostLive.procs
    mine = {p.pid for p in procs}
    monkeypatch.setattr(HostLive, "procs", lambda self: [x for x in real(self) or [] if int(x["pid"]) in mine])
    return mine


def _fm_expected(tmp_path):
    os.symlink("/proc", tmp_path / "proc")
    unit = tmp_path / "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("")
    return settings_for({"services": {"fabricmanager": "auto", "persistenced": "off", "dcgm": "off",
                                      "probe_timeout_s": 1.0}})


def test_a_users_set_uid_namesake_of_the_daemon_is_not_the_service(tmp_path, user, monkeypatch):
    """Issue 45: a user runs a set-uid-root program through a link named nv-fabricmanager; the
    kernel shows its /proc/<pid> as root's (the effective uid), which made it the service. Its
    real uid says whose it is; its program lies in a root-owned directory, so only the uid can."""
    settings = _fm_expected(tmp_path)
    with namesake(user, "nv-fabricmanager") as p:
        walk_only(monkeypatch, p)
        assert os.stat(f"/proc/{p.pid}").st_uid == 0  # what the directory's owner said
        got = HostLive(settings, str(tmp_path)).read().services
    assert got["fabricmanager"]["running"] is False


def test_roots_process_named_like_the_daemon_from_a_directory_others_can_write_is_not_the_service(tmp_path, monkeypatch):
    settings = _fm_expected(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    fm = shared / "nv-fabricmanager"
    shutil.copy("/bin/sleep", fm)
    proc = subprocess.Popen([str(fm), "30"])
    walk_only(monkeypatch, proc)
    try:
        time.sleep(0.2)
        got = HostLive(settings, str(tmp_path)).read().services
    finally:
        proc.kill()
        proc.wait()
    assert got["fabricmanager"]["running"] is False


def test_persistenced_run_under_its_own_account_is_the_service(tmp_path, user, monkeypatch):
    """``nvidia-persistenced --user nvidia-persistenced`` drops to that account; root made its run
    directory for it. The same process where the directory is not that account's is no service."""
    os.symlink("/proc", tmp_path / "proc")
    unit = tmp_path / "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("")
    run = tmp_path / "var/run/nvidia-persistenced"
    run.mkdir(parents=True)
    live = HostLive({"services": {"persistenced": "auto"}, "probe_timeout_s": 0.5}, str(tmp_path))
    with namesake(user, "nvidia-persistenced", setuid=False) as p:
        walk_only(monkeypatch, p)
        (run / "nvidia-persistenced.pid").write_text(f"{p.pid}\n")
        root_dir = live.read().services["persistenced"]["running"]
        os.chown(run, user.pw_uid, user.pw_gid)
        its_own = live.read().services["persistenced"]["running"]
    assert (root_dir, its_own) == (False, True)
