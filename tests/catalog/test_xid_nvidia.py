"""gpuhc's Xid catalog held against NVIDIA's, code by code.

The record of NVIDIA's catalog (tests/fixtures/xid_catalog/nvidia_xid_catalog.yaml) is dated and
cited. Every code NVIDIA lists must be known to gpuhc, and gpuhc drains on it exactly when
NVIDIA's immediate action asks for the GPU or the machine to be taken out of service, unless
the entry says why not (``differs``)."""

from __future__ import annotations


import pytest
import yaml

from gpuhc.catalog import xid as cat
from tests.helpers.paths import FIXTURES

RECORD = FIXTURES / "xid_catalog" / "nvidia_xid_catalog.yaml"
NVIDIA = yaml.safe_load(RECORD.read_text())

# NVIDIA's immediate-action buckets (the catalog's "Guidance Class" table) that take the GPU or
# node out of service; every other bucket lets work go on (restart the app, ignore, call support).
DRAINING = {"RESET_GPU", "RESTART_BM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "CHECK_MECHANICALS", "XID_154"}
KEEPS_RUNNING = {"CONTACT_SUPPORT", "IGNORE", "RESTART_APP", "RESTART_VM", "CHECK_UVM", "WORKFLOW_XID_45",
                 "UPDATE_SWFW", "WORKFLOW_NVLINK5_ERR", None}


def test_the_record_is_dated_cited_and_complete_up_to_its_last_code():
    assert NVIDIA["source"] == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert str(NVIDIA["retrieved"]) == "2026-11-26"
    codes = sorted(NVIDIA["xids"])
    assert codes == list(range(1, max(codes) + 1)) and max(codes) >= 172
    assert {e["immediate_action"] for e in NVIDIA["xids"].values()} <= DRAINING | KEEPS_RUNNING


@pytest.mark.parametrize("code", sorted(NVIDIA["xids"]))
def test_every_nvidia_code_is_known_and_any_difference_is_explained(code):
    nv = NVIDIA["xids"][code]
    info = cat.xid_info(code)
    assert info.known, f"Xid {code} ({nv['mnemonic']}) is in NVIDIA's catalog but not in gpuhc's"
    nvidia_drains = nv["immediate_action"] in DRAINING
    if (info.severity == "fail") != nvidia_drains or info.drain_after > 1:  # a wait for a repeat differs too
        assert len(info.differs) > 40, (f"Xid {code}: gpuhc says {info.severity}/{info.action.value}, NVIDIA "
                                        f"{nv['immediate_action']}; the entry must say why (differs:)")
    else:
        assert not info.differs, f"Xid {code} agrees with NVIDIA: a 'differs' note would mislead"


def test_power_smoothing_codes_never_drain_and_162_is_not_a_reset():
    for code in (162, 163, 164, 165):
        info = cat.xid_info(code)
        assert info.severity == "warn" and not info.action.drains, code
    assert "re-engaged" in cat.xid_info(162).name
    assert "no GPU reset required" in cat.xid_info(163).meaning


def test_the_codes_past_162_that_report_a_fault_drain_with_their_reason():
    assert cat.xid_info(169).severity == "fail" and "62" in cat.xid_info(169).differs
    assert {cat.xid_info(c).action.value for c in (171, 172)} == {cat.xid_info(48).action.value}
    for code in (166, 170):  # confidential computing only
        assert cat.xid_info(code).severity == "warn"
