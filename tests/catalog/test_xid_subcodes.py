"""Xid 144-150 sub-codes: decoded by driver branch and judged by NVIDIA's action for each
(issue 19). Lines marked "real" are from tests/fixtures/kernel_log/real/ (sources in its
README); the others are built from NVIDIA's decode table where no public line shows that
sub-code, and say so."""

from __future__ import annotations

import pytest

from gpuhc.checks import xid
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines
from gpuhc.catalog.xid_subcodes import buckets, decode, table, units
from tests.helpers.snapshots import context, healthy_node

# real: leptonai/gpud pull requests 1174 and 1160 (GB200 and B200 kmsg examples)
REAL_V1_NETIR = "Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
REAL_V1_LINK = "Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
REAL_V1_RXPIPE = "Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
REAL_V2_SAW = "Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)"


@pytest.mark.parametrize("message, unit, bucket, branch", [
    (REAL_V1_NETIR, "NETIR/NETIR_INT", "RESET_GPU", "v1"),  # link fatal
    (REAL_V1_LINK, "NETIR_LINK_EVT/NETIR_LINK_DOWN", "RESET_GPU", "v1"),  # link-down reason 0b100101: peer side
    (REAL_V1_RXPIPE, "RLW_RXPIPE", "IGNORE", "v1"),
    (REAL_V2_SAW, "SAW_MVB", "IGNORE", "v2"),
])
def test_real_lines_decode_by_the_branch_their_intr_info_fits(message, unit, bucket, branch):
    v = decode(int(message.split("): ")[1].split(",")[0]), message, None)
    assert (v.unit, v.bucket, v.branch) == (unit, bucket, branch)


def test_the_driver_branch_is_tried_first_and_the_printed_unit_decides():
    # built from the table: RLW_REMAP (unit 4) with status 0x40 is RESET_GPU. Coded for R575+
    # (intrInfo bits 6:0 = 4) or for earlier drivers (bits 9:5 = 4, bits 4:0 = 145 - 143).
    v2 = "Xid (PCI:0000:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 3 (0x00000004 0x00000040 0x0 0x0 0x0 0x0)"
    v1 = "Xid (PCI:0000:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 3 (0x00000082 0x00000040 0x0 0x0 0x0 0x0)"
    assert (decode(145, v2, "575.57.08").branch, decode(145, v1, "570.133.20").branch) == ("v2", "v1")
    # a line of the other branch (a log across a driver update) still decodes, by its own fit
    assert decode(145, v1, "580.65.06").branch == "v1" and decode(145, v1, "580.65.06").bucket == "RESET_GPU"
    # the branch matters where both fit: RLW_RXPIPE's second decode reads bit 10 (v1) or bit 7 (v2)
    rx = "Xid (PCI:0000:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 3 (0x000004c2 0x00000002 0x0)"
    assert decode(145, rx, "570.1").bucket == "RESET_GPU"  # v1: unit 6 and bit 10 set
    # the printed unit must be the decoded one: a line whose name disagrees does not decode
    assert decode(145, v2.replace("RLW_REMAP", "RLW_TAGSTATE"), "575.57.08") is None


def test_several_status_bits_take_the_worst_and_rxpipe_action2_resets():
    remap = "Xid (PCI:0000:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 3 (0x00000004 0x{:08x} 0x0)"
    assert decode(145, remap.format(0x101), "575.1").bucket == "XID_154_EVAL"  # 0x1 EVAL + 0x100 IGNORE
    assert decode(145, remap.format(0x180), "575.1").bucket == "RESET_GPU"  # 0x80 RESET + 0x100 IGNORE
    assert decode(145, remap.format(0x400), "575.1") is None  # a bit NVIDIA does not list: not decoded
    rx = "Xid (PCI:0000:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 3 (0x{:08x} 0x00000002 0x0)"
    assert decode(145, rx.format(0x06), "575.1").bucket == "IGNORE"
    assert decode(145, rx.format(0x86), "575.1").bucket == "RESET_GPU"  # V2 action-2 bit 7
    assert decode(145, rx.format(0x4c2), "570.1").bucket == "RESET_GPU"  # V1 action-2 bit 10


def test_link_down_reasons_nvidia_ignores():
    link = "Xid (PCI:0000:01:00): 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 3 (0x{:08x} 0x00000000 0x0)"
    assert decode(149, link.format((0b100110 << 20) | 17), "580.1").bucket == "IGNORE"
    assert decode(149, link.format((0b000001 << 20) | 17), "580.1").bucket == "RESET_GPU"


def test_lines_without_a_decodable_sub_code_keep_the_xids_own_verdict():
    assert decode(145, "Xid (PCI:0000:01:00): 145, RLW_REMAP Nonfatal", None) is None
    assert decode(79, REAL_V2_SAW.replace("144,", "79,"), None) is None


def test_every_row_names_a_known_bucket_and_explain_lists_them():
    assert set(units()) == set(range(144, 151))
    assert {r["nvidia"] for c in units() for r in table(c)} <= set(buckets())
    rows = table(145)
    assert {"unit": "RLW_REMAP", "status": "0x00000040", "nvidia": "RESET_GPU", "severity": "fail",
            "action": "reset GPU"} in rows


def _judge(lines: list[str], driver: str | None = None):
    snap = healthy_node(time=2000.0)
    snap.kernel = parse_lines(lines)
    snap.nvml.driver_version = driver
    return xid.CHECKS[0].judge(snap, context(xid.CHECKS[0]))


