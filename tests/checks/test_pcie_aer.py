"""pcie-aer: the kernel's AER reports on the devices a GPU job needs (gpuhc/checks/pcie_aer.py),
on real logs (tests/fixtures/host/README.md) and on a node whose sysfs names the bridges."""

from __future__ import annotations

from dataclasses import replace

from gpuhc.checks import pcie_aer
from gpuhc.model.host import HostReading
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.paths import FIXTURES
from tests.helpers.snapshots import PCI_IDS, context, healthy_node

CHECK = pcie_aer.CHECKS[0]


def klog(*lines: str, name: str | None = None):
    text = (FIXTURES / "host" / name).read_text().splitlines() if name else list(lines)
    log = parse_lines(text)
    log.boot_id = "boot-a"
    return log


def judge(snap, prev=None, **t):
    return CHECK.judge(snap, context(CHECK, prev=prev, **t))


def brief(out):
    return sorted((r.status, r.subject, r.action) for r in out.results)


def test_fatal_on_a_gpus_root_port_with_failed_recovery_fails_drain_reboot():
    snap = replace(healthy_node(1), kernel=klog(name="aer_gpu_root_port_fatal_returnn.log"))
    out = judge(snap)
    fails = {r.subject: r for r in out.results if r.status is Status.FAIL}
    assert set(fails) == {"0000:00:03.0", "0000:03:00.0", "0000:03:00.1"}
    assert all(r.action is Action.DRAIN_REBOOT for r in fails.values())
    assert any("bridge above GPU 0000:03:00.0" in r.message for r in fails.values())


def test_held_until_reboot_and_released_by_it():
    snap = replace(healthy_node(1), kernel=klog(name="aer_gpu_root_port_fatal_returnn.log"))
    first = judge(snap)
    empty = klog("[ 1.0] nothing of note")
    again = judge(replace(snap, kernel=empty), prev=first.state)
    assert any(r.status is Status.FAIL for r in again.results)  # the ring buffer forgot; the check did not
    empty2 = klog("[ 1.0] nothing of note")
    empty2.boot_id = "boot-b"
    after = judge(replace(snap, kernel=empty2), prev=first.state)
    assert [r.status for r in after.results] == [Status.PASS]


def test_bridge_named_only_by_sysfs_fails():
    gpu = PCI_IDS[0]
    line = "[ 5.0] pcieport 0000:16:02.0: AER: Uncorrectable (Fatal) error message received from 0000:16:02.0"
    host = HostReading(pci_watch={gpu: {"role": "gpu", "upstream": ["0000:17:00.0", "0000:16:02.0"]}})
    out = judge(replace(healthy_node(1), kernel=klog(line), host=host))
    assert brief(out) == [(Status.FAIL, "0000:16:02.0", Action.DRAIN_REBOOT)]
    assert "bridge above gpu0" in out.results[0].message
    # the same line on a node whose sysfs puts that port above nothing of a job's: a warning
    other = HostReading(pci_watch={gpu: {"role": "gpu", "upstream": ["0000:17:00.0"]}})
    out = judge(replace(healthy_node(1), kernel=klog(line), host=other))
    assert brief(out) == [(Status.WARN, "0000:16:02.0", Action.NONE)]


def test_error_on_an_nvml_gpu_is_that_gpus():
    line = f"[ 5.0] pcieport 0000:17:00.0: AER: Uncorrected (Fatal) error received: {PCI_IDS[0]}"
    out = judge(replace(healthy_node(2), kernel=klog(line)))
    assert brief(out) == [(Status.FAIL, "gpu0", Action.DRAIN_REBOOT)]
    assert out.results[0].message == "PCIe AER uncorrected (fatal) error on gpu0 (0000:18:00.0)"


def test_a_recovered_non_fatal_error_is_counted_in_the_rate_not_drained():
    # issue 43: a non-fatal error the kernel recovered from lost no data; its recovery failing
    # would be its own line (the ogkm1229 fixture below), and that one drains
    line = f"[ 5.0] pcieport 0000:17:00.0: AER: Uncorrected (Non-Fatal) error received: {PCI_IDS[0]}"
    out = judge(replace(healthy_node(2), kernel=klog(line)))
    assert brief(out) == [(Status.PASS, "node", Action.NONE)] and out.results[0].value == 1
    many = [f"[ {5 + i}.0] pcieport 0000:17:00.0: AER: Uncorrected (Non-Fatal) error received: {PCI_IDS[0]}"
            for i in range(10)]
    out = judge(replace(healthy_node(2), kernel=klog(*many)))
    assert [(r.status, r.evidence) for r in out.results] == [(Status.WARN, "aer-corrected")]


def test_a_non_fatal_error_whose_recovery_failed_drains():
    out = judge(replace(healthy_node(1), kernel=klog(name="aer_egpu_nonfatal_ogkm1229.log")))
    fails = {r.subject for r in out.results if r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT}
    assert "0000:63:00.0" in fails


def test_healthy_log_with_corrected_errors_passes():
    out = judge(replace(healthy_node(1), kernel=klog(name="aer_corrected_healthy_archfan.log")))
    assert [r.status for r in out.results] == [Status.PASS]


def test_corrected_rate_warns_and_fails_only_when_set():
    lines = [f"[ {10 + i}.0] pcieport 0000:00:1c.1: AER: Corrected error received: {PCI_IDS[0]}" for i in range(12)]
    snap = replace(healthy_node(1), kernel=klog(*lines))
    assert brief(judge(snap)) == [(Status.WARN, PCI_IDS[0], Action.NONE)]
    assert brief(judge(snap, corrected_fail=12)) == [(Status.FAIL, PCI_IDS[0], Action.DRAIN_TICKET)]
    assert judge(snap, corrected_fail=12).results[0].evidence == "aer-corrected"  # drains once held (gpuhc/run/hold.py)
    assert [r.status for r in judge(snap, corrected_warn=13).results] == [Status.PASS]


def test_bad_thresholds_are_named():
    assert CHECK.validate({**CHECK.defaults, "corrected_warn": 0}) == [
        "corrected_warn: want a whole number of errors >= 1, or null (off), got 0"]


def test_no_kernel_log_is_an_error_never_a_drain():
    out = judge(healthy_node(1))
    assert [r.status for r in out.results] == [Status.ERROR]
