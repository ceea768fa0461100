"""The campaign's policies (bench/campaign_model/policies.py): a name that is none of them is
refused with its name."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model.policies import config_for  # noqa: E402

from gpuhc.errors import ConfigError  # noqa: E402


def test_an_unknown_policy_is_refused_with_its_name(tmp_path):
    with pytest.raises(ConfigError, match="--policy 'nope'"):
        config_for("nope", tmp_path)
