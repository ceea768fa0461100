"""The epilog's post-mortem bundle and the Slurm log file: what root writes, and where it refuses.

The epilog runs as root in directories an admin configured. Tests that need "root" fake only the
two answers the checks ask the kernel for (the effective uid and the owners in ``os.stat``), so
they mean the same whether the suite runs as root or not; modes are real ``chmod``s.
"""

from __future__ import annotations

import json
import os
import stat
import tarfile

import pytest
from tests.helpers.minislurm import EPILOG_ENV, OK, XID, MiniSlurm, config, flow

from gpuhc.model.kernel import KernelLog
from gpuhc.model.snapshot import Snapshot
from gpuhc.postmortem import job as postmortem
from gpuhc.slurm.flows import entry
from gpuhc.postmortem.job import UnsafeDirectory, check_root_dir, kernel_tail
from gpuhc.sources import SourceSpec
from tests.helpers.owners import owners

NOW = 1_718_101_425.0


def pm_dir(tmp_path, mode=0o700, parent_mode=0o755) -> str:
    parent = tmp_path / "var"
    parent.mkdir(exist_ok=True)
    parent.chmod(parent_mode)
    pm = parent / "pm"
    pm.mkdir(exist_ok=True)
    pm.chmod(mode)
    return str(pm)


def epilog(tmp_path, monkeypatch, pm: str, fmt="dir", results=(OK,), slurm=None):
    cfg = config(tmp_path, postmortem_dir=pm, postmortem_format=fmt)
    _, f = flow(tmp_path, monkeypatch, "epilog", slurm, list(results), env=EPILOG_ENV, cfg=cfg)
    f.opts.now = NOW
    return entry.epilog(f)


@pytest.fixture(autouse=True)
def kmsg(tmp_path, monkeypatch):
    path = tmp_path / "kmsg"
    path.write_text("6,1,1000000,-;hello\n")
    monkeypatch.setattr(postmortem, "KMSG", str(path))
    monkeypatch.setattr(postmortem, "DMESG", str(tmp_path / "no-dmesg"))
    return path


# ------------------------------------------------------------------ the directory, as root


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])
def test_root_refuses_a_bundle_dir_others_can_write_and_the_job_and_node_are_untouched(
        tmp_path, monkeypatch, owners, mode):
    pm = pm_dir(tmp_path, mode)
    out = epilog(tmp_path, monkeypatch, pm)  # slurm=None: any Slurm call fails the test
    assert out.exit_code == 0 and "postmortem" not in out.extra
    assert any("post-mortem bundle not written" in x and "writable by group or others" in x for x in out.lines)
    assert os.listdir(pm) == []  # nothing written, not even a staging directory


def test_root_refuses_a_bundle_dir_owned_by_someone_else(tmp_path, monkeypatch, owners):
    pm = pm_dir(tmp_path)
    owners[pm] = 1000
    out = epilog(tmp_path, monkeypatch, pm)
    assert out.exit_code == 0 and any("owned by uid 1000, not root" in x for x in out.lines)
    assert os.listdir(pm) == []


def test_root_refuses_a_bundle_dir_whose_parent_others_can_write(tmp_path, monkeypatch, owners):
    pm = pm_dir(tmp_path, parent_mode=0o777)
    out = epilog(tmp_path, monkeypatch, pm)
    assert out.exit_code == 0 and any("writable by group or others" in x for x in out.lines)


def test_refused_bundle_does_not_stop_a_drain_of_a_failing_node(tmp_path, monkeypatch, owners):
    s = MiniSlurm({"n1": ("ALLOCATED", None)})
    out = epilog(tmp_path, monkeypatch, pm_dir(tmp_path, 0o777), results=(XID,), slurm=s)
    assert out.exit_code == 1 and s.nodes["n1"][0] == "ALLOCATED+DRAIN"  # the verdict stands, bundle or not


def test_root_writes_into_its_own_private_dir(tmp_path, monkeypatch, owners):
    pm = pm_dir(tmp_path)
    out = epilog(tmp_path, monkeypatch, pm)
    assert stat.S_IMODE(os.lstat(out.extra["postmortem"]).st_mode) == 0o700


def test_a_missing_bundle_dir_is_created_private(tmp_path, monkeypatch, owners):
    pm = os.path.join(pm_dir(tmp_path), "new")
    out = epilog(tmp_path, monkeypatch, pm)
    assert out.extra["postmortem"].startswith(pm) and stat.S_IMODE(os.stat(pm).st_mode) == 0o700


