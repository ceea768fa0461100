"""The canary's cadence and standing rules (the ones the fleet state and the campaign model share)."""

from __future__ import annotations

import math

from gpuhc.canary import schedule as S

C = S.Cadence()


def test_outcome_needs_the_retest_to_confirm():
    assert [S.outcome(False, False), S.outcome(True, False), S.outcome(True, True)] == ["pass", "warn", "fail"]


def test_one_unconfirmed_mismatch_shortens_the_cadence_for_suspect_days_then_clears():
    status, until = S.step(S.OK, None, "warn", 100.0, C)
    assert (status, until) == (S.SUSPECT, 100.0 + 7 * 24)
    assert S.next_due_h(100.0, status, until, 101.0, C) == 102.0
    status, until = S.step(status, until, "pass", 150.0, C)  # clean, but still inside the window
    assert status == S.SUSPECT and S.next_due_h(150.0, status, until, 150.0, C) == 152.0
    status, until = S.step(status, until, "pass", 100.0 + 7 * 24, C)
    assert (status, until) == (S.OK, None) and S.next_due_h(300.0, status, until, 300.0, C) == 324.0


def test_confirmed_is_final_and_never_due_again():
    status, until = S.step(S.SUSPECT, 200.0, "fail", 150.0, C)
    assert status == S.FAILED and S.step(status, until, "pass", 160.0, C)[0] == S.FAILED
    assert math.isinf(S.next_due_h(150.0, status, until, 150.0, C))


def test_a_gpu_that_never_ran_is_due_at_once():
    assert S.next_due_h(None, S.OK, None, 5.0, C) == 0.0


def test_cadence_from_the_config_section():
    from gpuhc.canary.settings import SCHEMA

    section = {k: v.default for k, v in SCHEMA.items() if hasattr(v, "default")}
    section["epilog"] = {"enabled": False}
    assert S.Cadence.from_section(section) == S.Cadence(24.0, 2.0, 7.0, False)
