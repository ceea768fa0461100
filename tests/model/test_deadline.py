"""The run's one deadline (gpuhc/model/deadline.py), on a clock the test moves: what is left,
a step's timeout cut to it, an earlier deadline for a step that must leave time after it."""

from __future__ import annotations

from gpuhc.model.deadline import Deadline


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_what_is_left_shrinks_as_the_clock_moves_and_goes_negative_once_passed():
    c = Clock()
    d = Deadline.after(55.0, clock=c)
    assert d.at == 155.0 and d.left() == 55.0 and not d.passed()
    c.t += 50.0
    assert d.left() == 5.0 and d.left(keep=4.0) == 1.0
    c.t += 6.0
    assert d.left() == -1.0 and d.passed()


def test_a_step_gets_its_own_timeout_cut_to_what_is_left_never_below_zero():
    c = Clock()
    d = Deadline.after(20.0, clock=c)
    assert d.cap(10.0) == 10.0  # early in the run: the step's own timeout
    c.t += 15.0
    assert d.cap(10.0) == 5.0 and d.cap(10.0, keep=4.0) == 1.0  # late: only what is left
    c.t += 10.0
    assert d.cap(10.0) == 0.0  # passed: nothing, not a negative timeout


def test_an_earlier_deadline_keeps_the_clock_and_the_original_unchanged():
    c = Clock()
    d = Deadline.after(55.0, clock=c)
    early = d.less(6.0)
    assert early.at == 149.0 and early.clock is c and d.at == 155.0
    c.t += 50.0
    assert early.left() == -1.0 and d.left() == 5.0 and early.passed() and not d.passed()


def test_the_default_clock_is_monotonic_and_a_deadline_reads_in_seconds_left():
    import time

    d = Deadline.after(30.0)
    assert d.clock is time.monotonic and 29.0 < d.left() <= 30.0
    assert repr(d).startswith("Deadline(") and "s left" in repr(d)
