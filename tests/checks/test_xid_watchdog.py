"""The RC watchdog's "GPU is probably locked" (a driver lock-up without an Xid of its own) and the
Xid 8 its recovery logs: one incident, the lock-up's verdict with the GPU the Xid names reset
(gpuhc/checks/xid_joined.py), on real logs (tests/fixtures/host/README.md)."""

from __future__ import annotations

from dataclasses import replace

from gpuhc.checks import xid
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.paths import FIXTURES
from tests.helpers.snapshots import context, healthy_node, with_gpu

CHECK = xid.CHECKS[0]
WATCHDOG = "NVRM: krcWatchdog_IMPL: RC watchdog: GPU is probably locked!  Notify Timeout Seconds: 7"


def judge(lines, node=None):
    log = parse_lines(lines)
    log.boot_id = "boot-a"
    return CHECK.judge(replace(node or healthy_node(1), kernel=log), context(CHECK))


def test_the_lock_up_then_xid_8_fails_with_a_reset_of_the_gpu_the_xid_names():
    lines = (FIXTURES / "host" / "rc_watchdog_xid8_llamacpp.log").read_text().splitlines()
    out = judge(lines, with_gpu(healthy_node(1), 0, pci_bus_id="00000000:01:00.0"))
    assert [(r.status, r.subject, r.action) for r in out.results] == [(Status.FAIL, "gpu0", Action.RESET_GPU)]
    assert out.results[0].message == ("gpu0 (0000:01:00.0): GPU locked (RC watchdog timed out) "
                                      "(driver message, then Xid 8)")
    # a GPU NVML does not list keeps its PCI id; the ladder has no gpuN to reset and goes on to reboot
    out = judge(lines)
    assert [(r.status, r.subject, r.action) for r in out.results] == [(Status.FAIL, "0000:01:00.0", Action.RESET_GPU)]


def test_the_lock_up_then_another_xid_is_not_joined_and_names_no_gpu_to_reset():
    # real: the watchdog, then an Xid 109 a second later (not the recovery's Xid 8)
    out = judge((FIXTURES / "host" / "rc_watchdog_then_xid109_ogkm_pr1031.log").read_text().splitlines())
    assert (Status.FAIL, "node", Action.DRAIN_REBOOT) in [(r.status, r.subject, r.action) for r in out.results]
    assert "(driver message, no Xid)" in next(r.message for r in out.results if r.subject == "node")


def test_xid_8_alone_still_only_warns():
    line = "[ 9.0] NVRM: Xid (PCI:0000:18:00): 8, pid=1, name=python, channel 0x00000027"
    out = judge([line])
    assert [(r.status, r.action) for r in out.results] == [(Status.WARN, Action.RESTART_APP)]


def test_the_lock_up_alone_fails_and_a_distant_xid_8_stays_its_own():
    out = judge([f"[ 100.0] {WATCHDOG}", "[ 500.0] NVRM: Xid (PCI:0000:18:00): 8, pid=1, name=python, channel 0x1"])
    assert {(r.status, r.subject) for r in out.results} == {(Status.WARN, "gpu0"), (Status.FAIL, "node")}


def test_a_process_named_like_the_watchdog_is_nothing():
    out = judge(["[ 9.0] RC watchdog: G[4242]: segfault at 0 ip 0 sp 0 error 4"])
    assert [r.status for r in out.results] == [Status.PASS]
