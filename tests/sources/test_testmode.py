"""Site test mode (gpuhc/sources/testmode.py): a scenario an admin put in place, replayed as
the node with its times moved to when it was placed, a link to it followed only when root's.

The scenarios are the shipped ones (examples/scenarios); the runs go through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhc.errors import SourceError
from gpuhc.sources import SourceSpec, build_sources, testmode
from tests.helpers.paths import REPO
from tests.helpers.trusted import trusted_copy

SCENARIOS = REPO / "examples" / "scenarios"
XID79 = SCENARIOS / "xid79-fallen-off-bus.yaml"
HEALTHY = SCENARIOS / "healthy-8xh100.yaml"

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="ownership rules apply as root (CI runs as root)")


def place(tmp_path: Path, target: Path, name: str = "scenario.yaml") -> Path:
    """Copy the shipped scenarios into a root-owned directory, with root's modes whatever the
    checkout's (tests/helpers/trusted.py), and link ``name`` to one of them."""
    lib = tmp_path / "scenarios"
    if not lib.exists():
        trusted_copy(SCENARIOS, lib)
    link = tmp_path / name
    if link.is_symlink():
        link.unlink()
    link.symlink_to(lib / target.name)
    return link


def read_log(path: Path):
    src = build_sources(SourceSpec(test_scenario=str(path)))
    return src, src.kernel_log.read()


def test_scenario_times_move_to_when_it_was_placed(tmp_path):
    before = time.time()
    link = place(tmp_path, XID79)
    src, log = read_log(link)
    assert src.replay is False  # judged at the real clock, like the node's own log
    xids = [e for e in log.events if e.code == 79]
    assert xids, "the Xid 79 of the scenario must still be there"
    # its last line (10:05:00) is when the link was made; the Xid (10:03:12.448) 107.55 s before
    assert before - 2 <= log.last_time <= time.time() + 2
    assert log.last_time - xids[0].time == pytest.approx(107.55, abs=0.01)
    # the same on every read: a run is not a new incident
    assert read_log(link)[1].last_time == log.last_time


def test_placing_it_again_makes_its_events_happen_again(tmp_path):
    link = place(tmp_path, XID79)
    first = read_log(link)[1].last_time
    time.sleep(1.1)
    assert read_log(link)[1].last_time == first  # a run later: the same moment
    place(tmp_path, HEALTHY)
    place(tmp_path, XID79)  # ln -sfn again
    assert read_log(link)[1].last_time >= first + 1


def test_scenario_without_a_kernel_log_is_an_empty_log_not_the_hosts(tmp_path):
    bare = tmp_path / "bare.yaml"
    bare.write_text("count: 0\n")
    src, log = read_log(bare)
    assert log.events == [] and "bare.yaml" in log.source


def test_command_line_scenario_wins_over_the_test_scenario(tmp_path):
    link = place(tmp_path, XID79)
    src = build_sources(SourceSpec(nvml_scenario=str(HEALTHY), test_scenario=str(link)))
    assert src.replay is True  # the command line's replay, judged at its own time
    assert all(e.code != 79 for e in src.kernel_log.read().events)


@root_only
def test_a_link_someone_else_owns_is_not_followed(tmp_path):
    link = place(tmp_path, XID79)
    os.lchown(link, 1000, 1000)
    with pytest.raises(SourceError, match=r"scenario.yaml is a link owned by uid 1000, not root"):
        testmode.resolve(str(link))


@root_only
def test_a_link_in_a_directory_others_can_write_is_not_followed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    link = place(shared, XID79)
    shared.chmod(0o777)
    with pytest.raises(SourceError, match="writable by group or others"):
        testmode.resolve(str(link))


@root_only
def test_a_link_to_a_file_someone_else_owns_is_not_followed(tmp_path):
    link = place(tmp_path, XID79)
    os.chown(tmp_path / "scenarios" / XID79.name, 1000, 1000)
    with pytest.raises(SourceError, match="owned by uid 1000, not root"):
        testmode.resolve(str(link))


def test_a_plain_file_is_read_where_it_is(tmp_path):
    path = tmp_path / "x.yaml"
    shutil.copy(XID79, path)
    (tmp_path / HEALTHY.name).write_text(HEALTHY.read_text())
    real, placed = testmode.resolve(str(path))
    assert real == str(path) and abs(placed - time.time()) < 5


