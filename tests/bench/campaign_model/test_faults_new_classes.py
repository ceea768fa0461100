"""The faults the campaign draws that no recording of gpuhc's own tests stood for before
(bench/campaign_model/faults.py, docs/campaign.md "Faults"): a NIC's firmware, a PCIe link
trained at x8, a wedged driver. Each is drained by the check named in the table, no sooner
than its rule allows; drop the class's signs from its scenario and its test fails."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import faults as F  # noqa: E402
from campaign_model.node import HC_INTERVAL_S  # noqa: E402
from campaign_model.sim import T0  # noqa: E402
from tests.helpers.campaign import campaign  # noqa: E402


def drained(tmp_path, cls):
    c = campaign(tmp_path, [(600, cls, "gpu001", False)], nodes=1, days=0.2)
    return [((t - T0 - 600) / HC_INTERVAL_S, r) for t, _, what, r in c.slurm.events if what == "drain"]


@pytest.mark.parametrize("cls, check, checks_at_most", [
    ("nic-firmware", "gpuhc: nic-health NIC 0000:1c:00.0: firmware health counter stopped", 1),
    ("pcie-downtrain", "gpuhc: pcie gpu4 PCIe link x8", 1),
    # each hung run is gpuhc's own failure (ERROR, never a drain) until they span the driver's
    # hold (evidence.driver, 20 min: the fifth health check), then a wedge
    ("nvml-hang", "gpuhc: nvml NVML hung or failed on 5 consecutive health checks over 20 min", 5),
])
def test_each_new_fault_is_drained_by_its_own_check(tmp_path, cls, check, checks_at_most):
    [(after, reason)] = drained(tmp_path, cls)
    assert reason.startswith(check), reason
    assert checks_at_most - 1 < after <= checks_at_most + 0.1, after  # the slot, then the drain's own seconds


def test_the_new_classes_come_after_every_class_whose_draw_they_must_not_move():
    import random

    names = [c.name for c in F.CLASSES]
    assert names[-5:] == ["nic-firmware", "pcie-downtrain", "nvml-hang", "nvlink-hang", "ib-hang"]
    assert set(F.BEYOND_TABLE) >= set(names[-5:])
    assert not F.BY_NAME["pcie-downtrain"].kills_job and F.BY_NAME["nvml-hang"].kills_job
    # the last classes' arrivals are drawn after every other's: without them, the others' are the same
    nodes = [f"gpu{i:03d}" for i in range(1, 65)]
    every = F.draw(random.Random(7), nodes, 30.0, rate_scale=100.0)
    for k in (1, 2):
        before = F.draw(random.Random(7), nodes, 30.0, rate_scale=100.0, classes=tuple(names[:-k]))
        assert [d for d in every if d[1].name not in names[-k:]] == before and len(before) < len(every)
