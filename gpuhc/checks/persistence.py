"""Evidence that stays is evidence: a WARN that recurs over hours becomes a FAIL.

Two checks keep a short history of when a link or port warned, and judge it here: nvlink (its
error counters grew at the WARN rate on a link, below the FAIL rate) and infiniband (a single
flap of a port). One reading of either is weak evidence: a job's burst of replays, a cable
bumped in the rack, a switch reloaded. The same thing coming back hour after hour is a link
that degrades, and every job started on it meanwhile pays for it.

The rule counts distinct clock hours, not readings: a burst of twenty readings in one quarter
of an hour is one hour of evidence (it crosses at most one hour boundary, so two), however
often the node is read; a link that warns again and again over a morning fills several. A
history that holds evidence in at least ``min_hours`` distinct hours of the last
``window_h`` is a FAIL; the reason says how long it held (first to last warning), so an admin
sees "growing 4.2 h", not one more count.

Bounded: per link or port at most the first and the last time of each clock hour are kept, and
the window is at most :data:`MAX_WINDOW_H`, so a history never holds more than
:data:`MAX_EVENTS` times whatever the cadence (a check run in a tight loop included). Pure:
times in, times and a verdict out; the checks keep the history in their own state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from gpuhc.model.record import FrozenRecord

HOUR = 3600.0
MAX_WINDOW_H = 72  # three days: longer is a trend for the fleet's own monitoring, not a drain
MAX_EVENTS = 2 * (MAX_WINDOW_H + 1)  # first and last of each hour the window touches


@dataclass(frozen=True, eq=False, repr=False)
class Held(FrozenRecord):
    """Evidence that held: in ``hours`` distinct clock hours, from ``first`` to ``last``."""

    hours: int
    first: float
    last: float

    @property
    def span_s(self) -> float:
        return self.last - self.first


def _times(stored: Any) -> list[float]:
    """The stored times, skipping anything that is not a finite number (a hand-edited state)."""
    if not isinstance(stored, list):
        return []
    return [float(t) for t in stored
            if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)]


def remember(stored: Any, new: Iterable[float], now: float, window_h: float, since: float | None = None) -> list[float]:
    """The history to keep: ``stored`` (as read from state) and ``new``, within the last
    ``window_h`` hours of ``now``, after ``since`` (an acknowledgement), none after ``now`` (the
    clock went back, or a replay judged an earlier time), thinned to the first and last time of
    each clock hour, oldest first."""
    start = now - min(float(window_h), MAX_WINDOW_H) * HOUR
    floor = start if since is None else max(start, since)
    by_hour: dict[int, tuple[float, float]] = {}
    for t in _times(stored) + _times(list(new)):
        if not floor < t <= now:
            continue
        h = int(t // HOUR)
        lo, hi = by_hour.get(h, (t, t))
        by_hour[h] = (min(lo, t), max(hi, t))
    out = sorted({t for pair in by_hour.values() for t in pair})
    return [round(t, 3) for t in out[-MAX_EVENTS:]]


def held(history: Any, min_hours: int) -> Held | None:
    """The evidence when it fills at least ``min_hours`` distinct clock hours (0: the rule is
    off), else None. ``history`` is one :func:`remember` made."""
    times = _times(history)
    hours = len({int(t // HOUR) for t in times})
    if not min_hours or hours < min_hours:
        return None
    return Held(hours, min(times), max(times))


def span_text(seconds: float) -> str:
    """How long evidence held, in the unit an admin reads at a glance: 45 min, 4.2 h, 1.5 d."""
    if seconds < HOUR:
        return f"{max(1, round(seconds / 60))} min"
    if seconds < 48 * HOUR:
        return f"{seconds / HOUR:.1f} h"
    return f"{seconds / 86400:.1f} d"


def setting_errors(thresholds: dict[str, Any], hours_key: str, window_key: str) -> list[str]:
    """["key: why", ...] for a check's pair of persistence thresholds (the config loader's
    ``validate`` format): a whole number of hours (0: off) and a window it fits in."""
    hours, window = thresholds.get(hours_key), thresholds.get(window_key)
    if not isinstance(hours, int) or isinstance(hours, bool) or hours < 0:
        return [f"{hours_key}: must be a whole number of hours (0: off), got {hours!r}"]
    if not isinstance(window, (int, float)) or isinstance(window, bool) or not 0 < window <= MAX_WINDOW_H:
        return [f"{window_key}: must be hours from more than 0 to {MAX_WINDOW_H}, got {window!r}"]
    if hours > math.ceil(window) + 1:
        return [f"{hours_key}: {hours} distinct hours cannot fit in {window_key} {window:g} h "
                f"(at most {math.ceil(window) + 1})"]
    return []
