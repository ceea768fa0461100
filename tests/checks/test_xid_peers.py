"""xid on peers' own test lines (issue 51): Xid 150 MSE_WATCHDOG, the NVLink post-RX-detect
failures, and a fallen-off-the-bus line without a PCI domain. The lines are copied from the
peers' suites (tests/fixtures/kernel_log/peers/README.md cites each)."""

from __future__ import annotations

from gpuhc.checks import xid
from gpuhc.model.result import Action, Status
from tests.helpers import peer_lines
from tests.helpers.peer_lines import brief, lines


def judge(text: list[str]):
    return peer_lines.judge(xid.CHECKS[0], text)


def test_xid_150_mse_watchdog_decodes_to_nvidias_reset():
    out = judge(lines("xid150_mse_watchdog_gpud.log"))
    assert brief(out) == [(Status.FAIL, Action.RESET_GPU, "0000:04:00.0")]
    assert "MSE_WATCHDOG/MSE status 0x00000000 (RESET_GPU in NVIDIA's 144-150 decode)" in out.results[0].message


def test_nvlink_post_rx_detect_failures_fail_with_a_reset_and_a_line_not_the_drivers_warns():
    text = lines("nvlink_post_rx_detect_gpud.log")
    for line in text[:2]:  # the driver's two messages (kernel_nvlink_gh100.c, kernel_nvlink.c)
        out = judge([line])
        assert brief(out) == [(Status.FAIL, Action.RESET_GPU, "node")]
        assert "NVLink discovery failed (post-RX-detect link mask)" in out.results[0].message
    # "peer17 postRxDetLinkMask": the driver prints only peer0's and peer1's: not its grammar
    out = judge(text[2:])
    assert brief(out) == [(Status.WARN, Action.NONE, "node")]
    assert "not the driver's exact grammar" in out.results[0].message


def test_fallen_off_the_bus_without_a_pci_domain_warns_and_never_drains():
    # NV_DEV_PRINTF prints the domain always ("%04x:%02x:%02x.%x" in every release since
    # 515.43.04): a line without one is not the driver's, so it is named, never read as a GPU
    no_domain, domain = lines("fallen_off_bus_no_domain_gpud.log")
    out = judge([no_domain])
    assert brief(out) == [(Status.WARN, Action.NONE, "node")]
    assert "GPU 18:00.0: GPU has fallen off the bus." in out.results[0].message
    # the driver's own form, from the same table of gpud's
    assert brief(judge([domain])) == [(Status.FAIL, Action.DRAIN_REBOOT, "0000:29:00.0")]
