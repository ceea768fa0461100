"""The nvswitch check: fabric registration per GPU (with its grace period) and NVSwitch SXids."""

from __future__ import annotations

import json

import pytest

from gpuhc.checks import nvswitch
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from gpuhc.model.result import Action, Status
from tests.helpers.snapshots import T0, context, healthy_node, no_nvml, with_gpu

CHECK = nvswitch.CHECKS[0]
SW0, SW1 = "0000:05:00.0", "0000:06:00.0"


def sx(code: int, fatal: bool | None = True, switch: int = 0, t: float = T0 - 60, link: int | None = 7,
       seq: int | None = None) -> KernelEvent:
    state = None if fatal is None else ("fatal" if fatal else "non-fatal")
    return KernelEvent(kind=EventKind.SXID, time=t, message=f"SXid (PCI:{(SW0, SW1)[switch]}): {code}, test",
                       pci=(SW0, SW1)[switch], code=code, device=f"nvswitch{switch}", port=link, state=state, seq=seq)


def node(*events: KernelEvent, boot: str = "boot-a", time: float = T0, snap=None):
    snap = snap if snap is not None else healthy_node()
    snap.time = time
    times = [e.time for e in events]
    snap.kernel = KernelLog(events=list(events), source="test", boot_id=boot, last_time=max(times, default=None))
    return snap


def judge(snap, prev=None, gpus=None, **thresholds):
    return CHECK.judge(snap, context(CHECK, prev=prev, gpus=gpus, **thresholds))


def brief(out):
    return [(r.status, r.action, r.subject) for r in out.results]


# ---------------------------------------------------------------------- fabric


def test_healthy_fabric_passes():
    out = judge(node())
    assert brief(out) == [(Status.PASS, Action.NONE, "node")]
    assert out.results[0].message == "fabric registered on 8 GPU(s), no NVSwitch error needing action"
    json.dumps(out.state)


def test_no_fabric_is_not_applicable():
    out = judge(node(snap=healthy_node(fabric_state=None, fabric_status=None)))
    assert brief(out) == [(Status.NA, Action.NONE, "node")]
    out = judge(node(snap=healthy_node(fabric_state="not supported", fabric_status=None)))
    assert [r.status for r in out.results] == [Status.NA]


def test_nvml_unavailable_without_sxids_is_not_applicable():
    assert [(r.status, r.message) for r in judge(node(snap=no_nvml())).results] == [(Status.NA, "NVML unavailable")]


def test_failed_registration_drains_and_reboots():
    snap = with_gpu(healthy_node(), 2, fabric_state="completed", fabric_status="NVML_ERROR_NOT_READY")
    out = judge(node(snap=snap))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu2")]
    assert "fabric registration failed" in out.results[0].message


def test_registration_in_progress_warns_then_fails_after_grace():
    pending = with_gpu(healthy_node(), 1, fabric_state="NVML_GPU_FABRIC_STATE_IN_PROGRESS", fabric_status=None)
    first = judge(node(snap=pending))
    assert brief(first) == [(Status.WARN, Action.NONE, "gpu1")]
    assert first.state["fabric_pending"] == {"gpu1": T0}
    still = judge(node(snap=pending, time=T0 + 120), prev=first.state)
    assert [r.status for r in still.results] == [Status.WARN]
    late = judge(node(snap=pending, time=T0 + 301), prev=still.state)
    assert brief(late) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu1")]
    assert "still in progress after 301s" in late.results[0].message
    done = judge(node(time=T0 + 400), prev=late.state)
    assert [r.status for r in done.results] == [Status.PASS] and done.state["fabric_pending"] == {}


def test_fabric_grace_zero_fails_at_once():
    snap = with_gpu(healthy_node(), 0, fabric_state="not started", fabric_status=None)
    assert brief(judge(node(snap=snap), fabric_grace_s=0)) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]


def test_prolog_judges_only_the_jobs_gpus_for_fabric():
    snap = with_gpu(healthy_node(), 6, fabric_state="completed", fabric_status="failure")
    assert [r.status for r in judge(node(snap=snap), gpus=[0, 1]).results] == [Status.PASS]


