"""A modelled node's kernel lines (bench/campaign_model/node.py): a recording moved to the
campaign's clock keeps its spacing and its text."""

from __future__ import annotations

import sys

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model.node import T0, restamp  # noqa: E402


def test_restamp_moves_the_lines_and_keeps_their_spacing_and_text():
    lines = ["2025-03-04T10:01:10,101010+00:00 mlx5_core 0000:1c:00.0 mlx5_1: Port: 1 Link DOWN",
             "2025-03-04T10:01:13,104220+00:00 mlx5_core 0000:1c:00.0 mlx5_1: Port: 1 Link ACTIVE"]
    out = restamp(lines, T0 + 86400.0)
    assert out[0].startswith("2025-03-05T10:00:00,101010+00:00 mlx5_core")
    assert out[1].startswith("2025-03-05T10:00:03,104220+00:00 ") and out[1].endswith("Link ACTIVE")
