"""The NVLink5 fabric check on a real Slurm: slurmd's own health check drains a GB200 tray whose
fabric route is unhealthy with a gpuhc reason, and leaves alone one whose fabric bandwidth is
only degraded (a WARN) -- nothing of Slurm is faked (tests/helpers/slurm_cluster.py)."""

from __future__ import annotations

import pytest

from tests.helpers.paths import REPO
from tests.helpers.slurm_flows import INTERVAL, RECOMMENDED, base_config, decisions, wait_runs

pytestmark = pytest.mark.slurm
SCENARIOS = REPO / "examples" / "scenarios"


def test_route_unhealthy_drains_and_degraded_bandwidth_does_not(slurm_cluster, tmp_path):
    wd = tmp_path / "fabric"
    c = slurm_cluster(
        workdir=wd, nodes=("n1", "n2"), healthcheck=True, healthcheck_interval=INTERVAL,
        healthcheck_node_state=RECOMMENDED["HealthCheckNodeState"], gpuhc_config=base_config(wd),
        node_scenarios={"n1": str(SCENARIOS / "fabric-route-unhealthy.yaml"),
                        "n2": str(SCENARIOS / "fabric-degraded-bw.yaml")},
    )
    wait_runs(c, wd, {"n1": 1, "n2": 3}, also=lambda: c.node("n1").drained, what="n1 drained, 3 health checks on n2")
    n1 = c.node("n1")
    assert n1.reason.startswith("gpuhc: fabric gpu1 fabric route unhealthy"), n1.reason
    n2 = c.node("n2")
    assert not n2.drained and not n2.down, (n2.raw_state, n2.reason)
    assert all(line.startswith("passive: WARN") for line in decisions(wd, "n2") if line.startswith("passive:"))