# ---------------------------------------------------------------------- SXids


def test_fatal_sxid_fails_and_non_fatal_warns():
    out = judge(node(sx(20034, True, link=63), sx(20034, True, link=62), sx(22013, False, switch=1)))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, "nvswitch0"), (Status.WARN, Action.NONE, "nvswitch1")]
    assert out.results[0].message == "SXid 20034 on nvswitch0 (0000:05:00.0) x2: fatal, LTSSM fault (link went down) (link 63, 62)"


def test_sxid_without_fatality_uses_the_catalog():
    out = judge(node(sx(20034, None), sx(99999, None, switch=1)))
    assert [(r.status, r.subject) for r in out.results] == [(Status.FAIL, "nvswitch0"), (Status.WARN, "nvswitch1")]


def test_the_line_beats_the_catalog():
    assert [r.status for r in judge(node(sx(22013, True))).results] == [Status.FAIL]


def test_sxid_storm_collapses_per_switch_and_code():
    out = judge(node(*[sx(22013, False, t=T0 - 100 + i) for i in range(50)]))
    assert [(r.subject, r.value["count"]) for r in out.results] == [("nvswitch0", 50)]


def test_fatal_sxid_holds_non_fatal_warns_once_reboot_clears():
    log = (sx(20034, True), sx(22013, False))
    first = judge(node(*log))
    second = judge(node(*log, time=T0 + 300), prev=first.state)
    assert [(r.status, r.subject) for r in second.results] == [(Status.FAIL, "nvswitch0")]
    wrapped = judge(node(time=T0 + 600), prev=second.state)  # ring buffer lost it: still held
    assert [r.status for r in wrapped.results] == [Status.FAIL]
    rebooted = judge(node(boot="boot-b", time=T0 + 900), prev=wrapped.state)
    assert [r.status for r in rebooted.results] == [Status.PASS]


def test_sxids_are_judged_in_the_prolog_whatever_the_gpus():
    assert [r.status for r in judge(node(sx(20034)), gpus=[0]).results] == [Status.FAIL]


def test_sxid_window():
    assert [r.status for r in judge(node(sx(20034, t=T0 - 90000))).results] == [Status.PASS]


def test_no_kernel_log_still_judges_fabric_and_keeps_state():
    snap = with_gpu(healthy_node(), 3, fabric_state="completed", fabric_status="failure")
    snap.kernel = None
    prev = {"cursor": {"boot_id": "boot-a"}, "held": [{"subject": "nvswitch0", "code": 20034}]}
    out = CHECK.judge(snap, context(CHECK, prev=prev))
    assert [(r.status, r.subject) for r in out.results] == [(Status.FAIL, "gpu3"), (Status.ERROR, "node")]
    assert out.state["held"] == prev["held"] and out.state["cursor"] == prev["cursor"]


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog", "bootstrap"])
def test_registered_for_every_stage(stage):
    assert stage in CHECK.stages and CHECK.id == "nvswitch"


def test_a_reboot_restarts_the_fabric_grace_period():
    pending = with_gpu(healthy_node(), 1, fabric_state="in progress", fabric_status=None)
    first = judge(node(snap=pending, boot="boot-a"))
    rebooted = judge(node(snap=pending, boot="boot-b", time=T0 + 3600), prev=first.state)
    assert [r.status for r in rebooted.results] == [Status.WARN]
    assert rebooted.state["fabric_pending"] == {"gpu1": T0 + 3600}


def test_prolog_keeps_the_clocks_of_other_gpus():
    pending = healthy_node(fabric_state="in progress", fabric_status=None)
    first = judge(node(snap=pending))
    prolog = judge(node(snap=pending, time=T0 + 100), prev=first.state, gpus=[0])
    assert prolog.state["fabric_pending"]["gpu5"] == T0
    late = judge(node(snap=pending, time=T0 + 400), prev=prolog.state)
    assert {r.status for r in late.results} == {Status.FAIL}
