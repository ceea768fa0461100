"""services: Fabric Manager, nvidia-persistenced and DCGM's host engine where a node needs them
(gpuhc/checks/services.py)."""

from __future__ import annotations

from dataclasses import replace

from gpuhc.checks import services
from gpuhc.model.host import HostReading
from gpuhc.model.result import Action, Status
from tests.helpers.snapshots import context, healthy_node

CHECK = services.CHECKS[0]


def judge(svc):
    return CHECK.judge(replace(healthy_node(1), host=HostReading(services=svc)), context(CHECK))


def svc(expected=True, running=True, answering=None, error=None):
    return {"expected": expected, "running": running, "answering": answering, "error": error}


def test_fabric_manager_down_on_an_nvswitch_node_fails():
    out = judge({"fabricmanager": svc(running=False), "persistenced": svc(answering=True)})
    assert [(r.status, r.subject, r.action) for r in out.results] == [(Status.FAIL, "fabricmanager", Action.DRAIN_TICKET)]
    assert out.results[0].message == "Fabric Manager is not running"


def test_a_hung_host_engine_fails_naming_the_probe():
    out = judge({"dcgm": svc(answering=False, error="dcgmi discovery -l: no answer within 3s")})
    assert out.results[0].message == ("DCGM host engine is running but not answering "
                                      "(dcgmi discovery -l: no answer within 3s)")


def test_a_node_without_nvswitch_does_not_need_fabric_manager():
    out = judge({"fabricmanager": svc(expected=False, running=False), "persistenced": svc(answering=True)})
    assert [(r.status, r.message) for r in out.results] == [(Status.PASS, "running: nvidia-persistenced")]


def test_not_read_is_not_applicable():
    out = CHECK.judge(healthy_node(1), context(CHECK))
    assert [r.status for r in out.results] == [Status.NA]


def test_bad_settings_are_named():
    assert CHECK.validate({**CHECK.defaults, "dcgm": "maybe", "probe_timeout_s": 0}) == [
        "dcgm: want auto, on or off, got 'maybe'", "probe_timeout_s: want seconds in (0, 30], got 0"]
