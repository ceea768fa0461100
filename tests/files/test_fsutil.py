"""What root writes (gpuhc.files.fsutil) and what text reaches a log (gpuhc.text.logtext).

The ownership rules apply to root; the suite runs as root in CI, and these tests make real
links, modes and owners (``chown`` to nobody) rather than faking the kernel's answers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuhc.export.eventlog import append_event
from gpuhc.files.fsutil import UnsafePath, check_dir_chain, open_append, write_atomic
from gpuhc.text.logtext import escape
from gpuhc.slurm.flows.log import Log
from tests.helpers.paths import REPO

ROOT = REPO
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the ownership rules are root's (CI runs as root)")


def report() -> dict:
    return {"node": "gpu001", "stage": "passive", "status": "pass", "results": []}


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim"
    v.write_text("precious\n")
    return v


# ---------------------------------------------------------------------------- the event log (item 7)


def test_a_symlink_planted_at_the_event_log_is_refused_not_followed(tmp_path, victim):
    """Before: root appended the run's JSON line to whatever the link pointed at."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "events.jsonl").symlink_to(victim)
    err = append_event(str(logs / "events.jsonl"), report())
    assert err == f"refusing event log: {logs / 'events.jsonl'} is a symbolic link; not following it"
    assert victim.read_text() == "precious\n"


def test_a_dangling_symlink_at_the_event_log_creates_nothing(tmp_path):
    """Before: root created the link's target (any path on the node) and wrote to it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    target = tmp_path / "etc-cron.d-evil"
    (logs / "events.jsonl").symlink_to(target)
    err = append_event(str(logs / "events.jsonl"), report())
    assert err == f"refusing event log: {logs / 'events.jsonl'} is a symbolic link; not following it"
    assert not target.exists()


@as_root
def test_a_hard_link_at_the_event_log_is_refused(tmp_path, victim):
    logs = tmp_path / "logs"
    logs.mkdir()
    os.link(victim, logs / "events.jsonl")
    err = append_event(str(logs / "events.jsonl"), report())
    assert err and "has 2 hard links" in err and victim.read_text() == "precious\n"


@as_root
def test_the_event_log_in_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky, like /tmp: anyone may plant a name there before root does
    err = append_event(str(shared / "events.jsonl"), report())
    assert err == f"refusing event log's directory: {shared} is writable by group or others (chmod go-w)"
    assert not (shared / "events.jsonl").exists()


@as_root
def test_root_makes_no_log_directory_inside_a_directory_someone_else_owns(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    err = append_event(str(theirs / "gpuhc" / "events.jsonl"), report())
    assert err and f"{theirs} is owned by uid {NOBODY}, not root" in err
    assert list(theirs.iterdir()) == []


@as_root
def test_a_link_in_the_directory_chain_counts_where_the_link_itself_lives(tmp_path):
    """/x/logs -> /y/logs: /y is root's, but whoever owns /x can point the link anywhere."""
    real = tmp_path / "y" / "logs"
    real.mkdir(parents=True)
    theirs = tmp_path / "x"
    theirs.mkdir()
    (theirs / "logs").symlink_to(real)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match=f"{theirs} is owned by uid {NOBODY}"):
        check_dir_chain(str(theirs / "logs"), "event log's directory")
    check_dir_chain(str(real), "event log's directory")  # the same directory, reached safely


def test_new_log_directories_get_their_mode_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        fd = open_append(str(tmp_path / "a" / "b" / "x.log"), "test log", 0o640, 0o755)
        os.close(fd)
    finally:
        os.umask(old)
    assert oct((tmp_path / "a" / "b").stat().st_mode & 0o777) == "0o755"
    assert oct((tmp_path / "a" / "b" / "x.log").stat().st_mode & 0o777) == "0o640"


# ---------------------------------------------------------------------------- slurm.log_file (item 10)


def test_the_directory_of_slurm_log_file_is_created(tmp_path):
    """Before: a missing directory lost the first epilog's log line."""
    path = tmp_path / "var-log-gpuhc" / "slurm.log"
    Log("gpuhc epilog n1", str(path), use_syslog=False, echo=False)("job 42: post-mortem bundle written")
    (line,) = path.read_text().splitlines()
    assert line.endswith(" gpuhc epilog n1: job 42: post-mortem bundle written")


def test_a_log_line_cannot_be_forged_or_drive_a_terminal(tmp_path):
    path = tmp_path / "slurm.log"
    log = Log("gpuhc healthcheck n1", str(path), use_syslog=False, echo=False)
    log("silent nodes: n2\n2026-01-01T00:00:00 gpuhc healthcheck n9: drained\r\x1b[2Jn3")
    (line,) = path.read_text().splitlines()
    assert "\x1b" not in line and "\r" not in line
    assert line.endswith(r"n2 2026-01-01T00:00:00 gpuhc healthcheck n9: drained \x1b[2Jn3")


# ---------------------------------------------------------------------------- whole-file writes


@as_root
def test_a_snapshot_may_replace_a_link_in_a_shared_directory_but_never_follow_it(tmp_path, victim):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "node.yaml").symlink_to(victim)
    write_atomic(str(shared / "node.yaml"), b"snapshot\n", 0o644, "snapshot")
    assert not (shared / "node.yaml").is_symlink() and (shared / "node.yaml").read_text() == "snapshot\n"
    assert victim.read_text() == "precious\n"


