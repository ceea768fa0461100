"""The infiniband check: link state, rate, counter growth, downtime window, ignored ports."""

from __future__ import annotations

from gpuhc.checks.infiniband import CHECKS, ID, judge
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot


def test_registered_for_every_stage_with_its_sources():
    (c,) = CHECKS
    assert c.id == ID == "infiniband"
    assert set(c.stages) == {"passive", "prolog", "epilog", "bootstrap"}
    assert set(c.needs) == {"ib"} and set(c.optional) == {"kernel_log"}


def test_healthy_ports_pass_and_are_remembered():
    out = judge(snap([port(), port("mlx5_1")]), ctx())
    assert [r.status for r in out.results] == [Status.PASS, Status.PASS]
    assert one(out).message == "mlx5_0/1 ACTIVE LinkUp, 400 Gb/s"
    assert set(out.state["ports"]) == {"mlx5_0/1", "mlx5_1/1"}
    assert out.state["ports"]["mlx5_0/1"]["samples"] == [[NOW, 1]]


def test_physical_link_down_fails_with_ticket():
    r = one(judge(snap([port(state="DOWN", phys="Polling")]), ctx()))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert "physical link Polling" in r.message


def test_init_fails_naming_the_subnet_manager():
    r = one(judge(snap([port(state="INIT")]), ctx()))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert r.message.startswith("mlx5_0/1 INIT") and "subnet manager" in r.message


def test_down_over_a_live_phy_asks_for_a_reboot():
    r = one(judge(snap([port(state="DOWN")]), ctx()))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT


def test_unreadable_state_is_an_error_not_a_drain():
    r = one(judge(snap([port(state=None)]), ctx()))
    assert r.status is Status.ERROR and not r.action.drains


def test_slow_rate_against_expected():
    r = one(judge(snap([port(rate=200.0)]), ctx(expected_rate_gbps=400)))
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET
    assert "rate 200 Gb/s, expected 400 Gb/s" in r.message
    assert one(judge(snap([port(rate=400.0)]), ctx(expected_rate_gbps=400))).status is Status.PASS


def test_rate_against_baseline_also_for_ethernet():
    base = {"ib": {"mlx5_0/1": {"rate_gbps": 400, "state": "ACTIVE", "link_layer": "InfiniBand"},
                   "mlx5_bond_0/1": {"rate_gbps": 200, "state": "ACTIVE", "link_layer": "Ethernet"}}}
    out = judge(snap([port(rate=200.0), port("mlx5_bond_0", rate=100.0, layer="Ethernet")]),
                ctx(baseline=base, ethernet="judge"))
    assert one(out).status is Status.FAIL
    assert one(out, "mlx5_bond_0/1").status is Status.FAIL
    # the profile's IB floor does not apply to an Ethernet port; its baseline does
    eth = judge(snap([port("mlx5_bond_0", rate=200.0, layer="Ethernet")]), ctx(expected_rate_gbps=400))
    assert one(eth, "mlx5_bond_0/1").status is Status.PASS


def test_port_in_baseline_but_missing_fails_and_baseline_down_port_is_na():
    base = {"ib": {"mlx5_0/1": {"rate_gbps": 400, "state": "ACTIVE"},
                   "mlx5_0/2": {"rate_gbps": None, "state": "DOWN"},
                   "mlx5_3/1": {"rate_gbps": 400, "state": "ACTIVE"}}}
    out = judge(snap([port(), port(num=2, state="DOWN", phys="Polling")]), ctx(baseline=base))
    assert one(out).status is Status.PASS
    assert one(out, "mlx5_0/2").status is Status.NA
    missing = one(out, "mlx5_3/1")
    assert missing.status is Status.FAIL and missing.action is Action.DRAIN_TICKET and "missing" in missing.message


def test_expected_port_count():
    out = judge(snap([port(), port("mlx5_bond_0", layer="Ethernet")]), ctx(expected_ports=2))
    (r,) = [r for r in out.results if r.subject == "node"]
    assert r.status is Status.FAIL and r.value == 1 and r.action.drains


