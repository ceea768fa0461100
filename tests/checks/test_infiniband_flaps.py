"""Single IB flaps that recur over a day drain; one burst of them never does (the infiniband
check's ``flap_hours``, gpuhc/checks/persistence.py). Each run is the check judging one health
check's snapshot, its state handed to the next as the runner does."""

from __future__ import annotations

from gpuhc.checks.infiniband import CLEARED, RECURRING_FLAPS_CLASS, acknowledge, judge
from gpuhc.model.result import Action, Status
from gpuhc.slurm.policy.reason import build_reason

from tests.helpers.infiniband import NOW, ctx, link, one, port, snap

HOUR = 3600.0
# NOW is 2023-11-14T22:13:20Z; the day below starts on an hour so the clock hours are plain
DAY0 = NOW - NOW % HOUR + HOUR
UP = [link(DAY0 - NOW - 600, "ACTIVE")]  # the port came up at boot, before the day


def flap(at: float, down_s: float = 3.0):
    """One outage at ``at`` (absolute time) of ``down_s`` seconds."""
    return [link(at - NOW, "DOWN"), link(at + down_s - NOW, "ACTIVE")]


def runs(times, events_at, prev=None, **thresholds):
    """A health check at each of ``times``; the kernel log holds ``events_at(t)`` at each.
    Returns [(time, result)] and the last state."""
    out = []
    for t in times:
        o = judge(snap([port()], events_at(t), now=t), ctx(prev=prev, **thresholds))
        prev = o.state
        out.append((t, one(o)))
    return out, prev


def test_single_flaps_in_three_hours_of_a_day_drain_with_the_span_in_the_reason():
    flaps = [DAY0 + 60, DAY0 + 3 * HOUR + 42 * 60, DAY0 + 7 * HOUR + 21 * 60 + 30]
    events = UP + [e for f in flaps for e in flap(f)]
    seen, _ = runs([DAY0 + k * 300 for k in range(1, 12 * 8)], lambda t: [e for e in events if e.time <= t])
    fails = [(t, r) for t, r in seen if r.status is Status.FAIL]
    assert fails and fails[0][0] == DAY0 + 7 * HOUR + 25 * 60  # the first health check after the third flap
    assert all(r.status is Status.WARN for t, r in seen if t < fails[0][0] and r.status is not Status.PASS)
    r = fails[0][1]
    assert r.action is Action.DRAIN_TICKET and r.evidence == RECURRING_FLAPS_CLASS
    assert r.message.startswith("mlx5_0/1 single flaps recurring 7.3 h (down in 3 separate hours of the last 24 h)")
    assert build_reason([r]).startswith("gpuhc: infiniband mlx5_0/1 single flaps recurring 7.3 h (down in 3 ")
    # it holds at every run after, until the first flap is a day old
    assert all(r.status is Status.FAIL for t, r in seen if t >= fails[0][0])


def test_the_state_remembers_flaps_the_kernel_log_no_longer_shows():
    # the ring buffer wrapped (or the log rotated): each run sees only the last few minutes
    flaps = [DAY0 + 60, DAY0 + 3 * HOUR + 42 * 60, DAY0 + 7 * HOUR + 21 * 60 + 30]
    events = UP + [e for f in flaps for e in flap(f)]
    seen, state = runs([DAY0 + k * 300 for k in range(1, 12 * 8)],
                       lambda t: [e for e in events if t - 900 <= e.time <= t])
    assert seen[-1][1].status is Status.FAIL and len(state["ports"]["mlx5_0/1"]["flaps"]) == 3


def test_one_burst_of_flaps_then_quiet_never_drains():
    # twelve flaps of 0.5 s over 20 minutes (6 s down: under the downtime limit) across an hour
    # boundary, then a quiet day of health checks
    burst = [DAY0 + 50 * 60 + 100 * k for k in range(12)]
    events = UP + [e for f in burst for e in flap(f, 0.5)]
    seen, state = runs([DAY0 + k * 300 for k in range(1, 12 * 30)], lambda t: [e for e in events if e.time <= t])
    assert {r.status for _, r in seen} == {Status.WARN, Status.PASS}
    assert state["ports"]["mlx5_0/1"]["flaps"] == []  # a day on, nothing is kept


def test_flaps_more_than_a_day_apart_are_not_one_that_recurs():
    flaps = [DAY0 + 60, DAY0 + HOUR + 60, DAY0 + 25 * HOUR + 60]
    events = UP + [e for f in flaps for e in flap(f)]
    seen, _ = runs([DAY0 + k * 600 for k in range(1, 6 * 27)], lambda t: [e for e in events if e.time <= t])
    assert all(r.status is not Status.FAIL for _, r in seen)


