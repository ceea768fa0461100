"""The campaign's metrics (bench/campaign_model/metrics.py, docs/campaign.md "Metrics"): the
percentile every distribution is reported by."""

from __future__ import annotations

import sys

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model.metrics import pct  # noqa: E402


def test_percentile_is_nearest_rank():
    assert pct([], 50) is None
    assert pct([5.0], 95) == 5.0
    assert pct(list(range(1, 101)), 50) == 50 and pct(list(range(1, 101)), 95) == 95
