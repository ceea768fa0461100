"""`gpuhc fleet stats`: on a generated history with a known failure rate the MTBF and MTTR come
back within 10 %, a rising rate is called rising, and the event-log reader finds the drains and
resumes the Slurm flows log."""

from __future__ import annotations

import json
import random

import pytest

from gpuhc.export.eventlog import append_event
from gpuhc.fleet.history import Outage, combine, merge_back_to_back, read_event_logs
from gpuhc.fleet.stats import binomial_two_sided, compute, downtime, per_gpu_hour_rate

DAY = 86400.0
CAUSES = ("xid", "ecc", "infiniband")


def generate(seed: int, nodes: int, days: float, mtbf_h: float, mttr_h: float, start: float = 1.7e9,
             rate_change: float = 1.0) -> tuple[list[Outage], dict[str, tuple[str, ...]]]:
    """Alternating renewal process per node: in service for Exp(mtbf), drained for Exp(mttr).
    ``rate_change`` multiplies the failure rate in the second half of the window."""
    rng = random.Random(seed)
    end = start + days * DAY
    mid = start + days * DAY / 2
    outages, parts = [], {}
    for i in range(nodes):
        name = f"gpu{i:03d}"
        parts[name] = ("train" if i % 2 else "infer",)
        t = start
        while True:
            rate = 1.0 / (mtbf_h * 3600.0) * (rate_change if t >= mid else 1.0)
            t += rng.expovariate(rate)
            if t >= end:
                break
            back = t + rng.expovariate(1.0 / (mttr_h * 3600.0))
            cause = rng.choice(CAUSES)
            outages.append(Outage(name, t, back if back < end else None, f"gpuhc: {cause} evidence", cause, "gpuhc"))
            t = back
    return outages, parts


@pytest.mark.parametrize("seed", range(5))
def test_recovers_mtbf_and_mttr_within_ten_percent(seed):
    outages, parts = generate(seed, nodes=64, days=60, mtbf_h=10 * 24, mttr_h=6)
    st = compute(outages, parts, 1.7e9, 1.7e9 + 60 * DAY)
    fleet = st.of("fleet")[0]
    assert fleet.drains > 300
    assert fleet.mtbf_h == pytest.approx(240, rel=0.10)
    assert fleet.mttr_h == pytest.approx(6, rel=0.10)
    assert fleet.trend == "steady" or fleet.trend_p > 0.01
    by_part = {r.key: r for r in st.of("partition")}
    assert set(by_part) == {"train", "infer"} and by_part["train"].nodes == 32
    assert sum(r.drains for r in by_part.values()) == fleet.drains
    assert sum(r.drains for r in st.of("cause")) == fleet.drains
    # Every cause is a third of the drains: its MTBF against the fleet's time is about 3x.
    for r in st.of("cause"):
        assert r.mtbf_h == pytest.approx(3 * 240, rel=0.25)


def test_rising_failure_rate_is_called_rising():
    outages, parts = generate(1, nodes=64, days=60, mtbf_h=20 * 24, mttr_h=4, rate_change=3.0)
    fleet = compute(outages, parts, 1.7e9, 1.7e9 + 60 * DAY).of("fleet")[0]
    assert fleet.second_half > 1.4 * fleet.first_half
    assert fleet.trend == "rising" and fleet.trend_p < 0.01


def test_open_outages_retired_and_time_outside_the_window():
    start, end = 1000.0, 1000.0 + 10 * DAY
    outages = [
        Outage("a", start - DAY, start + DAY, "gpuhc: xid x", "xid", "gpuhc"),  # began before: not a drain here
        Outage("a", start + 2 * DAY, None, "gpuhc: RETIRED xid x", "xid", "gpuhc", retired=True),
        Outage("b", start + 5 * DAY, start + 5 * DAY + 3600, "admin work", "admin", "admin"),
    ]
    st = compute(outages, {"a": ("p",), "b": ("p",), "c": ("p",)}, start, end)
    fleet = st.of("fleet")[0]
    assert (fleet.drains, fleet.open, fleet.retired) == (2, 1, 1)
    assert fleet.mttr_h == pytest.approx(1.0)  # only the closed outage
    up = 3 * 10 * 24 - (1 * 24 + 8 * 24) - 1  # a: out 1 day at the start and the last 8; b: 1 h
    assert fleet.node_hours_up == pytest.approx(up)
    assert fleet.mtbf_h == pytest.approx(up / 2)
    nodes = {r.key: r for r in st.of("node")}
    assert set(nodes) == {"a", "b"}  # c never failed: no row of its own
    assert per_gpu_hour_rate(st, 8) == pytest.approx(2 / (up * 8))


