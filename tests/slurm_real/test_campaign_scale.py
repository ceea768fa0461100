"""The campaign's correlated fault at scale (issue 35): a spine switch's failure takes 8 leaves,
64 of 512 nodes, past the breaker's 10 %. The model (the shipped policy) and a real slurmctld with
512 defined nodes (one real `gpuhc healthcheck` per faulted node, at once) both hold exactly the
cap; bench/campaign_scale.py is the same run as a command (docs/campaign.md, "At scale")."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

import campaign_scale as S  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.serial]  # 64 health checks at once: alone (tests/run.sh)


def test_a_spine_failure_on_512_nodes_holds_the_cap_in_the_model_and_on_slurm(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "real").mkdir()
    model = S.model_side(512, 8, 1, tmp_path / "model")
    real = S.real_side(512, model["faulted"], tmp_path / "real", ledger=False)
    v = S.verdict(model, real)
    assert v["cap"] == 52 and v["checks"] == dict.fromkeys(v["checks"], True), (model, real)
    # Every drain is the fault's: the IB port, nothing of gpuhc's own making.
    assert real["held_reasons"] == ["gpuhc: infiniband mlx5_3/1 DOWN, physical link Polling"], real
