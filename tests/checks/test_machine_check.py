"""machine-check: uncorrected machine checks and memory errors fail, corrected ones are a rate
(gpuhc/checks/machine_check.py), from real logs (tests/fixtures/host/README.md) and EDAC counters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuhc.checks import machine_check
from gpuhc.model.host import HostReading
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log_parse import parse_lines
from tests.helpers.paths import FIXTURES
from tests.helpers.snapshots import T0, context, healthy_node

CHECK = machine_check.CHECKS[0]


def klog(name: str):
    log = parse_lines((FIXTURES / "host" / name).read_text().splitlines())
    log.boot_id = "boot-a"
    return log


def node(name: str):
    """A node judged when its log ends, as a replay is (gpuhc check --kernel-log)."""
    log = klog(name)
    return replace(healthy_node(1, time=log.last_time or T0), kernel=log)


def judge(snap, prev=None, **t):
    return CHECK.judge(snap, context(CHECK, prev=prev, **t))


def brief(out):
    return [(r.status, r.action) for r in out.results]


@pytest.mark.parametrize("name", ["mce_uncorrected_bank_nuc.log", "mce_ghes_recoverable_memory_failure_mcelog74.log"])
def test_uncorrected_fails_with_a_hardware_ticket(name):
    out = judge(node(name))
    assert brief(out)[0] == (Status.FAIL, Action.DRAIN_TICKET)
    assert "uncorrected machine check / memory error" in out.results[0].message


def test_healthy_log_with_a_few_corrected_errors_passes():
    out = judge(node("mce_edac_ce_healthy_openstreetmap.log"))
    assert [r.status for r in out.results] == [Status.PASS]


def test_a_corrected_storm_warns_and_fails_only_when_set():
    snap = node("mce_edac_ce_storm_dunkel.log")
    assert brief(judge(snap)) == [(Status.WARN, Action.NONE)]
    assert brief(judge(snap, corrected_fail=200)) == [(Status.FAIL, Action.DRAIN_TICKET)]


def test_edac_counters_alone():
    edac = lambda ce, ue: replace(healthy_node(1), host=HostReading(edac={"mc0": {"ce": ce, "ue": ue}}))  # noqa: E731
    first = judge(edac(3, 0))
    assert [r.status for r in first.results] == [Status.PASS]
    grown = judge(replace(edac(20, 0), time=T0 + 600), prev=first.state)  # +17 corrected in 10 minutes
    assert brief(grown) == [(Status.WARN, Action.NONE)]
    lost = judge(replace(edac(20, 1), time=T0 + 900), prev=grown.state)
    assert brief(lost)[0] == (Status.FAIL, Action.DRAIN_TICKET)
    held = judge(replace(edac(20, 1), time=T0 + 1200), prev=lost.state)
    assert brief(held)[0] == (Status.FAIL, Action.DRAIN_TICKET)  # still held: nothing released it
    released = judge(replace(edac(20, 1), time=T0 + 1500), prev=CHECK.acknowledge(held.state, T0 + 1300))
    assert brief(released) == [(Status.WARN, Action.NONE)]  # the ticket is done; the corrected rate still shows


def test_nothing_read_is_an_error():
    assert [r.status for r in judge(healthy_node(1)).results] == [Status.ERROR]