def test_config_switch_replays_as_this_node_through_the_cli(tmp_path):
    """`sources.test_scenario` in a host override: the node is judged live (its own name, its
    own state, the event log written), on the scenario's fault as of when it was placed."""
    link = place(tmp_path, XID79)
    cfg = tmp_path / "gpuhc.yaml"
    (tmp_path / "kernel.log").write_text("")
    # cpu008 reads a recorded (empty) log: the host's /dev/kmsg carries driver-like lines that
    # other tests plant on purpose (tests/sources/test_kernel_log_realkernel.py).
    cfg.write_text(f"output:\n  event_log: {tmp_path}/events.jsonl\nhosts:\n"
                   f"  - match: cpu007\n    sources:\n      test_scenario: {link}\n"
                   f"  - match: cpu008\n    sources:\n      kernel_log: {tmp_path}/kernel.log\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHC_", "SLURM"))}
    env.update(GPUHC_CONFIG=str(cfg), GPUHC_STATE_DIR=str(tmp_path / "state"), GPUHC_CACHE_DIR="")
    cp = subprocess.run([sys.executable, "-m", "gpuhc", "check", "--node", "cpu007", "--json"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert cp.returncode == 1, cp.stderr
    report = json.loads(cp.stdout)
    assert report["node"] == "cpu007" and not report.get("replay")
    xid = [r for r in report["results"] if r["check"] == "xid" and r["status"] == "fail"]
    assert xid and "79" in xid[0]["message"], report["results"]
    assert (tmp_path / "events.jsonl").exists()  # a live run writes its event log
    # another node of the same config reads its own (GPU-less) self: no Xid 79 there
    env["GPUHC_STATE_DIR"] = str(tmp_path / "state8")
    cp = subprocess.run([sys.executable, "-m", "gpuhc", "check", "--node", "cpu008", "--json"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert "79" not in " ".join(r["message"] for r in json.loads(cp.stdout)["results"] if r["check"] == "xid")


def test_a_missing_test_scenario_is_a_config_error_naming_the_key(tmp_path):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(f"sources:\n  test_scenario: {tmp_path}/nope.yaml\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUHC_", "SLURM"))}
    env.update(GPUHC_CONFIG=str(cfg), GPUHC_STATE_DIR=str(tmp_path / "state"), GPUHC_CACHE_DIR="")
    cp = subprocess.run([sys.executable, "-m", "gpuhc", "check"], capture_output=True, text=True, env=env, timeout=120)
    assert cp.returncode == 2 and "sources.test_scenario" in cp.stderr and "no such file" in cp.stderr, cp.stderr
    assert "Traceback" not in cp.stderr


@root_only
def test_a_users_plain_file_in_a_world_writable_directory_is_refused(tmp_path):
    """Issue 29: not only links: a user-owned regular file put where the config points (a
    world-writable directory) would be replayed as the node's own hardware and drain it."""
    shared = tmp_path / "drop"
    shared.mkdir()
    shared.chmod(0o1777)
    path = shared / "scenario.yaml"
    shutil.copy(XID79, path)
    # the user's own file, then root's file that others may write: both refused, each said
    for owner, mode, why in ((1000, 0o644, r"sources\.test_scenario: .*owned by uid 1000, not root"),
                             (0, 0o666, "writable by group or others")):
        os.chown(path, owner, owner)
        path.chmod(mode)
        with pytest.raises(SourceError, match=why):
            testmode.resolve(str(path))


@root_only
def test_a_root_link_through_a_users_link_is_refused(tmp_path):
    """Every link on the way counts: a root-owned link to a user's link to a root-owned file."""
    link = place(tmp_path, XID79)
    hop = tmp_path / "hop.yaml"
    hop.symlink_to(tmp_path / "scenarios" / XID79.name)
    os.lchown(hop, 1000, 1000)
    link.unlink()
    link.symlink_to(hop)
    with pytest.raises(SourceError, match=r"hop\.yaml is a link owned by uid 1000, not root"):
        testmode.resolve(str(link))