def test_downtime_counts_overlaps_once():
    o = [Outage("a", 0, 10, "", "", ""), Outage("a", 5, 20, "", "", ""), Outage("a", 30, None, "", "", "")]
    assert downtime(o, 0, 40) == 30


def test_binomial_two_sided():
    assert binomial_two_sided(5, 10) == 1.0
    assert binomial_two_sided(0, 10) == pytest.approx(2 / 1024)
    assert binomial_two_sided(0, 0) == 1.0


def test_history_nodes_missing_from_the_node_list_are_noted():
    st = compute([Outage("old", 10, 20, "x", "admin", "admin")], {"new": ("p",)}, 0, 100)
    assert any("not in the node list" in n for n in st.notes)
    assert {r.key for r in st.of("partition")} == {"p", "?"}


def _run(path, node, t, action, reason=None):
    """A line as `gpuhc healthcheck` writes it: the run report plus the ``slurm`` key."""
    append_event(str(path), {"schema": 1, "node": node, "stage": "passive", "started": t, "status": "fail",
                             "results": [], "slurm": {"action": action, "why": "w", "reason": reason,
                                                      "acted": action in ("drain", "resume"), "breaker": None}})


def test_event_log_drains_and_resumes(tmp_path):
    log = tmp_path / "gpuhc-events.jsonl"
    _run(log, "n1", 100.0, "none")
    _run(log, "n1", 200.0, "drain", "gpuhc: xid79 gpu3 fell off the bus")
    _run(log, "n1", 300.0, "keep")
    _run(log, "n1", 900.0, "resume")
    _run(log, "n2", 500.0, "drain", "gpuhc: RETIRED ecc gpu0 uncorrectable")
    with open(log, "ab") as f:
        f.write(b'{"not json", "acted":true\n')
    problems: list[str] = []
    out = read_event_logs([str(tmp_path / "*.jsonl")], problems)
    assert [(o.node, o.start, o.end, o.cause, o.retired) for o in out] == [
        ("n1", 200.0, 900.0, "xid", False), ("n2", 500.0, None, "ecc", True)]
    assert len(problems) == 1 and "skipped" in problems[0]
    problems = []
    assert read_event_logs([str(tmp_path / "missing.jsonl")], problems) == [] and "cannot open" in problems[0]


def test_combine_and_merge():
    slurm = [Outage("n1", 100, 200, "gpuhc: xid a", "xid", "gpuhc"), Outage("n1", 200, 400, "gpuhc: xid a [q1]", "xid",
                                                                            "gpuhc")]
    merged = merge_back_to_back(slurm)
    assert [(o.start, o.end) for o in merged] == [(100, 400)]
    logged = [Outage("n1", 130, None, "gpuhc: xid a", "xid", "gpuhc", source="eventlog"),
              Outage("n2", 50, 60, "gpuhc: ecc b", "ecc", "gpuhc", source="eventlog")]
    both = combine(merged, logged)
    assert [(o.node, o.source) for o in both] == [("n2", "eventlog"), ("n1", "slurm")]


def test_png_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")  # a test extra: installed in CI
    from gpuhc.fleet.render import write_png

    outages, parts = generate(3, nodes=8, days=14, mtbf_h=72, mttr_h=4)
    path = tmp_path / "drains.png"
    write_png(compute(outages, parts, 1.7e9, 1.7e9 + 14 * DAY), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_json_shape():
    outages, parts = generate(4, nodes=4, days=7, mtbf_h=48, mttr_h=2)
    doc = json.loads(json.dumps(compute(outages, parts, 1.7e9, 1.7e9 + 7 * DAY).to_dict()))
    assert {r["kind"] for r in doc["rows"]} >= {"fleet", "partition", "cause", "node"}
    assert all(len(v) == 7 for v in doc["daily_drains"].values())


def test_a_new_cause_in_the_same_second_is_a_new_outage():
    back_to_back = [Outage("n1", 100, 200, "gpuhc: xid a", "xid", "gpuhc"),
                    Outage("n1", 201, 300, "gpuhc: ecc b", "ecc", "gpuhc")]
    assert [o.cause for o in merge_back_to_back(back_to_back)] == ["xid", "ecc"]
