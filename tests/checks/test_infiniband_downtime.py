"""Seconds down in a sliding window: kernel-log events and the check's own state samples."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuhc.checks.infiniband import judge
from gpuhc.checks.infiniband_downtime import down_seconds
from gpuhc.model.result import Action, Status

from tests.helpers.infiniband import NOW, ctx, link, one, port, snap

# a port known to have been up long before the window: outages inside it count
UP_BEFORE = {"ports": {"mlx5_0/1": {"samples": [[NOW - 3600, 1]], "first_up": NOW - 3600}}}


def test_one_long_outage_fails():
    out = judge(snap([port()], [link(-100, "DOWN"), link(-88, "ACTIVE")]), ctx(prev=UP_BEFORE))
    r = one(out)
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert r.message == "mlx5_0/1 down 12.0 s in last 600 s (limit 7 s)"
    assert r.value["down_s"] == 12.0


def test_many_tiny_flaps_under_the_limit_pass():
    events = []
    for i in range(20):  # 20 flaps of 50 ms: 1 s in all, under the 7 s limit
        events += [link(-500 + 20 * i, "DOWN"), link(-500 + 20 * i + 0.05, "ACTIVE")]
    r = one(judge(snap([port()], events), ctx(prev=UP_BEFORE)))
    assert r.status is not Status.FAIL and abs(r.value["down_s"] - 1.0) < 1e-6
    # the same flaps with the warn level raised: a clean pass
    assert one(judge(snap([port()], events), ctx(prev=UP_BEFORE, down_warn_s=2))).status is Status.PASS


def test_flaps_add_up_to_a_failure():
    events = []
    for i in range(8):  # 8 flaps of 1 s: none alone is long, together 8 s
        events += [link(-400 + 30 * i, "DOWN"), link(-399 + 30 * i, "ACTIVE")]
    r = one(judge(snap([port()], events), ctx(prev=UP_BEFORE)))
    assert r.status is Status.FAIL and r.value["down_s"] == 8.0


def test_ongoing_outage_counts_up_to_now():
    out = judge(snap([port(state="DOWN", phys="Polling")], [link(-30, "DOWN")]), ctx(prev=UP_BEFORE))
    r = one(out)
    assert r.status is Status.FAIL and r.value["down_s"] == 30.0
    assert "down 30.0 s in last 600 s" in r.message


def test_outage_before_the_window_is_forgotten_and_a_straddling_one_is_clipped():
    old = [link(-900, "DOWN"), link(-700, "ACTIVE")]
    assert one(judge(snap([port()], old), ctx(prev=UP_BEFORE))).value["down_s"] == 0.0
    straddle = [link(-605, "DOWN"), link(-597, "ACTIVE")]
    assert one(judge(snap([port()], straddle), ctx(prev=UP_BEFORE))).value["down_s"] == 3.0


def test_link_bring_up_after_boot_is_not_an_outage():
    boot = [link(-200, "DOWN"), link(-190, "INIT"), link(-170, "ACTIVE")]
    out = judge(snap([port()], boot), ctx())
    assert one(out).status is Status.PASS and one(out).value["down_s"] == 0.0
    # and it stays that way on the next run, inside the same window
    again = judge(snap([port()], boot, now=NOW + 60), ctx(prev=out.state))
    assert one(again).status is Status.PASS


def test_samples_alone_see_an_outage_between_runs():
    """No kernel log lines: the check's own samples (one per run) bound the outage."""
    first = judge(snap([port()], now=NOW - 120), ctx())
    second = judge(snap([port(state="DOWN", phys="Polling")], now=NOW - 60), ctx(prev=first.state))
    assert one(second).status is Status.FAIL  # down now: the state itself fails
    third = one(judge(snap([port()], now=NOW), ctx(prev=second.state)))
    assert third.status is Status.FAIL and third.value["down_s"] == 60.0