def test_no_false_alarm_informational_sub_codes_never_drain():
    # every IGNORE and XID_154_EVAL row of the table, as a line: a warning at most, never a drain
    lines = []
    for code, rows in units().items():
        for unit in rows:
            name = unit["name"].split("/")[1] if "/" in unit["name"] else unit["name"]
            for status, bucket in (unit.get("status") or {}).items():
                if bucket != "RESET_GPU" and unit.get("match") != "value":
                    lines.append(f"[ 1999.0] NVRM: Xid (PCI:0000:5d:00): {code}, {name} Nonfatal XC0 i0 Link 1 "
                                 f"(0x{unit['v2']:08x} 0x{status:08x} 0x0 0x0 0x0 0x0)")
    assert len(lines) > 30
    out = _judge(lines, "580.65.06")
    assert [r for r in out.results if r.status is Status.FAIL] == []
    assert {r.status for r in out.results} == {Status.WARN}
    assert all("NVIDIA's 144-150 decode" in r.message for r in out.results)


def test_a_fatal_sub_code_fails_its_gpu_with_the_reset_and_says_which():
    out = _judge(["[ 1999.0] NVRM: " + REAL_V1_RXPIPE.replace("0018:01:00", "0000:5d:00"),
                  "[ 1999.5] NVRM: Xid (PCI:0000:5d:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 3 "
                  "(0x00000004 0x00000040 0x0 0x0 0x0 0x0)"])  # no driver version: each line's own fit
    fails = [(r.subject, r.action) for r in out.results if r.status is Status.FAIL]
    assert fails == [("gpu3", Action.RESET_GPU)]
    (fail,) = [r for r in out.results if r.status is Status.FAIL]
    assert "RLW_REMAP status 0x00000040" in fail.message
    # the RXPIPE line of the same GPU decodes (by its intrInfo) to IGNORE: a warning beside it
    assert any(r.status is Status.WARN and "RLW_RXPIPE" in r.message for r in out.results)


def test_the_driver_version_in_the_log_picks_the_branch():
    v1_line = "[ 1999.0] NVRM: Xid (PCI:0000:5d:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 3 (0x00000082 0x00000040 0x0)"
    loading = "[ 10.0] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build"
    out = _judge([loading, v1_line], driver="580.65.06")  # the log's own loading line wins over NVML's
    assert [r.action for r in out.results if r.status is Status.FAIL] == [Action.RESET_GPU]
    line = "[ 1999.0] NVRM: Xid (PCI:0000:5d:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 3 (0x000004c2 0x00000002 0x0)"
    out = _judge([loading, line], driver="580.65.06")  # v1 (bit 10 set): a reset
    assert [r.action for r in out.results if r.status is Status.FAIL] == [Action.RESET_GPU]
    out = _judge([line.replace("0x000004c2", "0x00000086")], driver="580.65.06")  # v2 (bit 7 set): a reset
    assert [r.action for r in out.results if r.status is Status.FAIL] == [Action.RESET_GPU]


@pytest.mark.parametrize("text", [
    "buckets: {RESET_GPU: {severity: warn, action: reset GPU}}\nunits: {}\n",  # a warn that drains
    "buckets: {RESET_GPU: {severity: fail, action: reset GPU}}\nunits: {145: [{name: X, v1: 1, v2: 1, any: NOPE}]}\n",
    "buckets: {RESET_GPU: {severity: fail, action: reboot it}}\nunits: {}\n",
    "buckets: [1]\nunits: {}\n",
])
def test_a_broken_sub_code_table_is_refused_with_its_file_named(tmp_path, monkeypatch, text):
    from gpuhc.catalog import xid_subcodes
    from gpuhc.errors import ConfigError

    bad = tmp_path / "xid_subcodes.yaml"
    bad.write_text(text)
    monkeypatch.setattr(xid_subcodes, "FILE", bad)
    xid_subcodes._doc.cache_clear()
    try:
        with pytest.raises(ConfigError, match="xid_subcodes.yaml"):
            xid_subcodes.units()
    finally:
        xid_subcodes._doc.cache_clear()


def test_two_failing_sub_codes_of_one_xid_on_one_gpu_are_one_incident_held_with_both_counted():
    lines = ["[ 1999.0] NVRM: Xid (PCI:0000:5d:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 3 (0x00000004 0x00000040 0x0)",
             "[ 1999.5] NVRM: Xid (PCI:0000:5d:00): 145, RLW_TAGSTATE Nonfatal XC0 i0 Link 3 (0x00000008 0x00000002 0x0)"]
    out = _judge(lines, "580.65.06")
    (fail,) = [r for r in out.results if r.status is Status.FAIL]
    assert (fail.subject, fail.action, fail.value["count"]) == ("gpu3", Action.RESET_GPU, 2)
    assert "RLW_TAGSTATE" in fail.message  # the latest line's words
    snap = healthy_node(time=2600.0)  # the next run: the ring buffer has wrapped, the incident is held
    snap.kernel = parse_lines([])
    later = xid.CHECKS[0].judge(snap, context(xid.CHECKS[0], prev=out.state))
    assert [(r.status, r.subject, r.value["count"]) for r in later.results] == [(Status.FAIL, "gpu3", 2)]
