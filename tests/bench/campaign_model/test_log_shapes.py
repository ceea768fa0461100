"""Logs in every shape (bench/campaign_model/log_shapes.py, docs/campaign.md "Logs in every
shape"): a node's kernel lines reach gpuhc as its site's tool prints them, and a fault is
judged the same in each; a shape gpuhc misread would hide the fault (an escape)."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import log_shapes as L  # noqa: E402
from campaign_model.policies import config_for  # noqa: E402
from campaign_model.sim import T0, Campaign  # noqa: E402

SHAPES = [s for s, _ in L.SHARES]
# examples/scenarios/xid79-fallen-off-bus.yaml's driver line, ISO-stamped as the model keeps it
XID79 = "2025-03-04T10:03:12,123456+00:00 NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus."


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_reads_back_to_the_same_time_and_message(shape):
    from gpuhc.sources.kernel_log import parse_lines

    line = L.render(XID79, shape, "gpu001")
    log = parse_lines([line], now=T0 + 86400)
    assert log.last_time is not None and abs(log.last_time - (T0 + 192.123456)) < 1.0, line
    assert [e.code for e in log.events] == [79], (line, log.events)


def test_the_shapes_are_drawn_per_node_at_their_shares():
    import random

    rng = random.Random(5)
    got = [L.draw(rng) for _ in range(4000)]
    for shape, share in L.SHARES:
        assert abs(got.count(shape) / len(got) - share) < 0.03


@pytest.mark.parametrize("shape", SHAPES)
def test_a_fault_is_drained_alike_in_every_shape(tmp_path, shape):
    c = Campaign(config_for("shipped", tmp_path), tmp_path, nodes=1, days=0.05, seed=3, noise=False, load=0.0,
                 inject=[(600, "gsp-timeout", "gpu001", False)], jobs=[], log_shape=shape).run()
    got = [(round(t - T0), r) for t, n, w, r in c.slurm.events if w == "drain"]
    assert len(got) == 1 and got[0][1].startswith("gpuhc: xid119 "), got
    assert 600 <= got[0][0] <= 600 + 2 * 300, got  # at the fault's next health check, whatever the shape
