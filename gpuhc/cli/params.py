"""Click parameter types for numbers: finite, bounded, named in the error.

Light on purpose (click and the bounds only): drain-report and the sweep commands import it
without the node-reading machinery of :mod:`gpuhc.cli.common`.
"""

from __future__ import annotations

import math

import click

from gpuhc.text.limits import MAX_WAIT_S


class Number(click.ParamType):
    """A finite number, at least ``lo`` (more than it when ``lo_open``) and at most ``hi``;
    either end may be absent. click's FloatRange lets NaN through (it compares false with both
    ends) and takes inf: a NaN timeout waits forever, a NaN job length turns into an internal
    error, an inf window overflows the date arithmetic (docs/security.md: numbers)."""

    name = "number"
    unit = ""

    def __init__(self, lo: float | None = None, hi: float | None = None, lo_open: bool = False):
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a {'number of ' + self.unit if self.unit else 'number'}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        low = self.lo is not None and (number < self.lo or (self.lo_open and number == self.lo))
        if low or (self.hi is not None and number > self.hi):
            self.fail(f"{value!r} is not {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.lo is not None and self.hi is not None:
            return f"between {self.lo:g} and {self.hi:g}{unit}"
        if self.lo is not None:
            return f"{'above' if self.lo_open else 'at least'} {self.lo:g}{unit}"
        return f"at most {self.hi:g}{unit}"


class Seconds(Number):
    """A finite number of seconds in [lo, hi]."""

    name = "seconds"
    unit = "seconds"

    def __init__(self, lo: float = 0.1, hi: float = MAX_WAIT_S):
        super().__init__(lo, hi)
