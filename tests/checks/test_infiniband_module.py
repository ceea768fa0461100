"""mlx5 cable (module) events feed the infiniband check's seconds down (gpuhc/checks/infiniband.py):
a cable pulled or failed starts an outage even where the log has no Port: line for it."""

from __future__ import annotations

from gpuhc.checks.infiniband import judge
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.result import Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.infiniband import NOW, ctx, link, one, port, snap

UP_BEFORE = {"ports": {"mlx5_0/1": {"samples": [[NOW - 3600, 1]], "first_up": NOW - 3600}}}
PCI = "0000:5c:00.0"


def module(t, status):
    line = f"mlx5_core {PCI}: Port module event[error]: module 0, {status}, High Temperature"
    (ev,) = parse_lines([line]).events  # the parser's own event for the real line's form
    return KernelEvent(EventKind.IB_MODULE, NOW + t, ev.message, pci=ev.pci, port=ev.port, state=ev.state)


def test_a_cable_error_then_the_link_back_is_an_outage_of_that_length():
    events = [module(-100, "Cable error"), link(-80, "ACTIVE", pci=PCI)]
    r = one(judge(snap([port(pci=PCI)], events), ctx(prev=UP_BEFORE)))
    assert r.status is Status.FAIL and r.value["down_s"] == 20.0


def test_a_cable_event_of_another_hca_is_not_this_ports():
    events = [module(-100, "Cable error"), link(-80, "ACTIVE", pci=PCI)]
    r = one(judge(snap([port(pci="0000:5d:00.0")], events), ctx(prev=UP_BEFORE)))
    assert r.value["down_s"] == 0.0


def test_a_cable_plugged_in_is_no_outage():
    line = f"mlx5_core {PCI}: Port module event: module 0, Cable plugged"
    (ev,) = parse_lines([line]).events
    plugged = KernelEvent(EventKind.IB_MODULE, NOW - 100, ev.message, pci=PCI, port=0, state=ev.state)
    assert ev.state == "Cable plugged"
    r = one(judge(snap([port(pci=PCI)], [plugged]), ctx(prev=UP_BEFORE)))
    assert r.status is Status.PASS and r.value["down_s"] == 0.0
