"""The short real campaign (issue 23's Proof; docs/campaign.md, "Trusting the model"): 16 nodes
on a real slurmctld with one slurmd each, the model's schedule of faults and `sbatch` jobs for
90 wall seconds (an hour and a half of the month, compressed 60 times), and the model on the
same seed and the same compression: both must make the same drains and resumes, the same escapes,
and the same timings within the tolerance real_agree.py holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from campaign_model.real_agree import bounds  # noqa: E402
from campaign_model.real_run import campaign  # noqa: E402

pytestmark = pytest.mark.slurm


def test_a_real_campaign_agrees_with_the_model_on_the_same_seed(slurm_cluster, tmp_path):
    doc = campaign(slurm_cluster, tmp_path)
    model, real = doc.pop("_records")
    print(doc)
    assert bounds(real) == [] and bounds(model) == []
    assert doc["disagreements"] == []
