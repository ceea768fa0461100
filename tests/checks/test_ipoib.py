"""The ipoib check: an IPoIB interface brought up is up on an ACTIVE port; a port that is not
ACTIVE is the infiniband check's. Ports as the real GCM capture gives them
(tests/fixtures/sysfs_ipoib/gcm_ipoib_two_hcas.json, read in tests/sources/test_sysfs_ipoib.py)."""

from __future__ import annotations

from gpuhc.checks.ipoib import CHECKS, _validate
from gpuhc.model.host import IbPort
from gpuhc.model.result import Action, Status
from tests.helpers.snapshots import healthy_node, results_of

(CHECK,) = CHECKS


def _port(device, state, ipoib):
    return IbPort(device=device, port=1, state=state, phys_state="LinkUp", rate_gbps=200.0, link_layer="InfiniBand",
                  fw_ver="20.31.2354", ipoib=ipoib)


def _judge(ports, **thresholds):
    s = healthy_node()
    s.ib_ports = ports
    return results_of(CHECK, s, **thresholds)


def test_the_capture_as_read_passes_its_init_port_is_the_infiniband_check_s():
    (r,) = _judge([_port("mlx5_0", "ACTIVE", {"ib0": "up"}), _port("mlx5_8", "INIT", {"ib6": "down"})])
    assert r.status is Status.PASS
    assert r.message == "1 IPoIB interface up; 1 on ports not ACTIVE (the infiniband check's)"


def test_down_on_an_active_port_warns_and_fails_where_the_site_says():
    ports = [_port("mlx5_0", "ACTIVE", {"ib0": "up"}), _port("mlx5_8", "ACTIVE", {"ib6": "down", "ib6.8001": "lowerlayerdown"})]
    out = _judge(ports)
    assert [(r.subject, r.status, r.action) for r in out] == [
        ("mlx5_8/1/ib6", Status.WARN, Action.NONE), ("mlx5_8/1/ib6.8001", Status.WARN, Action.NONE)]
    assert out[0].message == "IPoIB ib6 on mlx5_8/1 is down (the port is ACTIVE)"
    assert {(r.status, r.action) for r in _judge(ports, down="fail")} == {(Status.FAIL, Action.DRAIN_TICKET)}


def test_unknown_is_not_judged_and_nothing_brought_up_passes():
    assert _judge([_port("mlx5_0", "ACTIVE", {"ib0": "unknown"})])[0].status is Status.PASS
    (r,) = _judge([_port("mlx5_0", "ACTIVE", {})])
    assert (r.status, r.message) == (Status.PASS, "no IPoIB interface brought up")


def test_not_read_is_na():
    assert _judge(None)[0].status is Status.NA
    assert _judge([IbPort(device="mlx5_0", port=1, state="ACTIVE", phys_state="LinkUp", rate_gbps=1.0)])[0].status \
        is Status.NA
    assert _validate({"down": "fail"}) == [] and _validate({"down": "drain"}) == ["down: must be one of warn, fail, got 'drain'"]