def test_no_infiniband_is_na():
    assert [r.status for r in judge(snap([]), ctx()).results] == [Status.NA]
    assert [r.status for r in judge(Snapshot("n1", NOW), ctx()).results] == [Status.NA]


# ----------------------------------------------------------------------------- counters


def run_twice(before, after, **th):
    first = judge(snap([port(**before)]), ctx(**th))
    assert one(first).status is Status.PASS  # the first run only baselines
    return one(judge(snap([port(**after)], now=NOW + 300), ctx(prev=first.state, **th)))


def test_counter_growth_warns_then_fails():
    assert run_twice({"symbol_error": 5}, {"symbol_error": 9}).status is Status.PASS
    r = run_twice({"symbol_error": 5}, {"symbol_error": 25})
    assert r.status is Status.WARN and "symbol_error +20 since last run" in r.message
    r = run_twice({"port_rcv_errors": 0}, {"port_rcv_errors": 5000})
    assert r.status is Status.FAIL and r.action is Action.DRAIN_TICKET


def test_counter_decrease_rebaselines():
    r = run_twice({"symbol_error": 5000}, {"symbol_error": 3})
    assert r.status is Status.PASS


def test_link_downed_growth_only_warns():
    r = run_twice({"link_downed": 1}, {"link_downed": 40})
    assert r.status is Status.WARN and "link_downed +39" in r.message


def test_saturated_counter_warns_once_stuck():
    assert run_twice({"link_downed": 250}, {"link_downed": 255}).status is Status.WARN
    # already at the ceiling when first seen: warn at once, growth can never be seen
    r = one(judge(snap([port(link_downed=255)]), ctx()))
    assert r.status is Status.WARN and "link_downed saturated at 255" in r.message
    assert run_twice({"link_downed": 255}, {"link_downed": 255}, warn_saturated=False).status is Status.PASS


def test_partial_counter_override_keeps_the_other_defaults():
    th = {"counters": {"symbol_error": [None, 5]}}
    assert run_twice({"symbol_error": 0}, {"symbol_error": 5}, **th).status is Status.FAIL
    assert run_twice({"port_rcv_errors": 0}, {"port_rcv_errors": 20}, **th).status is Status.WARN


def test_bad_counter_threshold_is_an_error():
    out = judge(snap([port()]), ctx(counters={"symbol_error": "lots"}))
    assert [r.status for r in out.results] == [Status.ERROR]
    assert "thresholds.counters.symbol_error" in out.results[0].message


# ----------------------------------------------------------------------------- ignoring


def test_ignored_ports_are_na_and_not_remembered():
    ports = [port(), port("mlx5_4", state="DOWN", phys="Disabled"), port("mlx5_bond_0", state="DOWN", layer="Ethernet")]
    out = judge(snap(ports), ctx(ignore=["mlx5_4/1", "mlx5_bond_*"]))
    assert one(out, "mlx5_4/1").status is Status.NA and "ignored" in one(out, "mlx5_4/1").message
    assert one(out, "mlx5_bond_0/1").status is Status.NA
    assert set(out.state["ports"]) == {"mlx5_0/1"}


def test_ethernet_ports_warn_only_by_default():
    eth = port("mlx5_1", state="DOWN", phys="Polling", layer="Ethernet")
    r = one(judge(snap([eth]), ctx()), "mlx5_1/1")
    assert r.status is Status.WARN and not r.action.drains and "Ethernet port: warn only" in r.message
    assert one(judge(snap([eth]), ctx(ethernet="judge")), "mlx5_1/1").status is Status.FAIL
    assert one(judge(snap([eth]), ctx(ethernet="ignore")), "mlx5_1/1").status is Status.NA


def test_disabled_ethernet_port_is_unused():
    r = one(judge(snap([port("mlx5_2", state="DOWN", phys="Disabled", layer="Ethernet", rate=40.0)]), ctx()), "mlx5_2/1")
    assert r.status is Status.NA and "unused" in r.message


