"""gpuhc's SXid catalog held against the NVSwitch driver and NVIDIA's Fabric Manager guide, code by
code (issue 51).

The record (tests/fixtures/xid_catalog/nvswitch_sxids.yaml) lists every SXid the public driver
prints, with the words its reports put on the line, and the guide's lists. Every one of them
must be known to gpuhc, and the catalog's verdict (used when the line has no word of its own)
follows the rule its header states."""

from __future__ import annotations

import pytest
import yaml

from gpuhc.catalog import xid as cat
from gpuhc.model.result import Action
from tests.helpers.paths import FIXTURES

RECORD = yaml.safe_load((FIXTURES / "xid_catalog" / "nvswitch_sxids.yaml").read_text())
DRIVER = RECORD["driver"]
GUIDE = RECORD["fabric_manager_guide"]


def test_the_record_is_cited_and_covers_both_public_switch_generations():
    assert RECORD["source"].endswith("open-gpu-kernel-modules/tree/595.45.04/src/common/nvswitch")
    gens = {g for e in DRIVER.values() for g in e["generations"]}
    assert gens == {"lr10", "ls10", "common"} and len(DRIVER) > 250
    assert {w for e in DRIVER.values() for w in e["words"]} == {"Fatal", "Non-fatal"}


@pytest.mark.parametrize("code", sorted(set(DRIVER) | {c for codes in GUIDE.values() for c in codes}))
def test_every_sxid_the_driver_prints_or_the_guide_lists_is_known(code):
    assert cat.sxid_info(code).known, f"SXid {code} is printed by the driver or listed by NVIDIA, not in gpuhc's catalog"


@pytest.mark.parametrize("code", sorted(DRIVER))
def test_the_verdict_follows_the_drivers_words_then_the_guide(code):
    words, fatal = set(DRIVER[code]["words"]), cat.sxid_info(code).fatal
    if code in GUIDE["always_fatal"]:
        assert fatal
    elif words == {"Fatal"}:
        assert fatal, f"SXid {code}: the driver only ever reports it Fatal"
    elif words == {"Non-fatal"}:
        assert not fatal, f"SXid {code}: the driver only ever reports it Non-fatal"
    elif words:  # either, by whether the error locked the port
        assert fatal == (code in GUIDE["fatal"]), f"SXid {code}: reported either way; the guide decides"


def test_sxids_printed_without_a_word_are_judged_one_by_one():
    bare = {c for c, e in DRIVER.items() if not e["words"]}
    fatal = {c for c in bare if cat.sxid_info(c).fatal}
    # the SOE halted, faulted or hit its watchdog, could not boot or reset; the switch or a module shut down hot
    assert fatal == {10006, 26001, 26002, 26006, 26007, 26008, 28003, 28005}
    assert cat.sxid_info(26006).action is Action.DRAIN_REBOOT and cat.sxid_info(26006).name == "SOE halted"
    assert not cat.sxid_info(10004).fatal and not cat.sxid_info(26004).fatal  # a slowdown; one missed command


def test_the_guides_non_fatal_sxids_never_drain_alone():
    # but where the driver reports one Fatal (a RAM whose corrected errors reached their limit), its word
    assert [c for c in GUIDE["non_fatal"] if cat.sxid_info(c).fatal] == [19055, 19057, 19059]
    assert {DRIVER[c]["words"][0] for c in (19055, 19057, 19059)} == {"Fatal"}
