"""The kernel's own AER, machine-check, EDAC and mlx5 cable lines (gpuhc/sources/kernel_log_host.py),
read from real logs (tests/fixtures/host/README.md), under the same record rules as the driver's."""

from __future__ import annotations

import pytest

from gpuhc.model.kernel import EventKind
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.paths import FIXTURES

HOST = FIXTURES / "host"


def events(name: str):
    return [(e.kind, e.state, e.pci, e.device, e.code) for e in parse_lines((HOST / name).read_text().splitlines()).events]


def test_gpu_and_root_port_aer_with_failed_recovery():
    got = events("aer_gpu_root_port_fatal_returnn.log")
    A = EventKind.AER
    assert got == [
        (A, "recovery_failed", "0000:03:00.0", "nvidia 0000:03:00.0", None),
        (A, "recovery_failed", "0000:03:00.1", "snd_hda_intel 0000:03:00.1", None),
        (A, "recovery_failed", "0000:00:03.0", "pcieport 0000:00:03.0", None),
        (A, "fatal", "0000:00:03.0", "pcieport 0000:00:03.0", None),  # its "PCIe Bus Error" detail joined it
        (A, "recovery_failed", "0000:03:00.0", "nvidia 0000:03:00.0", None),
        (A, "recovery_failed", "0000:03:00.1", "snd_hda_intel 0000:03:00.1", None),
        (A, "recovery_failed", "0000:00:03.0", "pcieport 0000:00:03.0", None),
    ]


def test_corrected_reports_count_once_each_detail_joined():
    got = events("aer_corrected_healthy_archfan.log")
    assert [(k, s, p) for k, s, p, _d, _c in got] == [(EventKind.AER, "corrected", "0000:00:1c.1")] * 3


def test_a_detail_line_without_its_report_is_the_event():
    got = events("aer_egpu_nonfatal_ogkm1229.log")  # the report line there is paraphrased: not the kernel's words
    assert (EventKind.AER, "recovery_failed", "0000:63:00.0", "nvidia 0000:63:00.0", None) in got
    assert [e for e in got if e[1] == "nonfatal"] == []  # "PCIe Bus Error: Uncorrectable..." lacks "severity="


@pytest.mark.parametrize("name, want", [
    ("mce_edac_ce_healthy_openstreetmap.log", [("logged", None, 1), ("corrected", "MC0", 4)]),
    ("mce_edac_ce_storm_dunkel.log", [("corrected", "MC1", 262)]),
    ("mce_uncorrected_bank_nuc.log", [("logged", None, 1), ("uncorrected", "CPU0", 1)]),  # status a6...: UC set
    ("mce_ghes_recoverable_memory_failure_mcelog74.log", [("uncorrected", "GHES", 1), ("uncorrected", "memory", 1)]),
])
def test_machine_checks(name, want):
    assert [(s, d, c) for k, s, _p, d, c in events(name) if k is EventKind.MCE] == want


def test_edac_decoder_lines_and_mcelog_program_lines_are_not_events():
    got = events("mce_uncorrected_bank_nuc.log")
    assert len(got) == 2  # "mcelog[987]: ..." is a program's line; "mce: CPU supports" names no error


def test_mlx5_cable_event():
    assert events("mlx5_module_high_temp_gpud.log") == [(EventKind.IB_MODULE, "Cable error", "0000:5c:00.0", None, None)]


def test_a_corrected_bank_status_is_corrected():
    line = "[ 10.0] mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 7: 8c00004f000800c2"  # the radiasoft bank, UC clear
    assert [(e.state, e.device) for e in parse_lines([line]).events] == [("corrected", "CPU2")]


@pytest.mark.parametrize("line", [
    # a user's record in /dev/kmsg (facility 1): never the kernel's words
    "12,100,5000000,-;pcieport 0000:00:03.0: AER: device recovery failed",
    # a process named like the kernel's prefix: the segfault line starts with its name
    "[ 5.0] EDAC MC0: 1 UE[4242]: segfault at 0 ip 0 sp 0 error 4",
    # a syslog line a program wrote
    "Sep 16 19:51:15 host mcelog[987]: mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 4: a600000000020408",
])
def test_only_kernel_records_count(line):
    assert parse_lines([line]).events == []


def test_cables_plugged_in_then_the_links_up():
    got = [(e.kind, e.state, e.pci, e.port) for e in
           parse_lines((HOST / "mlx5_cable_plugged_link_up_jishuzhan.log").read_text().splitlines()).events]
    assert got == [(EventKind.IB_MODULE, "Cable plugged", "0000:01:00.0", 0),
                   (EventKind.IB_MODULE, "Cable plugged", "0000:01:00.1", 1),
                   (EventKind.IB_LINK, "ACTIVE", "0000:01:00.0", 1),  # the netdev lines: port 1 of each function
                   (EventKind.IB_LINK, "ACTIVE", "0000:01:00.1", 1)]
