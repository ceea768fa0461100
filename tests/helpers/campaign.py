"""One small campaign with faults placed by hand (bench/campaign_model, docs/campaign.md): the
builder the campaign's tests share, so each test states only its faults and its rule."""

from __future__ import annotations

import sys

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model.policies import config_for  # noqa: E402
from campaign_model.sim import Campaign  # noqa: E402


def campaign(tmp_path, inject, policy="shipped", nodes=2, days=0.3, seed=3, jobs=None, **kw):
    """Run a quiet campaign (no load, no healthy-node noise unless asked) with ``inject``'s faults."""
    kw.setdefault("noise", False)
    return Campaign(config_for(policy, tmp_path), tmp_path, nodes=nodes, days=days, seed=seed, inject=inject,
                    load=0.0, jobs=jobs, **kw).run()
