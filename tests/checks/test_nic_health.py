"""nic-health: the mlx5 driver's fatal health words fail, its warnings warn, port up/down alone
is not its business (gpuhc/checks/nic_health.py), on peers' and real lines
(tests/fixtures/node/README.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuhc.checks import infiniband_downtime, nic_health
from gpuhc.model.host import IbPort
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines as parse
from tests.helpers.paths import FIXTURES
from tests.helpers.snapshots import T0, context, healthy_node

CHECK = nic_health.CHECKS[0]


def node(lines):
    log = parse(lines)
    log.boot_id = "boot-a"
    return replace(healthy_node(1, time=log.last_time or T0), kernel=log)


def fixture(*path):
    return (FIXTURES.joinpath(*path)).read_text().splitlines()


def judge(snap, prev=None):
    return CHECK.judge(snap, context(CHECK, prev=prev))


def brief(out):
    return [(r.status, r.subject, r.action) for r in out.results]


def test_firmware_fatal_and_a_command_time_out_fail_per_function():
    out = judge(node(fixture("node", "mlx5_fatal_nvsentinel_e2e.log")))
    assert brief(out) == [(Status.FAIL, "0000:03:00.0", Action.DRAIN_TICKET),
                          (Status.FAIL, "0000:41:00.0", Action.DRAIN_TICKET)]
    assert "firmware command timed out" in out.results[0].message
    assert out.results[1].value["states"] == ["miss_count", "syndrome"]
    assert {r.evidence for r in out.results} == {"nic-firmware"}
    held = judge(node(fixture("node", "mlx5_fatal_nvsentinel_e2e.log")), prev=out.state)
    assert brief(held) == brief(out)


def test_a_command_time_out_alone_fails():
    assert brief(judge(node(fixture("node", "mlx5_cmd_timeout_nvsentinel_unit.log")))) == [
        (Status.FAIL, "0000:03:00.0", Action.DRAIN_TICKET)]


def test_slot_power_and_a_hot_module_warn_and_a_malformed_watchdog_line_is_nothing():
    out = judge(node(fixture("node", "mlx5_warnings_nvsentinel_e2e.log")))
    assert brief(out) == [(Status.WARN, "0000:01:00.0", Action.NONE), (Status.WARN, "0000:5c:00.0", Action.NONE)]
    assert "insufficient power" in out.results[0].message and "high temperature" in out.results[1].message


@pytest.mark.parametrize("path", [("host", "mlx5_cable_plugged_link_up_jishuzhan.log"),
                                  ("kernel_log", "real", "08_dmesg_sxid22013_and_mlx5_ib_link_flap_h100_slurmv4.log"),
                                  ("kernel_log", "real", "04_journalctl-k_b200_fallen_off_bus_mlx5_link_init_active.log")])
def test_port_up_and_down_without_a_health_event_passes(path):
    assert [r.status for r in judge(node(fixture(*path))).results] == [Status.PASS]


def test_the_fatal_health_counts_as_the_port_down():
    log = parse(fixture("node", "mlx5_fatal_nvsentinel_e2e.log"))
    port = IbPort(device="mlx5_1", port=1, state="ACTIVE", phys_state="LinkUp", rate_gbps=400.0, pci="0000:41:00.0")
    assert infiniband_downtime.events_for(port, "0000:41:00.0", log.events) == [(17.982092, False), (17.982217, False)]
    assert infiniband_downtime.events_for(port, "0000:99:00.0", log.events) == []


# Real captures (tests/fixtures/kernel_log/real/README.md, issue 46): the firmware's fatal words on
# four machines and kernels 5.6 to 6.x fail the function they name, drain + hardware ticket.
REAL_FATAL = {
    "dmesg_mlx5_miss_count_high_temp_then_fatal_cx6dx_note.log": {
        "0000:41:00.0": ["miss_count", "syndrome", "fatal_error", "recovery_failed"],
        "0000:41:00.1": ["miss_count", "syndrome", "fatal_error", "recovery_failed"]},
    "dmesg_mlx5_miss_count_health_issue_error_vdpa_cx6dx_qemu_devel.log": {
        "0000:0d:00.0": ["miss_count", "health_issue"], "0000:0d:00.2": ["miss_count"],
        "0000:0d:00.3": ["miss_count"], "0000:0d:00.4": ["miss_count"],
        "0000:0d:00.1": ["miss_count", "health_issue"], "0000:0d:00.5": ["miss_count"]},
    "dmesg_mlx5_fatal_error_hot_unplug_s390_v58rc4_netdev.log": {"0000:00:00.0": ["fatal_error", "syndrome"]},
    "dmesg_mlx5_fatal_error_recovery_aborted_s390_v57_netdev.log": {
        "0001:00:00.0": ["fatal_error", "syndrome", "recovery_failed"]},
    "dmesg_mlx5_synd_irisc_not_responding_unwrapped_power9_netdev.log": {"0001:19:00.0": ["syndrome"]},
}


@pytest.mark.parametrize("name", sorted(REAL_FATAL))
def test_real_firmware_fatal_fails_each_function_it_names(name):
    out = judge(node(fixture("kernel_log", "real", name)))
    want = REAL_FATAL[name]
    assert brief(out) == [(Status.FAIL, pci, Action.DRAIN_TICKET) for pci in want]
    for r in out.results:
        assert r.value["states"] == want[r.subject]
        assert r.message.startswith(f"NIC {r.subject}: ") and r.evidence == "nic-firmware"


def test_a_buffer_dump_counts_once_and_quotes_its_syndrome():
    # before: each assert_var word of the dump was an event of its own ("syndrome x6")
    (r,) = judge(node(fixture("kernel_log", "real", "dmesg_mlx5_synd_irisc_not_responding_unwrapped_power9_netdev.log"))).results
    assert r.value["count"] == 1 and " x" not in r.message
    assert r.value["last_message"].endswith("synd 0x7: irisc not responding")


def test_real_port_flaps_pass_and_the_adapters_own_heat_warns_never_fails():
    lines = fixture("kernel_log", "real", "dmesg_mlx5_link_up_down_temp_warn_cx6dx_note.log")
    flaps = [ln for ln in lines if "temp_warn" not in ln]
    assert [r.status for r in judge(node(flaps)).results] == [Status.PASS]
    out = judge(node(lines))
    assert brief(out) == [(Status.WARN, "0000:41:00.0", Action.NONE), (Status.WARN, "0000:41:00.1", Action.NONE)]
    assert all("adapter high temperature" in r.message for r in out.results)
    # the same node 80 s later: the health counter stops on "synd 0x10: High temperature" and fails
    later = lines + fixture("kernel_log", "real", "dmesg_mlx5_miss_count_high_temp_then_fatal_cx6dx_note.log")
    assert {(r.status, r.subject) for r in judge(node(later), prev=out.state).results} == {
        (Status.FAIL, "0000:41:00.0"), (Status.FAIL, "0000:41:00.1")}
