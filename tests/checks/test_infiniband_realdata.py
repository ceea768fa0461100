"""The infiniband check over real mlx5 kernel-log lines from /work/shared/realdata/kernel-log.

Reads the workplace's reference data (not part of the repository): skips when the folder is
absent, i.e. outside the workplace.
"""

from __future__ import annotations


import pytest
from tests.helpers.realdata import ROOT as REALDATA_ROOT

from gpuhc.checks.base import Context
from gpuhc.checks.infiniband import DEFAULTS, judge
from gpuhc.model.host import IbPort
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources.kernel_log import FileKernelLog

REAL = REALDATA_ROOT / "kernel-log"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} absent (outside the workplace)")


def _judge(name: str, port: IbPort, prev: dict | None = None):
    log = FileKernelLog(str(REAL / name)).read()
    snap = Snapshot("n1", log.last_time, kernel=log, ib_ports=[port])
    (r,) = judge(snap, Context(thresholds=dict(DEFAULTS), prev=prev or {})).results
    return r


def test_h100_flapping_port_down_seconds():
    """08: mlx5_3 goes DOWN at 4435.1 (log starts mid-flap), ACTIVE 4441.8, DOWN 4444.0,
    ACTIVE 4450.3, DOWN 4450.9 until the last line at 4451.0."""
    name = "08_dmesg_sxid22013_and_mlx5_ib_link_flap_h100_slurmv4.log"
    port = IbPort("mlx5_3", 1, "DOWN", "Polling", None, "InfiniBand")
    # nothing known before the log: its first DOWN could be link bring-up, so it is not counted
    r = _judge(name, port)
    assert r.value["down_s"] == pytest.approx(6.346 + 0.069, abs=0.01)
    assert r.status is Status.FAIL  # the port is down right now
    # known ACTIVE before the log started: all three stretches count, 13.1 s > 7 s
    prev = {"ports": {"mlx5_3/1": {"samples": [[4000.0, 1]], "first_up": 4000.0}}}
    r = _judge(name, IbPort("mlx5_3", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand"), prev)
    assert r.value["down_s"] == pytest.approx(6.654 + 6.346 + 0.069, abs=0.01)
    assert r.status is Status.FAIL and "down 13.1 s in last 600 s (limit 7 s)" in r.message


def test_b200_boot_init_active_is_not_an_outage():
    """04: mlx5_5 INIT then ACTIVE in the same second: link bring-up."""
    name = "04_journalctl-k_b200_fallen_off_bus_mlx5_link_init_active.log"
    r = _judge(name, IbPort("mlx5_5", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand"))
    assert r.status is Status.PASS and r.value["down_s"] == 0.0