def test_an_admins_resume_forgives_the_flaps_the_log_still_shows():
    flaps = [DAY0 + 60, DAY0 + 3 * HOUR + 42 * 60, DAY0 + 7 * HOUR + 21 * 60 + 30]
    events = UP + [e for f in flaps for e in flap(f)]
    at = DAY0 + 8 * HOUR
    seen, state = runs([at], lambda t: events)
    assert seen[0][1].status is Status.FAIL
    state = acknowledge(state, at + 60)
    assert state[CLEARED] == at + 60 and state["ports"]["mlx5_0/1"]["flaps"] == []
    seen, state = runs([at + 300, at + 600], lambda t: events, prev=state)
    assert all(r.status is Status.PASS for _, r in seen) and state[CLEARED] == at + 60
    # new flaps after the resume count again from one
    later = [at + HOUR, at + 2 * HOUR, at + 3 * HOUR]
    more = events + [e for f in later for e in flap(f)]
    seen, _ = runs([at + 3 * HOUR + 300], lambda t: more, prev=state)
    assert seen[0][1].status is Status.FAIL and "3 separate hours" in seen[0][1].message
    assert acknowledge(None, at) == {CLEARED: at} and acknowledge(["damaged"], at) == {CLEARED: at}


def test_an_admins_resume_forgives_the_outage_it_repaired_but_not_a_port_still_down():
    # The port went down and was last seen down 20 min before a person's repair; the admin's
    # resume follows the repair, and the first run after it sees the port up. The outage is the
    # one the repair answered for: no drain for "down 600 s in the last 600 s" (the campaign
    # found it, a month a seed). Without the resume the same readings fail.
    down_at = DAY0 + 60
    seen, state = runs([DAY0 + 300], lambda t: UP + [link(down_at - NOW, "DOWN")])
    assert seen[0][1].status is Status.FAIL
    state["ports"]["mlx5_0/1"]["samples"] = [[DAY0 + 300, 0]]
    fixed = DAY0 + 1500
    up = UP + [link(down_at - NOW, "DOWN"), link(fixed - NOW, "ACTIVE")]
    again, _ = runs([fixed + 30], lambda t: up, prev=state)
    assert again[0][1].status is Status.FAIL and "down" in again[0][1].message
    resumed = acknowledge(state, fixed + 30)
    seen, _ = runs([fixed + 30, fixed + 330], lambda t: up, prev=resumed)
    assert [r.status for _, r in seen] == [Status.PASS, Status.PASS]
    # resumed while still down: the port's state fails it at once
    still = acknowledge(state, fixed + 30)
    o = judge(snap([port(state="DOWN")], UP + [link(down_at - NOW, "DOWN")], now=fixed + 30), ctx(prev=still))
    assert one(o).status is Status.FAIL and "DOWN" in one(o).message


def test_an_ethernet_ports_recurring_flaps_only_warn_and_the_rule_can_be_off():
    flaps = [DAY0 + 60, DAY0 + 3 * HOUR + 42 * 60, DAY0 + 7 * HOUR + 21 * 60 + 30]
    events = UP + [e for f in flaps for e in flap(f)]
    eth = port(layer="Ethernet")
    o = judge(snap([eth], events, now=DAY0 + 8 * HOUR), ctx())
    assert one(o).status is Status.WARN and "single flaps recurring" in one(o).message
    seen, _ = runs([DAY0 + 8 * HOUR], lambda t: events, flap_hours=0)
    assert seen[0][1].status is Status.PASS


def test_link_training_at_boot_is_not_a_flap():
    boot = [link(DAY0 + k * HOUR - NOW, s) for k in (0, 3, 7) for s in ("DOWN",)]  # before any ACTIVE
    seen, state = runs([DAY0 + 8 * HOUR], lambda t: boot + [link(DAY0 + 8 * HOUR - 10 - NOW, "ACTIVE")])
    assert seen[0][1].status is Status.PASS and state["ports"]["mlx5_0/1"]["flaps"] == []


def test_a_bad_flap_setting_is_an_error_not_a_verdict():
    o = judge(snap([port()], UP, now=DAY0), ctx(flap_hours=30, flap_window_h=24))
    (r,) = o.results
    assert r.status is Status.ERROR and "flap_hours: 30 distinct hours cannot fit in flap_window_h 24 h" in r.message