def test_the_check_is_for_root_only(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    check_root_dir(pm_dir(tmp_path, 0o777), "x")  # a user's own run may write where it likes
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(UnsafeDirectory, match="refusing x"):
        check_root_dir(pm_dir(tmp_path, 0o777), "x")


# ------------------------------------------------------------------ planted links


def plant(path: str, victim) -> None:
    os.symlink(str(victim), path)


@pytest.mark.parametrize("fmt,suffixes", [("tar.gz", (".tar.gz.tmp", ".tar.gz")), ("dir", ("",))])
def test_links_planted_at_predictable_names_are_never_followed(tmp_path, monkeypatch, fmt, suffixes):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    pm = pm_dir(tmp_path)
    name = postmortem.bundle_name("n1", "1234", NOW)
    for suffix in suffixes:
        plant(os.path.join(pm, name + suffix), victim)
    out = epilog(tmp_path, monkeypatch, pm, fmt)
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    path = out.extra["postmortem"]
    assert not os.path.islink(path)
    if fmt == "tar.gz":
        with tarfile.open(path) as tar:
            assert any(n.endswith("/job.json") for n in tar.getnames())
    else:
        assert json.load(open(os.path.join(path, "job.json")))["job_id"] == "1234"
    ours = [p for p in os.listdir(pm) if p.endswith(".tmp") and not os.path.islink(os.path.join(pm, p))]
    assert ours == []  # no temporary file of ours left behind


def test_prune_removes_a_planted_link_not_what_it_points_at(tmp_path):
    pm = pm_dir(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    os.symlink(str(target), os.path.join(pm, "n1-0-20000101T000000Z"))
    os.utime(os.path.join(pm, "n1-0-20000101T000000Z"), (0, 0), follow_symlinks=False)
    os.mkdir(os.path.join(pm, "n1-1-20240101T000000Z"))
    removed = postmortem.prune(pm, "n1", keep=1)
    assert removed == [os.path.join(pm, "n1-0-20000101T000000Z")]
    assert (target / "keep").read_text() == "x"


# ------------------------------------------------------------------ the Slurm log file


def test_log_file_appends_privately(tmp_path):
    path = tmp_path / "logs" / "gpuhc.log"
    path.parent.mkdir()
    log = entry.Log("gpuhc healthcheck n1", str(path), use_syslog=False, echo=False)
    log("first")
    log("second\nline")
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and lines[1].endswith("gpuhc healthcheck n1: second line")
    assert stat.S_IMODE(path.stat().st_mode) & 0o137 == 0  # 0640 at most, whatever the umask


def test_log_file_symlink_is_refused_once_and_the_run_goes_on(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "logs"
    d.mkdir()
    os.symlink(str(victim), str(d / "gpuhc.log"))
    log = entry.Log("gpuhc healthcheck n1", str(d / "gpuhc.log"), use_syslog=False, echo=False)
    log("one")
    log("two")
    assert victim.read_text() == "precious\n"
    refusals = [x for x in log.lines if "not writing slurm.log_file" in x]
    assert len(refusals) == 1 and log.lines[-1].endswith(": two")


def test_log_file_fifo_is_refused_without_hanging(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    os.mkfifo(str(d / "gpuhc.log"))
    log = entry.Log("p", str(d / "gpuhc.log"), use_syslog=False, echo=False)
    log("one")
    assert any("not writing slurm.log_file" in x for x in log.lines)


def test_log_file_in_a_dir_others_can_write_is_refused_as_root(tmp_path, owners):
    d = tmp_path / "logs"
    d.mkdir()
    d.chmod(0o777)
    log = entry.Log("p", str(d / "gpuhc.log"), use_syslog=False, echo=False)
    log("one")
    assert not (d / "gpuhc.log").exists()
    assert any("not writing slurm.log_file" in x and "writable by group or others" in x for x in log.lines)


def test_log_file_hard_link_is_refused_as_root(tmp_path, owners):
    d = tmp_path / "logs"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.link(str(victim), str(d / "gpuhc.log"))
    log = entry.Log("p", str(d / "gpuhc.log"), use_syslog=False, echo=False)
    log("one")
    assert victim.read_text() == "precious\n" and any("one link" in x for x in log.lines)


# ------------------------------------------------------------------ raw kernel lines


def kmsg_records(n: int) -> str:
    return "".join(f"6,{i},{i * 1_000_000},-;line {i}\n SUBSYSTEM=pci\n" for i in range(n))


def test_kmsg_tail_keeps_the_newest_lines_without_continuations(kmsg):
    kmsg.write_text(kmsg_records(50))
    lines, note = kernel_tail(SourceSpec(), Snapshot(hostname="n1", time=NOW, kernel=KernelLog(source="/dev/kmsg")),
                              limit=10, time_s=5)
    assert [x.split(" ", 1)[1] for x in lines] == [f"line {i}" for i in range(40, 50)]
    assert all(x[:4].isdigit() and "Z " in x for x in lines) and note == f"10 lines from {kmsg}"


def test_kernel_lines_are_printable_and_bounded(kmsg, monkeypatch):
    kmsg.write_text("6,1,1,-;bad \x1b[31mred\x07 tab\there\n" + "6,2,2,-;" + "x" * 5000 + "\n")
    lines, _ = kernel_tail(SourceSpec(), None, limit=10, time_s=5)
    assert "\\x1b(31mred" not in lines[0] and "\\x1b[31mred\\x07 tab\\x09here" in lines[0]
    assert all(x.isprintable() for x in lines) and len(lines[1]) < 2100 and lines[1].endswith("...")
    monkeypatch.setattr(postmortem, "TAIL_MAX_BYTES", 2050)  # the whole tail, not just each line
    lines, _ = kernel_tail(SourceSpec(), None, limit=10, time_s=5)
    assert len(lines) == 1 and lines[0].endswith("x...")  # the newest line is the one kept


def test_reading_stops_at_the_time_bound(kmsg):
    kmsg.write_text(kmsg_records(5))
    lines, note = kernel_tail(SourceSpec(), None, limit=10, time_s=0)
    assert lines == [] and note == f"0 lines from {kmsg}"


def test_dmesg_is_the_fallback_when_kmsg_is_unreadable(tmp_path, monkeypatch):
    fake = tmp_path / "dmesg"
    fake.write_text("#!/bin/sh\nfor i in 1 2 3; do echo \"2024-06-11T10:23:4$i,000000+00:00 dmesg line $i\"; done\n")
    fake.chmod(0o755)
    monkeypatch.setattr(postmortem, "KMSG", str(tmp_path / "missing"))
    monkeypatch.setattr(postmortem, "DMESG", str(fake))
    lines, note = kernel_tail(SourceSpec(), None, limit=2, time_s=5)
    assert [x.split()[-1] for x in lines] == ["2", "3"] and note == "2 lines from dmesg"


def test_nothing_readable_is_said_not_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(postmortem, "KMSG", str(tmp_path / "missing"))
    lines, note = kernel_tail(SourceSpec(), None, limit=5, time_s=5)
    assert lines == [] and note.startswith("kernel log unreadable (") and "missing" in note


def test_a_recorded_kernel_log_file_gives_its_own_tail(tmp_path):
    rec = tmp_path / "kern.log"
    rec.write_text("".join(f"Jun 11 10:23:{i:02d} n1 kernel: msg {i}\n" for i in range(30)))
    lines, note = kernel_tail(SourceSpec(kernel_log=str(rec)), None, limit=3, time_s=5)
    assert [x.split()[-1] for x in lines] == ["27", "28", "29"] and note == f"3 lines from {rec}"


def test_a_replayed_scenario_has_no_raw_lines_and_the_bundle_says_so(tmp_path, monkeypatch):
    snap = Snapshot(hostname="n1", time=NOW, kernel=KernelLog(source="x.yaml (scenario kernel_log)"))
    lines, note = kernel_tail(SourceSpec(nvml_scenario="x.yaml"), snap, limit=5, time_s=5)
    assert lines == [] and note.startswith("replayed from a scenario")
    assert kernel_tail(SourceSpec(), None, limit=0, time_s=5) == ([], "postmortem_kernel_lines is 0")


def test_bundle_kernel_log_says_why_it_has_no_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(postmortem, "KMSG", str(tmp_path / "missing"))
    out = epilog(tmp_path, monkeypatch, pm_dir(tmp_path))
    path = out.extra["postmortem"]
    text = open(os.path.join(path, "kernel.log")).read()
    assert text.startswith("# no raw lines: kernel log unreadable")
    assert "kernel log unreadable" in open(os.path.join(path, "README.txt")).read()
    assert json.load(open(os.path.join(path, "job.json")))["kernel_log"]["lines"] == 0