def test_one_result_per_port_even_with_many_findings():
    bad = port(state="INIT", rate=100.0)
    out = judge(snap([bad], [link(-50, "DOWN"), link(-30, "INIT")], ), ctx(expected_rate_gbps=400,
                prev={"ports": {"mlx5_0/1": {"samples": [[NOW - 900, 1]], "first_up": NOW - 900}}}))
    assert len(out.results) == 1
    r = out.results[0]
    assert r.status is Status.FAIL and "INIT" in r.message and "down 50.0 s" in r.message


def test_bad_thresholds_are_errors_naming_the_key():
    for th, key in (({"expected_ports": "eight"}, "expected_ports"), ({"ethernet": "drain"}, "ethernet"),
                    ({"ignore": "mlx5_4/1"}, "ignore"), ({"down_window_s": 0}, "down_window_s"),
                    ({"expected_rate_gbps": "400"}, "expected_rate_gbps")):
        (r,) = judge(snap([port()]), ctx(**th)).results
        assert r.status is Status.ERROR and f"thresholds.{key}" in r.message and not r.action.drains


def test_baseline_helper_round_trips_through_the_check():
    from gpuhc.checks.infiniband import ib_baseline

    ports = [port(), port("mlx5_1", num=2, state="DOWN", phys="Polling")]
    base = {"ib": ib_baseline(ports)}
    assert base["ib"]["mlx5_0/1"] == {"rate_gbps": 400.0, "state": "ACTIVE", "link_layer": "InfiniBand"}
    out = judge(snap(ports), ctx(baseline=base))
    assert [r.status for r in out.results] == [Status.PASS, Status.NA]
    slow = judge(snap([port(rate=200.0)]), ctx(baseline=base))
    assert one(slow).status is Status.FAIL


# ----------------------------------------------------------------------------- properties

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.helpers.infiniband import ctx, link, NOW, one, port, snap

_state = st.sampled_from([None, "ACTIVE", "DOWN", "INIT", "ARMED", "ACTIVE_DEFER", "weird"])
_phys = st.sampled_from([None, "LinkUp", "Polling", "Disabled", "LinkErrorRecovery"])
_ports = st.lists(st.builds(
    port, dev=st.sampled_from(["mlx5_0", "mlx5_1", "mlx5_bond_0"]), num=st.integers(1, 2), state=_state, phys=_phys,
    rate=st.one_of(st.none(), st.sampled_from([100.0, 200.0, 400.0])),
    layer=st.sampled_from([None, "InfiniBand", "Ethernet"]),
    symbol_error=st.integers(0, 70000), link_downed=st.integers(0, 255)), max_size=5,
    unique_by=lambda p: p.subject)
_events = st.lists(st.builds(link, st.floats(-2000, 10), st.sampled_from(["DOWN", "ACTIVE", "INIT"]),
                             dev=st.sampled_from(["mlx5_0", "mlx5_1", None]), num=st.integers(1, 2)), max_size=12)


@settings(max_examples=100, deadline=None)
@given(_ports, _events, _ports, st.sampled_from(["ignore", "warn", "judge"]), st.booleans())
def test_any_input_gives_one_sound_result_per_port(ports, events, earlier, eth, with_base):
    from gpuhc.checks.infiniband import ib_baseline

    base = {"ib": ib_baseline(earlier)} if with_base else None
    first = judge(snap(earlier, events, now=NOW - 300), ctx(ethernet=eth))
    out = judge(snap(ports, events), ctx(prev=first.state, baseline=base, ethernet=eth, expected_rate_gbps=400))
    subjects = [r.subject for r in out.results]
    assert len(subjects) == len(set(subjects))
    for r in out.results:
        assert (r.status is Status.FAIL) == r.action.drains  # FAIL drains; WARN, ERROR, n/a never do
        assert "\n" not in r.message and r.message.startswith(r.subject if r.subject != "node" else "")
