"""The parser and the xid/nvswitch checks over real-world kernel logs (the NN_* files of
tests/fixtures/kernel_log/real, from public test data; sources in that folder's README).

Each expectation below was counted by hand from the file: the events a person reading it would
name, one per incident.
"""

from __future__ import annotations

from collections import Counter


import pytest

from gpuhc.checks import nvswitch, xid
from gpuhc.model.kernel import EventKind
from gpuhc.model.result import Action, Status
from gpuhc.sources.kernel_log import FileKernelLog
from tests.helpers.snapshots import context, healthy_node
from tests.helpers.paths import FIXTURES

REAL = FIXTURES / "kernel_log" / "real"

X, S, F, IB = EventKind.XID, EventKind.SXID, EventKind.FALLEN_OFF_BUS, EventKind.IB_LINK

# file prefix -> Counter of (kind, code or IB state, fatality) per event
EXPECTED = {
    "01": {(X, 119, None): 5},  # GSP timeouts on 9b:00; RPC history and the rate-limit line are noise
    "02": {(X, 48, None): 1, (X, 63, None): 1, (X, 94, None): 9},  # one ECC incident; peermem noise
    "03": {(X, 13, None): 629, (X, 43, None): 7},  # the storm: 636 Xid lines on 38:00
    "04": {(F, 79, None): 1, (IB, "INIT", None): 1, (IB, "ACTIVE", None): 1},  # 3-line fallen-off message
    "06": {(X, 79, None): 1, (S, 20034, "fatal"): 4},  # the "GPU has fallen off the bus" echo is Xid 79's
    "08": {(S, 22013, "non-fatal"): 1, (IB, "DOWN", None): 3, (IB, "ACTIVE", None): 2},
    "09": {(S, 12028, None): 1},  # a lone Data line: its header was cut off
    "13": {},  # nvswitch open lines, no error
}


def _read(prefix: str):
    (path,) = REAL.glob(f"{prefix}_*")
    return FileKernelLog(str(path)).read()


def _key(e):
    if e.kind is IB:
        return (e.kind, e.state, None)
    return (e.kind, e.code, e.state if e.kind is S else None)


@pytest.mark.parametrize("prefix", sorted(EXPECTED))
def test_events_a_person_would_count(prefix):
    log = _read(prefix)
    assert Counter(_key(e) for e in log.events) == Counter(EXPECTED[prefix])
    assert log.unparsed_lines == 0


def test_every_realdata_file_is_covered():
    assert sorted(p.name[:2] for p in REAL.iterdir() if p.suffix == ".log" and p.name[:2].isdigit()) == sorted(EXPECTED)


def test_details_of_the_shapes():
    fallen = _read("04").events
    assert [(e.kind, e.pci) for e in fallen if e.kind is F] == [(F, "0000:18:00.0")]
    assert {(e.device, e.port) for e in fallen if e.kind is IB} == {("mlx5_5", 1)}
    flap = [e for e in _read("08").events if e.kind is IB]
    assert [(e.state, round(e.time, 2)) for e in flap] == [
        ("DOWN", 4435.12), ("ACTIVE", 4441.77), ("DOWN", 4443.97), ("ACTIVE", 4450.32), ("DOWN", 4450.93)]
    assert all((e.device, e.port) == ("mlx5_3", 1) for e in flap)
    kmsg = _read("13")
    assert (kmsg.last_seq, round(kmsg.last_time, 3)) == (4010, 57631.398)


def _judge(check, prefix, snap=None, prev=None):
    log = _read(prefix)
    snap = snap or healthy_node()
    snap.kernel = log
    snap.time = log.last_time  # a recording is judged at its last line (the runner does the same)
    return check.CHECKS[0].judge(snap, context(check.CHECKS[0], prev=prev))


def test_xid_storm_collapses_to_two_warnings_and_the_storm_stays_a_finding():
    out = _judge(xid, "03")
    assert [(r.status, r.action, r.value["code"], r.value["count"]) for r in out.results if "rule" not in r.value] == [
        (Status.WARN, Action.RESTART_APP, 13, 629), (Status.WARN, Action.RESTART_APP, 43, 7)]
    # 385 of the 636 lines fall in the last hour of the log
    storm = "Xid storm on 0000:38:00.0: 385 x Xid 13/43 in the last 1h, more than 100 (rate_rules.0)"
    assert [r.message for r in out.results if "rule" in r.value] == [storm]
    again = _judge(xid, "03", prev=out.state)  # the per-Xid warnings were told; the storm still is one
    assert [(r.status, r.message) for r in again.results] == [(Status.WARN, storm)]


def test_xid_verdicts_on_real_incidents():
    gsp = _judge(xid, "01").results
    assert [(r.status, r.action, r.message) for r in gsp] == [
        (Status.FAIL, Action.RESET_GPU, "Xid 119 on 0000:9b:00.0 x5: GSP RPC timeout")]  # not one of our GPUs
    ecc = _judge(xid, "02").results
    assert [(r.status, r.value["code"]) for r in ecc] == [(Status.FAIL, 48), (Status.FAIL, 63), (Status.WARN, 94)]
    bus = _judge(xid, "04").results  # 18:00.0 is gpu0 of the test node
    # Xid 79 is drain + reboot (NVIDIA's RESTART_BM; docs/campaign.md "What changed, and why")
    assert [(r.status, r.action, r.subject) for r in bus] == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]


def test_nvswitch_verdicts_on_real_incidents():
    fatal = _judge(nvswitch, "06").results
    assert [(r.status, r.subject, r.value["count"]) for r in fatal] == [
        (Status.FAIL, "nvswitch0", 2), (Status.FAIL, "nvswitch1", 1), (Status.FAIL, "nvswitch2", 1)]
    assert all(r.action is Action.DRAIN_REBOOT for r in fatal)
    assert [(r.status, r.subject) for r in _judge(nvswitch, "08").results] == [(Status.WARN, "nvswitch3")]
    # a lone Data line of 12028: the driver reports that SXid only "Non-fatal" (the SXid catalog)
    assert [(r.status, r.subject) for r in _judge(nvswitch, "09").results] == [(Status.WARN, "nvswitch1")]
    assert [r.status for r in _judge(nvswitch, "13").results] == [Status.PASS]