@as_root
def test_a_snapshot_under_a_directory_someone_else_owns_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    (theirs / "out").mkdir(parents=True)
    os.chown(theirs, NOBODY, NOBODY)
    p = subprocess.run([sys.executable, "-m", "gpuhc", "snapshot", "--nvml-scenario",
                        str(ROOT / "examples" / "scenarios" / "healthy-8xh100.yaml"), "-o", str(theirs / "out" / "s.yaml")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"gpuhc: error: refusing snapshot's directory (in {theirs}, a directory above it): "
                                f"{theirs} is owned by uid {NOBODY}, not root")
    assert not (theirs / "out" / "s.yaml").exists()


# ---------------------------------------------------------------------------- log text (item 8)


@given(st.text())
def test_escaped_text_is_one_printable_line(text):
    out = escape(text)
    assert out.isprintable()
    if text.isprintable():
        assert out == text  # ordinary text is untouched


def test_escapes_are_visible():
    assert escape("a\nb\rc\x1b[31md\u202ee\tf") == r"a\x0ab\x0dc\x1b[31md\u202ee f"
    assert escape("x" * 10, cap=4) == "xxxx..."


def test_errors_on_the_command_line_are_escaped(tmp_path):
    """A path (or any quoted text) with a newline in it cannot forge a second line in a log."""
    cfg = tmp_path / "a\ngpuhc: error: forged.yaml"
    cfg.write_text("bogus: 1\n")
    p = subprocess.run([sys.executable, "-m", "gpuhc", "config", "validate", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"gpuhc: error: {tmp_path}/a\\x0agpuhc: error: forged.yaml:1: bogus: unknown key")


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply as root (CI runs as root)")
def test_a_config_link_a_user_placed_in_sticky_tmp_is_refused(tmp_path):
    """Issue 29: the same rule as the test scenario's for the config itself: a user's link in a
    sticky shared directory is refused, even to a root-owned file in a root-owned directory."""
    from gpuhc.config.load import check_file_safety
    from gpuhc.errors import ConfigError

    safe = tmp_path / "etc"
    safe.mkdir(mode=0o755)
    real = safe / "gpuhc.yaml"
    real.write_text("slurm: {}\n")
    real.chmod(0o644)
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    link = sticky / "gpuhc.yaml"
    link.symlink_to(real)
    os.lchown(link, 1000, 1000)
    with pytest.raises(ConfigError, match="is a link owned by uid 1000, not root"):
        check_file_safety(str(link), "config")
    os.lchown(link, 0, 0)  # the same link, root's: followed, and the real path returned
    from gpuhc.files.fsutil import check_trusted_file

    assert check_trusted_file(str(link), "config") == str(real)


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply as root (CI runs as root)")
def test_a_program_found_on_path_or_configured_runs_only_under_the_program_rule(tmp_path, monkeypatch):
    """Issue 29: the Slurm clients, dmesg, dcgmi, nvidia-bug-report.sh found on PATH (or
    configured) are run as root only when root's, in root's directories: a copy in a directory
    others can write is refused, said, and never run."""
    from gpuhc.errors import SlurmError
    from gpuhc.files.fsutil import trusted_which
    from gpuhc.slurm.act.command import SlurmCommand

    ran = tmp_path / "ran"
    drop = tmp_path / "drop"
    drop.mkdir()
    drop.chmod(0o777)
    prog = drop / "sinfo"
    prog.write_text(f"#!/bin/sh\ntouch {ran}\n")
    prog.chmod(0o755)
    monkeypatch.setenv("PATH", f"{drop}:/usr/bin:/bin")
    with pytest.raises(UnsafePath, match="writable by group or others"):
        trusted_which("sinfo", "sinfo")
    with pytest.raises(SlurmError, match="cannot run .*writable by group or others"):
        SlurmCommand().call(["sinfo", "-h"])
    with pytest.raises(SlurmError, match="cannot run"):
        SlurmCommand(paths={"sinfo": str(prog)}).call(["sinfo", "-h"])
    from gpuhc.slurm.repair.gpureset import run_argv  # systemctl, nvidia-smi, the reset command

    got = run_argv([str(prog), "stop", "x"], 5.0)
    assert not got.ok and "not run" in got.detail and "writable by group or others" in got.detail
    assert not ran.exists()
    drop.chmod(0o755)  # root's alone now: found, and its real path returned
    assert trusted_which("sinfo", "sinfo") == str(prog)


def test_a_scratch_directory_is_private_and_removed_with_what_it_holds(tmp_path, monkeypatch):
    """Replays judge in one (gpuhc/cli/common.py replay_scope); a link inside is removed, never
    followed: what it points at stays."""
    from gpuhc.files.fsutil import scratch_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    with scratch_dir("gpuhc-replay-") as path:
        assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith("gpuhc-replay-")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        os.makedirs(os.path.join(path, "sub"))
        open(os.path.join(path, "sub", "state.json"), "w").close()
        os.symlink(outside, os.path.join(path, "link"))
    assert not os.path.exists(path)
    assert (outside / "keep").read_text() == "x"
