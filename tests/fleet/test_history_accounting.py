"""The fleet parsers on real sacct and sacctmgr output (tests/fixtures/slurm_accounting/README.md)."""

from __future__ import annotations


from gpuhc.fleet.history import parse_sacctmgr_events
from gpuhc.fleet.suspects import Settings, judge, parse_sacct
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm_accounting"


def test_sacct_jobs_with_their_nodes_and_end_states():
    jobs, bad = parse_sacct((FIX / "sacct.txt").read_text())
    assert bad == 0
    assert [(j.job_id, j.state, j.nodes) for j in jobs] == [
        ("1", "COMPLETED", ("gpu001",)), ("2", "COMPLETED", ("gpu001", "gpu002")),
        ("3", "FAILED", ("gpu002",)), ("4", "NODE_FAIL", ("gpu003",))]
    assert all(j.end is not None and j.partition == "gpu" for j in jobs)
    recs = {r.node: r for r in judge(jobs, Settings())}
    assert (recs["gpu001"].jobs, recs["gpu001"].bad) == (2, 0)
    assert recs["gpu003"].by_state == {"NODE_FAIL": 1} and recs["gpu003"].bad_jobs == ["4"]


def test_sacctmgr_node_events_become_outages():
    out = {o.node: o for o in parse_sacctmgr_events((FIX / "sacctmgr-events.txt").read_text())}
    assert set(out) == {"gpu001", "gpu002", "gpu003"}
    admin = out["gpu001"]
    assert (admin.reason, admin.owner, admin.end) == ("admin: swap PSU | ticket 4711", "admin", None)
    xid = out["gpu002"]  # drained, re-drained with [q1], resumed: one outage
    assert (xid.cause, xid.owner, xid.retired, xid.end - xid.start) == ("xid", "gpuhc", False, 4.0)
    down = out["gpu003"]
    assert (down.cause, down.owner) == ("not responding", "slurm")