def test_samples_are_pruned_to_the_window_plus_one():
    prev = {"ports": {"mlx5_0/1": {"samples": [[NOW - 2000, 1], [NOW - 1000, 1], [NOW - 700, 1], [NOW - 100, 1]],
                                   "first_up": NOW - 2000}}}
    out = judge(snap([port()]), ctx(prev=prev))
    assert out.state["ports"]["mlx5_0/1"]["samples"] == [[NOW - 700, 1], [NOW - 100, 1], [NOW, 1]]


def test_new_boot_drops_the_old_samples():
    before = judge(snap([port(state="DOWN", phys="Polling")], now=NOW - 100, boot_id="a"),
                   ctx(prev={**UP_BEFORE, "boot_id": "a"}))
    # rebooted: the old DOWN sample and first_up belong to the previous boot
    after = judge(snap([port()], [link(-50, "INIT"), link(-40, "ACTIVE")], boot_id="b"), ctx(prev=before.state))
    assert one(after).status is Status.PASS and one(after).value["down_s"] == 0.0
    assert after.state["boot_id"] == "b"


def test_events_matched_by_pci_when_the_line_has_no_mlx5_name():
    p = port(pci="0000:53:00.0")
    events = [link(-100, "DOWN", dev="0000:53:00.0"), link(-80, "ACTIVE", dev="0000:53:00.0"),
              link(-60, "DOWN", dev=None, pci="0000:53:00.0"), link(-50, "ACTIVE", dev=None, pci="0000:53:00.0"),
              link(-40, "DOWN", dev="mlx5_9"), link(-10, "ACTIVE", dev="mlx5_9"),  # another HCA
              link(-40, "DOWN", num=2), link(-10, "ACTIVE", num=2)]  # another port of this HCA
    assert one(judge(snap([p], events), ctx(prev=UP_BEFORE))).value["down_s"] == 30.0


def test_timestamps_ahead_of_now_are_clamped():
    r = one(judge(snap([port()], [link(-10, "DOWN"), link(+3, "ACTIVE")]), ctx(prev=UP_BEFORE)))
    assert r.value["down_s"] == 10.0


# ----------------------------------------------------------------------------- the math


def test_down_seconds_examples():
    assert down_seconds([], NOW, 600, None) == 0.0
    assert down_seconds([(NOW - 50, False)], NOW, 600, NOW - 60) == 50.0
    assert down_seconds([(NOW - 50, False)], NOW, 600, None) == 0.0  # never up: bring-up
    assert down_seconds([(NOW - 50, False), (NOW - 40, False), (NOW - 30, True)], NOW, 600, NOW - 99) == 20.0


_obs = st.lists(st.tuples(st.floats(NOW - 2000, NOW + 10), st.booleans()), max_size=30)


@given(_obs, st.floats(1, 1000), st.one_of(st.none(), st.floats(NOW - 3000, NOW)))
def test_down_seconds_is_bounded_by_the_window(obs, window, first_up):
    d = down_seconds(obs, NOW, window, first_up)
    assert 0.0 <= d <= window + 1e-6
    assert down_seconds([(t, True) for t, _ in obs], NOW, window, first_up) == 0.0


@given(_obs, st.floats(1, 1000))
def test_a_wider_window_never_sees_less_downtime(obs, window):
    first_up = NOW - 5000
    assert down_seconds(obs, NOW, window, first_up) <= down_seconds(obs, NOW, window * 2, first_up) + 1e-6


def test_a_rerun_at_the_same_time_keeps_one_sample():
    first = judge(snap([port()]), ctx())
    again = judge(snap([port()]), ctx(prev=first.state))
    assert again.state["ports"]["mlx5_0/1"]["samples"] == [[NOW, 1]]


def test_malformed_or_future_state_is_ignored():
    prev = {"ports": {"mlx5_0/1": {"samples": [[NOW - 10, 0], ["x", 1], [NOW - 5], None, [NOW + 50, 0]],
                                   "first_up": "yesterday", "counters": {}}}}
    out = judge(snap([port()]), ctx(prev=prev))
    assert one(out).status is Status.PASS
    assert out.state["ports"]["mlx5_0/1"]["samples"] == [[NOW - 10, 0], [NOW, 1]]
