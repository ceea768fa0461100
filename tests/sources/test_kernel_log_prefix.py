"""gpuhc/sources/kernel_log_prefix.py's own arithmetic: the epoch of a stamp with a zone is
calendar.timegm's sum, kept here so that a run does not import calendar (and locale)."""

from __future__ import annotations

import calendar
import itertools

from gpuhc.sources.kernel_log_prefix import _timegm, epoch


def test_the_utc_sum_is_calendars_on_every_month_end_leap_day_and_second():
    years = (1970, 1999, 2000, 2024, 2025, 2100, 2400, 9999)
    for y, mo, d, hh, mm, ss in itertools.product(years, range(1, 13), (1, 28, 29, 30, 31), (0, 23), (0, 59), (0, 60)):
        fields = (y, mo, d, hh, mm, ss, 0, 0, -1)
        assert _timegm(fields) == calendar.timegm(fields), fields


def test_a_zone_offset_is_subtracted_and_a_bad_field_is_none():
    assert epoch(2025, 3, 1, 12, 0, 0, utc_offset=3600) == calendar.timegm((2025, 3, 1, 11, 0, 0)) + 0.0
    assert epoch(2025, 13, 1, 0, 0, 0, utc_offset=0) is None and epoch(1969, 1, 1, 0, 0, 0, utc_offset=0) is None
