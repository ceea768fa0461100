"""gpuhc drain reasons: shape, sanitising, UTF-8-safe truncation, determinism, parsing."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhc.model.result import Action, Result, Status
from gpuhc.slurm.policy import reason as R
from gpuhc.slurm.read.nodes import split_reason


def fail(check="xid", msg="Xid 79: GPU has fallen off the bus", subject="gpu3", action=Action.DRAIN_TICKET):
    return Result(check, Status.FAIL, msg, subject, action=action)


def test_reason_names_check_subject_and_evidence():
    assert R.build_reason([fail()]) == "gpuhc: xid79 gpu3 GPU has fallen off the bus"


def test_the_first_20_characters_say_check_code_and_gpu():
    """Plain `sinfo -R` shows 20 characters of a reason: what and where, not "gpuhc: xid Xid 79 on"."""
    xid = R.build_reason([fail(msg="Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus")])
    assert xid == "gpuhc: xid79 gpu3 (0000:5d:00.0): GPU has fallen off the bus" and xid[:20] == "gpuhc: xid79 gpu3 (0"
    ecc = R.build_reason([fail("ecc", "3 uncorrectable ECC errors on gpu0", "gpu0")])
    assert ecc == "gpuhc: ecc gpu0 3 uncorrectable ECC errors" and ecc[:20] == "gpuhc: ecc gpu0 3 un"
    sxid = R.build_reason([fail("nvswitch", "SXid 12028 on nvswitch2 x3: fatal, egress non-posted PRIV error",
                                "nvswitch2")])
    assert sxid == "gpuhc: nvswitch12028 nvswitch2 x3: fatal, egress non-posted PRIV error"


def test_code_and_subject_lead_and_are_said_once():
    assert R.build_reason([fail("pcie", "gpu3 PCIe link x8 < expected x16")]) == "gpuhc: pcie gpu3 PCIe link x8 < expected x16"
    assert R.build_reason([fail(msg="Xid 79 on gpu3 (0000:5d:00.0)")]) == "gpuhc: xid79 gpu3 (0000:5d:00.0)"
    assert R.build_reason([fail(msg="Xid 79 on gpu3")]) == "gpuhc: xid79 gpu3"
    # a code is moved from the front, never added nor taken from later text
    assert R.build_reason([fail(msg="gpu3 (0000:5d:00.0) has fallen off the bus (no Xid logged)")]) == \
        "gpuhc: xid gpu3 (0000:5d:00.0) has fallen off the bus (no Xid logged)"
    assert R.build_reason([fail(msg="gpu3: GPU lost (driver message, then Xid 8)")]) == \
        "gpuhc: xid gpu3 GPU lost (driver message, then Xid 8)"
    assert R.build_reason([fail("pcie", "Xid 79 on gpu3")]) == "gpuhc: pcie gpu3 Xid 79"  # pcie has no code
    assert R.build_reason([fail(msg="Xid 790 on gpu3")]) == "gpuhc: xid790 gpu3"  # 79 is not 790
    # said first elsewhere than the front or after "on": the message keeps it, and it is not repeated
    assert R.build_reason([fail("nic-health", "NIC 0000:1c:00.0: firmware health counter stopped", "0000:1c:00.0")]) \
        == "gpuhc: nic-health NIC 0000:1c:00.0: firmware health counter stopped"
    # gpu10 is not gpu1, mlx5_0/10 is not mlx5_0/1
    assert R.build_reason([fail(msg="gpu10 bad", subject="gpu1")]) == "gpuhc: xid gpu1 gpu10 bad"
    assert R.build_reason([fail(msg="mlx5_0/10 down", subject="mlx5_0/1")]) == "gpuhc: xid mlx5_0/1 mlx5_0/10 down"


def test_node_subject_is_not_repeated():
    assert R.build_reason([fail("gpu-count", "7 of 8 GPUs visible", "node")]) == "gpuhc: gpu-count 7 of 8 GPUs visible"


def test_worst_action_wins_and_others_are_counted():
    results = [
        fail("thermal", "gpu at 95C", "gpu1", Action.RESET_GPU),
        fail("xid", "Xid 79", "gpu3", Action.DRAIN_TICKET),
        fail("pcie", "width x8 < x16", "gpu2", Action.DRAIN_REBOOT),
        Result("ecc", Status.WARN, "sbe growing", "gpu0"),
        Result("nvlink", Status.PASS, "ok"),
    ]
    assert R.build_reason(results) == "gpuhc: xid79 gpu3; +2 more (pcie,thermal)"


def test_same_failure_in_any_order_gives_identical_reason():
    results = [fail("xid", f"Xid 79 #{i}", f"gpu{i}") for i in range(6)] + [fail("pcie", "x8", "gpu1", Action.DRAIN_REBOOT)]
    first = R.build_reason(results)
    for seed in range(20):
        shuffled = results[:]
        random.Random(seed).shuffle(shuffled)
        assert R.build_reason(shuffled) == first


def test_build_reason_without_failures_is_a_bug():
    with pytest.raises(ValueError):
        R.build_reason([Result("xid", Status.WARN, "x")])


def test_kernel_text_is_sanitised():
    msg = 'NVRM: Xid (PCI:0000:b3:00): 79,\n pid=1\t"name"=`x` \\ [root@evil]\x00\x1b[31m\u2028end'
    out = R.build_reason([fail(msg=msg)])
    assert "\n" not in out and "\t" not in out and "\x00" not in out and "\x1b" not in out and "\u2028" not in out
    assert '"' not in out and "`" not in out and "'" not in out and "\\" not in out
    assert "[" not in out and "]" not in out  # cannot forge a [qN] tag or the [user@time] suffix
    assert "  " not in out
    assert out.startswith("gpuhc: xid gpu3 NVRM: Xid (PCI:0000:b3:00): 79, pid=1")


def test_forged_cycle_tag_in_evidence_is_neutralised():
    out = R.build_reason([fail(msg="bad [q9]")])
    assert R.parse_reason(out).cycle == 0


def test_long_reason_is_cut_to_255_bytes_keeping_the_tag():
    out = R.build_reason([fail(msg="é" * 400)], cycle=2)
    assert len(out.encode("utf-8")) <= 255
    assert out.endswith("... [q2]")
    out.encode("utf-8").decode("utf-8")  # no broken character
    assert R.parse_reason(out).cycle == 2


@given(st.text(min_size=1, max_size=600), st.integers(min_value=0, max_value=99), st.booleans())
@settings(max_examples=300, deadline=None)
def test_any_text_gives_a_valid_reason(text, cycle, retired):
    out = R.build_reason([fail(msg=text)], cycle=cycle, retired=retired)
    assert len(out.encode("utf-8")) <= 255
    assert out == out.strip() and "\n" not in out
    assert all(c.isprintable() for c in out)
    parsed = R.parse_reason(out)
    assert parsed is not None and parsed.check == "xid"
    assert parsed.retired is retired
    assert parsed.cycle == (0 if retired else cycle)
    # What Slurm prints back (`Reason=<text> [user@time]`) splits into our exact text again.
    text_back, user, _ = split_reason(f"{out} [root@2024-06-11T10:23:45]")
    assert text_back == out and user == "root"


def test_ownership_is_by_exact_prefix():
    assert R.owned("gpuhc: xid gpu3 x")
    assert not R.owned("GPUHC: later")
    assert not R.owned("gpuhc check later")  # an admin's note: the prefix is "gpuhc:", colon included
    assert not R.owned("admin: gpuhc: said so")
    assert not R.owned("NHC: check failed")
    assert not R.owned("Not responding")
    assert not R.owned("")
    assert not R.owned(None)
    assert R.parse_reason("Prolog error") is None


def test_parse_plain_quarantined_and_retired():
    p = R.parse_reason("gpuhc: xid79 gpu3 (0000:5d:00.0)")
    assert (p.check, p.code, p.cycle, p.retired, p.quarantined, p.body) == (
        "xid", 79, 0, False, False, "xid79 gpu3 (0000:5d:00.0)")
    q = R.parse_reason("gpuhc: xid79 gpu3 [q2]")
    assert (q.check, q.cycle, q.quarantined, q.body) == ("xid", 2, True, "xid79 gpu3")
    r = R.parse_reason("gpuhc: RETIRED nvswitch12028 nvswitch2 fatal")
    assert (r.retired, r.quarantined, r.check, r.code, r.body) == (True, False, "nvswitch", 12028,
                                                                  "nvswitch12028 nvswitch2 fatal")
    assert (R.parse_reason("gpuhc: pcie gpu3 x8").check, R.parse_reason("gpuhc: pcie gpu3 x8").code) == ("pcie", None)
    assert R.split_lead("pcie16") == ("pcie16", None)  # only the checks that have codes carry one


@pytest.mark.parametrize("old", ["gpuhc: xid Xid 79 on gpu3 (0000:5d:00.0): GPU has fallen off the bus",
                                 "gpuhc: xid gpu3 Xid 79"])
def test_reasons_of_the_earlier_shape_are_still_ours_after_an_upgrade(old):
    """A node the previous release drained keeps that reason across the upgrade: the new one
    reads its check, cycle and retirement, and keeps its evidence as written."""
    body = old[len("gpuhc: "):]
    p = R.parse_reason(old)
    assert (p.check, p.code, p.cycle, p.retired, p.body) == ("xid", None, 0, False, body)
    q = R.parse_reason(f"{old} [q2] : reboot issued")
    assert (q.check, q.cycle, q.quarantined, q.body) == ("xid", 2, True, body)
    assert R.with_cycle(q, 3) == f"{old} [q3]"
    assert R.retired_from(q) == f"gpuhc: RETIRED {body}"
    assert R.parse_reason(R.retired_from(q)).check == "xid"


def test_tag_survives_text_slurm_appends_on_reboot():
    q = R.parse_reason("gpuhc: xid79 gpu3 [q1] : reboot issued")
    assert q.cycle == 1 and q.body == "xid79 gpu3"


def test_with_cycle_and_retired_from_keep_the_evidence():
    p = R.parse_reason("gpuhc: xid79 gpu3 [q1]")
    assert R.with_cycle(p, 2) == "gpuhc: xid79 gpu3 [q2]"
    assert R.retired_from(p) == "gpuhc: RETIRED xid79 gpu3"
    assert R.retired_from(None, "bad fan") == "gpuhc: RETIRED bad fan"
    assert R.retired_from(None) == "gpuhc: RETIRED retired by admin"


def test_truncate_utf8_never_splits_a_character():
    for n in range(0, 13):
        cut = R.truncate_utf8("aé€😀b", n)
        assert len(cut.encode()) <= n
        assert "aé€😀b".startswith(cut)
