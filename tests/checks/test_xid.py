"""The xid check: verdicts per class, storms, the cursor and window, reboots, attribution.

Snapshots come from tests/helpers/xid_events.py (8x H100, GPU i at PCI_IDS[i], judged at T0); kernel
logs are literal events, so each test reads as "this was in the log, this is the verdict".
"""

from __future__ import annotations

import copy
import json

import pytest

from gpuhc.checks import xid
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.result import Action, Status
from gpuhc.catalog.xid import xid_table
from tests.helpers.snapshots import PCI_IDS, T0, healthy_node, no_nvml
from tests.helpers.xid_events import ALIEN_PCI, BOOT_A, BOOT_B, brief, ev, judge, node

CHECK = xid.CHECKS[0]


# ---------------------------------------------------------------------- verdicts


def test_healthy_log_passes():
    out = judge(node())
    assert brief(out) == [(Status.PASS, Action.NONE, "node")]
    assert out.results[0].message == "no Xid in the last 24h"


def test_no_kernel_log_is_an_error_not_a_drain():
    snap = healthy_node()
    out = judge(snap)
    assert brief(out) == [(Status.ERROR, Action.NONE, "node")] and out.state is None


@pytest.mark.parametrize("code,status,action", [
    (79, Status.FAIL, Action.DRAIN_REBOOT), (48, Status.FAIL, Action.RESET_GPU), (64, Status.FAIL, Action.DRAIN_TICKET),
    (95, Status.FAIL, Action.RESET_GPU), (74, Status.FAIL, Action.RESET_GPU),
    (119, Status.WARN, Action.NONE), (109, Status.WARN, Action.NONE),  # one alone: the catalog's drain_after
    (13, Status.WARN, Action.RESTART_APP), (94, Status.WARN, Action.RESTART_APP), (92, Status.WARN, Action.NONE),
    (4242, Status.WARN, Action.NONE),
])
def test_each_class_gets_its_verdict(code, status, action):
    assert brief(judge(node(ev(code, gpu=3)))) == [(status, action, "gpu3")]


def test_message_names_gpu_pci_count_and_meaning():
    out = judge(node(ev(79, gpu=3, t=T0 - 10), ev(79, gpu=3, t=T0 - 5)))
    assert out.results[0].message == "Xid 79 on gpu3 (0000:5d:00.0) x2: GPU has fallen off the bus"
    assert out.results[0].value["count"] == 2 and out.results[0].value["last"] == T0 - 5


def test_fallen_off_bus_without_xid_fails_like_79():
    out = judge(node(ev(79, gpu=5, kind=EventKind.FALLEN_OFF_BUS)))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu5")]
    assert out.results[0].message == "gpu5 (0000:ab:00.0) has fallen off the bus (no Xid logged)"


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68, 69])
def test_application_xids_warn_and_never_drain(code):
    (r,) = judge(node(ev(code))).results
    assert (r.status, r.action) == (Status.WARN, Action.RESTART_APP) and not r.action.drains
    assert "(application error)" in r.message


def test_every_catalog_fail_carries_a_draining_action():
    for code, info in xid_table().items():
        if code == 154:
            continue  # judged from its message, see test_xid_154_*
        for r in judge(node(ev(code))).results:
            assert r.status is not Status.FAIL or r.action.drains, (code, r)
            assert r.status is not Status.WARN or not r.action.drains, (code, r)


def test_storm_collapses_to_one_result_per_gpu_and_xid():
    storm = [ev(13, gpu=0, t=T0 - 100 + i / 10) for i in range(600)] + [ev(43, gpu=0)] * 7 + [ev(13, gpu=1)]
    out = judge(node(*storm))
    per_xid = [r for r in out.results if "rule" not in r.value]
    assert [(r.subject, r.value["code"], r.value["count"]) for r in per_xid] == [
        ("gpu0", 13, 600), ("gpu0", 43, 7), ("gpu1", 13, 1)]
    assert per_xid[0].message == "Xid 13 on gpu0 (0000:18:00.0) x600: Graphics engine exception (application error)"
    # ... and the default rate rule names the storm on gpu0 (607 > 100 in an hour), without draining
    (storm_result,) = [r for r in out.results if "rule" in r.value]
    assert (storm_result.status, storm_result.action, storm_result.subject) == (Status.WARN, Action.NONE, "gpu0")
    assert storm_result.message == "Xid storm on gpu0 (0000:18:00.0): 607 x Xid 13/43 in the last 1h, more than 100 (rate_rules.0)"


# ---------------------------------------------------------------------- cursor, window, memory


def test_second_run_reports_nothing_new_but_the_window_holds():
    log = (ev(13, gpu=0, t=T0 - 30), ev(79, gpu=3, t=T0 - 20))
    first = judge(node(*log))
    assert [(r.status, r.subject) for r in first.results] == [(Status.FAIL, "gpu3"), (Status.WARN, "gpu0")]
    second = judge(node(*log, time=T0 + 300), prev=first.state)
    assert [(r.status, r.subject) for r in second.results] == [(Status.FAIL, "gpu3")]
    assert second.results[0].message == first.results[0].message  # a stable drain reason
    json.dumps(second.state)


def test_new_warning_after_the_cursor_is_reported_once():
    first = judge(node(ev(13, t=T0 - 30)))
    log2 = node(ev(13, t=T0 - 30), ev(13, t=T0 + 100), time=T0 + 300)
    second = judge(log2, prev=first.state)
    assert [(r.status, r.value["count"], r.value["new"]) for r in second.results] == [(Status.WARN, 2, 1)]
    third = judge(log2, prev=second.state)
    assert [r.status for r in third.results] == [Status.PASS]


def test_kmsg_sequence_numbers_drive_the_cursor():
    first = judge(node(ev(31, seq=10, t=T0 - 30)))
    # same time as before but a later record: new; an old record with a later clock: not new
    second = judge(node(ev(31, seq=10, t=T0 - 30), ev(31, seq=11, t=T0 - 30)), prev=first.state)
    assert [r.value["new"] for r in second.results] == [1]


def test_draining_xid_expires_after_the_window():
    first = judge(node(ev(48, t=T0)))
    assert first.results[0].status is Status.FAIL
    later = judge(node(ev(48, t=T0), time=T0 + 25 * 3600), prev=first.state)
    assert [r.status for r in later.results] == [Status.PASS] and later.state["held"] == []


def test_window_is_configurable_and_old_events_do_not_count():
    old = ev(79, t=T0 - 2 * 3600)
    assert [r.status for r in judge(node(old)).results] == [Status.FAIL]
    assert [r.status for r in judge(node(old), window_s=3600).results] == [Status.PASS]


def test_held_incident_survives_a_wrapped_ring_buffer_and_counts_new_ones():
    first = judge(node(ev(79, gpu=2, seq=10)))
    gone = judge(node(ev(8, seq=5000), time=T0 + 600), prev=first.state)  # buffer wrapped: 79 no longer in it
    assert [(r.status, r.subject, r.value["count"]) for r in gone.results if r.status is Status.FAIL] == [
        (Status.FAIL, "gpu2", 1)]
    again = judge(node(ev(79, gpu=2, seq=5001, t=T0 + 700), time=T0 + 900), prev=gone.state)
    assert [(r.status, r.value["count"]) for r in again.results] == [(Status.FAIL, 2)]


def test_reboot_resets_held_incidents():
    first = judge(node(ev(79, gpu=2, seq=10), boot=BOOT_A))
    after = judge(node(boot=BOOT_B, time=T0 + 900), prev=first.state)
    assert [r.status for r in after.results] == [Status.PASS] and after.state["held"] == []


def test_after_reboot_everything_in_the_log_is_new():
    first = judge(node(ev(13, seq=10), boot=BOOT_A))
    same_boot = judge(node(ev(13, seq=10), boot=BOOT_A), prev=first.state)
    assert [r.status for r in same_boot.results] == [Status.PASS]
    new_boot = judge(node(ev(13, seq=3, t=T0 + 200), boot=BOOT_B, time=T0 + 300), prev=first.state)
    assert [r.status for r in new_boot.results] == [Status.WARN]


def test_acknowledge_clears_until_the_next_event():
    first = judge(node(ev(95, gpu=4)))
    acked = xid.acknowledge(first.state, now=T0 + 10)
    quiet = judge(node(ev(95, gpu=4), time=T0 + 60), prev=acked)
    assert [r.status for r in quiet.results] == [Status.PASS]
    back = judge(node(ev(95, gpu=4), ev(95, gpu=4, t=T0 + 100), time=T0 + 200), prev=quiet.state)
    assert [(r.status, r.value["count"]) for r in back.results] == [(Status.FAIL, 1)]


@pytest.mark.parametrize("code", [109, 119])
def test_a_single_xid_109_or_119_warns_and_a_repeat_on_that_gpu_drains_with_a_reset(code):
    # The catalog's drain_after: 2 (gpuhc/data/xid_catalog.yaml says why: the driver recovers
    # from one; its own "marked for reset" and Xid 154 drain at once).
    first = judge(node(ev(code, gpu=4)))
    (w,) = first.results
    assert (w.status, w.action, w.subject) == (Status.WARN, Action.NONE, "gpu4")
    assert "1 of the 2 on one GPU in the xid window that drain: reset GPU" in w.message
    again = judge(node(ev(code, gpu=4, seq=1), time=T0 + 60), prev=first.state)
    assert again.results[0].status is Status.PASS  # warned once, like a warning Xid
    other = judge(node(ev(code, gpu=4, seq=1), ev(code, gpu=5, seq=2, t=T0 + 100), time=T0 + 200), prev=again.state)
    assert brief(other) == [(Status.WARN, Action.NONE, "gpu5")]  # one on each GPU is no repeat
    repeat = judge(node(ev(code, gpu=4, seq=1), ev(code, gpu=5, seq=2, t=T0 + 100), ev(code, gpu=4, seq=3, t=T0 + 300),
                        time=T0 + 400), prev=other.state)
    assert brief(repeat) == [(Status.FAIL, Action.RESET_GPU, "gpu4")]
    assert repeat.results[0].value["count"] == 2
    held = judge(node(ev(code, gpu=4, seq=1), ev(code, gpu=4, seq=3, t=T0 + 300), time=T0 + 900), prev=repeat.state)
    assert brief(held) == [(Status.FAIL, Action.RESET_GPU, "gpu4")]  # held like any draining Xid
    gone = judge(node(ev(code, gpu=4, seq=1), time=T0 + 86400 + 120), prev=first.state)
    assert Status.FAIL not in [r.status for r in gone.results]  # out of the window: no repeat


def test_a_site_override_to_fail_drains_on_the_first_119():
    assert brief(judge(node(ev(119, gpu=4)), severity_overrides={119: "fail"})) == [
        (Status.FAIL, Action.RESET_GPU, "gpu4")]




def test_log_in_seconds_since_boot_is_windowed_by_its_last_line():
    """A recorded plain dmesg has no boot time: its stamps are small; "now" is its last line."""
    out = judge(node(ev(79, t=5000.0), ev(8, t=9000.0), time=T0))
    assert (Status.FAIL, Action.DRAIN_REBOOT, "gpu0") in brief(out)
    old = judge(node(ev(79, t=5000.0), ev(8, t=5000.0 + 2 * 86400), time=T0))
    assert Status.FAIL not in [r.status for r in old.results]


def test_untimed_events_count_while_new_and_draining_ones_are_held():
    first = judge(node(ev(13, t=None), ev(79, gpu=1, t=None)))
    assert [r.status for r in first.results] == [Status.FAIL, Status.WARN]
    second = judge(node(ev(13, t=None), ev(79, gpu=1, t=None), time=T0 + 60), prev=first.state)
    assert [(r.status, r.subject) for r in second.results] == [(Status.FAIL, "gpu1")]


# ---------------------------------------------------------------------- attribution and scope


def test_unattributed_xid_keeps_its_severity():
    out = judge(node(ev(79, gpu=None)))
    assert brief(out) == [(Status.FAIL, Action.DRAIN_REBOOT, ALIEN_PCI)]
    assert out.results[0].message.startswith(f"Xid 79 on {ALIEN_PCI}: ")


def test_without_nvml_every_xid_is_unattributed():
    out = judge(node(ev(48, gpu=2), snap=no_nvml()))
    assert brief(out) == [(Status.FAIL, Action.RESET_GPU, PCI_IDS[2])]


def test_prolog_judges_the_job_gpus_but_always_unattributed_fatal_ones():
    log = node(ev(79, gpu=3), ev(13, gpu=0), ev(48, gpu=None), ev(13, gpu=None))
    out = judge(log, gpus=[0, 1])
    assert brief(out) == [(Status.FAIL, Action.RESET_GPU, ALIEN_PCI), (Status.WARN, Action.RESTART_APP, "gpu0")]
    # gpu3's incident is still remembered: the next full run fails it
    full = judge(node(time=T0 + 60), prev=out.state)
    assert ("gpu3", Status.FAIL) in [(r.subject, r.status) for r in full.results]


# ---------------------------------------------------------------------- settings and special codes


def test_severity_overrides():
    assert brief(judge(node(ev(92)), severity_overrides={92: "fail"})) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]
    assert brief(judge(node(ev(79)), severity_overrides={"79": "warn"})) == [(Status.WARN, Action.NONE, "gpu0")]
    assert [r.status for r in judge(node(ev(13)), severity_overrides={13: "ignore"}).results] == [Status.PASS]


def test_unknown_xids_can_be_made_to_fail():
    assert brief(judge(node(ev(4242)), unknown="fail")) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]


@pytest.mark.parametrize("to,action", [("0x1 (GPU Reset Required)", Action.RESET_GPU),
                                       ("0x2 (Node Reboot Required)", Action.DRAIN_REBOOT)])
def test_xid_154_takes_the_drivers_recovery_action(to, action):
    msg = f"Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to {to}"
    assert brief(judge(node(ev(154, msg=msg)))) == [(Status.FAIL, action, "gpu0")]


def test_xid_154_none_means_the_gpu_recovered():
    bad = judge(node(ev(48, gpu=0, t=T0 - 100), ev(48, gpu=1, t=T0 - 100)))
    healed = "Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    out = judge(node(ev(48, gpu=0, t=T0 - 100), ev(48, gpu=1, t=T0 - 100), ev(154, gpu=0, t=T0 - 10, msg=healed)),
                prev=bad.state)
    assert [(r.status, r.subject) for r in out.results] == [(Status.FAIL, "gpu1")]


def test_unparsed_xid_lines_warn_when_they_appear():
    first = judge(node(unparsed=2))
    assert [(r.status, r.value) for r in first.results] == [(Status.WARN, 2)]
    assert [r.status for r in judge(node(unparsed=2), prev=first.state).results] == [Status.PASS]


def test_registration():
    assert CHECK.id == "xid" and set(CHECK.stages) == {"passive", "prolog", "epilog", "bootstrap"}
    assert CHECK.defaults["window_s"] == 86400


def test_bad_settings_are_reported_as_errors_not_ignored():
    out = judge(node(ev(92)), unknown="maybe", severity_overrides={92: "fatal", "x": "warn"})
    errors = [r.message for r in out.results if r.status is Status.ERROR]
    assert errors == ["checks.xid.thresholds.unknown: must be warn or fail, got 'maybe'",
                      "checks.xid.thresholds.severity_overrides.92: want an Xid number mapped to fail, warn or ignore, got 'fatal'",
                      "checks.xid.thresholds.severity_overrides.x: want an Xid number mapped to fail, warn or ignore, got 'warn'"]
    assert (Status.WARN, "gpu0") in [(r.status, r.subject) for r in out.results]  # still judged


def test_settings_from_a_config_file(tmp_path):
    from gpuhc.config.load import load_config

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  xid:\n    thresholds:\n      window_s: 3600\n      severity_overrides: {92: fail}\n")
    th = load_config(str(cfg), "gpu001").check_settings("xid")["thresholds"]
    assert brief(judge(node(ev(92)), **th)) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]
    assert [r.status for r in judge(node(ev(79, t=T0 - 7200)), **th).results] == [Status.PASS]


# ---------------------------------------------------------------------- files mixing two clocks

MIXED = [  # a log pasted together from `dmesg -T --time-format=iso` and a plain `dmesg`
    ("2025-03-04T10:03:12,448120+00:00 NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
     "GPU has fallen off the bus."),
    "[  812.004512] NVRM: Xid (PCI:0000:2a:00): 48, pid=1, name=python3, An uncorrectable double bit error",
    "[  900.000000] systemd[1]: Started gpuhc passive check.",
]


def _parsed(lines, time):
    from gpuhc.sources.kernel_log_parse import parse_lines

    snap = healthy_node(time=time)
    snap.kernel = parse_lines(lines)
    snap.kernel.source = "test"
    return snap


@pytest.mark.parametrize("lines", [MIXED, MIXED[1:] + MIXED[:1]], ids=["ends-since-boot", "ends-wall-clock"])
def test_a_file_mixing_clocks_counts_each_incident_once_however_often_it_is_read(lines):
    # Before: judged against a since-boot cursor, the wall-clock Xid 79 was "new" on every run
    # and its held count grew x2, x3, x4...; the since-boot Xid 48, measured against a
    # wall-clock "now", fell out of the window and was never reported.
    state = None
    for run in range(3):
        out = judge(_parsed(lines, T0 + run * 300), prev=state)
        state = out.state
        fails = sorted((r.subject, r.value["code"], r.value["count"]) for r in out.results if r.status is Status.FAIL)
        assert fails == [("gpu1", 48, 1), ("gpu3", 79, 1)], f"run {run + 1}"
    assert len(state["held"]) == 2
    assert set(state["cursor"]["last_times"]) == {"since_boot", "epoch"}


def test_new_lines_on_either_clock_are_new_and_counted_once():
    first = judge(_parsed(MIXED, T0))
    grown = MIXED + ["2025-03-04T10:20:00,000000+00:00 NVRM: Xid (PCI:0000:5d:00): 79, pid=2, name=x, again",
                     "[  950.000000] NVRM: Xid (PCI:0000:2a:00): 48, pid=1, name=python3, again"]
    second = judge(_parsed(grown, T0 + 300), prev=first.state)
    third = judge(_parsed(grown, T0 + 600), prev=second.state)
    for out in (second, third):
        assert sorted((r.subject, r.value["count"]) for r in out.results) == [("gpu1", 2), ("gpu3", 2)]


def test_a_cursor_from_before_the_clocks_were_told_apart_settles_after_one_run():
    first = judge(_parsed(MIXED[:2], T0))
    state = copy.deepcopy(first.state)
    del state["cursor"]["last_times"]  # as an older gpuhc wrote it: one last_time, the last
    state["cursor"]["last_time"] = 812.004512  # line's, since boot here
    counts = []
    for run in range(3):
        out = judge(_parsed(MIXED[:2], T0 + 300 * (run + 1)), prev=state)
        state = out.state
        counts.append(sorted((r.subject, r.value["count"]) for r in out.results))
    # The old cursor knew no wall-clock time: the wall-clock Xid 79 counts once more on the
    # first run, and never again.
    assert counts == [[("gpu1", 1), ("gpu3", 2)]] * 3


def test_the_runner_replaying_one_mixed_file_three_times_keeps_the_count(tmp_path):
    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.run.runner import run_stage
    from gpuhc.run.report import RunOptions
    from gpuhc.sources import SourceSpec

    log = tmp_path / "kern.log"
    log.write_text("\n".join(MIXED) + "\n")
    opts = RunOptions(stage="passive", config=Config(defaults(schema())),
                      sources=SourceSpec(kernel_log=str(log)), state_dir=str(tmp_path / "s"), hostname="gpu001",
                      only=("xid",))
    for run in range(3):
        report = run_stage(opts)
        assert sorted((r.subject, r.value["count"]) for r in report.results if r.status is Status.FAIL) == [
            ("0000:2a:00.0", 1), ("0000:5d:00.0", 1)], f"run {run + 1}"


# ---------------------------------------------------------------------- unknown codes, unparsed lines


def test_an_unknown_xid_is_reported_with_its_number_and_look_it_up():
    out = judge(node(ev(4242)))
    (r,) = out.results
    assert (r.status, r.action, r.value["code"], r.value["known"]) == (Status.WARN, Action.NONE, 4242, False)
    assert r.message.startswith("Xid 4242 on gpu0 (0000:18:00.0): not in gpuhc's catalog; look it up in NVIDIA's")
    assert brief(judge(node(ev(4242)), unknown="fail")) == [(Status.FAIL, Action.DRAIN_REBOOT, "gpu0")]


def test_lines_that_did_not_parse_are_a_warning_quoting_the_first():
    snap = node()
    snap.kernel.unparsed_lines, snap.kernel.unparsed_example = 2, "NVRM: Xid 79 (a new driver's format)"
    (r,) = judge(snap).results
    assert r.status is Status.WARN and r.value == 2
    assert "not the driver's exact grammar, so they never drain" in r.message and r.action is Action.NONE
    assert r.message.endswith('check by hand); first: "NVRM: Xid 79 (a new driver\'s format)"')


# ---------------------------------------------------------------------- driver signals


def sig(name: str, gpu: int | None = 0, t: float = T0 - 60, device: str | None = None) -> KernelEvent:
    pci = PCI_IDS[gpu] if gpu is not None else None
    return KernelEvent(kind=EventKind.DRIVER, time=t, message=f"driver says {name}", pci=pci, state=name, device=device)


def test_each_driver_signal_fails_with_the_catalogs_action_and_is_held():
    from gpuhc.catalog.xid import signal_table

    for name, info in signal_table().items():
        if info.severity != "fail":
            continue  # gsp_watchdog: a warning, once (tests/sources/test_kernel_log_field.py)
        out = judge(node(sig(name, gpu=2)))
        assert brief(out) == [(Status.FAIL, info.action, "gpu2")], name
        assert out.results[0].value["signal"] == name
        later = judge(node(time=T0 + 600), prev=out.state)  # the log rotated: the incident is held
        assert brief(later) == [(Status.FAIL, info.action, "gpu2")], name


def test_signals_are_grouped_per_gpu_and_kind_and_counted():
    out = judge(node(*[sig("reset_required", gpu=None, device="GPU1")] * 40, sig("gpu_lost", gpu=None)))
    assert sorted((r.subject, r.value["signal"], r.value["count"]) for r in out.results) == [
        ("node", "gpu_lost", 1), ("node", "reset_required", 40)]
    assert any("(the driver's GPU1)" in r.message for r in out.results)


# ---------------------------------------------------------------------- rate rules


def storms(out) -> list:
    return [r for r in out.results if isinstance(r.value, dict) and "rule" in r.value]


def storm(code: int, n: int, gpu: int = 0, span: float = 600.0) -> list[KernelEvent]:
    return [ev(code, gpu=gpu, t=T0 - span + i * span / n) for i in range(n)]


def test_application_xids_alone_stay_harmless_a_storm_is_a_finding():
    few = judge(node(*storm(13, 100)))  # the default rule: more than 100 in an hour
    assert [r.status for r in few.results] == [Status.WARN] and "rule" not in few.results[0].value
    many = judge(node(*storm(13, 60), *storm(31, 41)))
    (r,) = storms(many)
    assert (r.status, r.action, r.subject, r.value["count"], r.value["codes"]) == (
        Status.WARN, Action.NONE, "gpu0", 101, [13, 31])


def test_a_fail_rate_rule_drains_while_the_storm_is_in_its_window():
    rules = [{"codes": [43], "count": 5, "window_s": 3600, "severity": "fail", "action": "drain + hardware ticket"}]
    log = storm(43, 6, gpu=1)
    out = judge(node(*log), rate_rules=rules)
    (r,) = storms(out)
    assert (r.status, r.action, r.subject) == (Status.FAIL, Action.DRAIN_TICKET, "gpu1")
    later = judge(node(*log, time=T0 + 3600), prev=out.state, rate_rules=rules)  # an hour on: over
    assert not storms(later)
    default_action = judge(node(*log), rate_rules=[dict(rules[0], action=None) | {"severity": "fail"}])
    assert any(r.status is Status.ERROR for r in default_action.results)  # action: null is no action
    plain = [{k: v for k, v in rules[0].items() if k != "action"}]
    (r,) = storms(judge(node(*log), rate_rules=plain))
    assert r.action is Action.RESET_GPU


def test_rate_rules_count_per_gpu_and_the_prolog_sees_only_its_gpus():
    rules = [{"codes": [13], "count": 3, "window_s": 3600, "severity": "fail"}]
    log = storm(13, 4, gpu=0) + storm(13, 2, gpu=1)
    assert [r.subject for r in judge(node(*log), rate_rules=rules).results if "rule" in r.value] == ["gpu0"]
    assert not storms(judge(node(*log), gpus=[1], rate_rules=rules))


def test_rate_rules_on_a_since_boot_log_count_on_its_clock():
    rules = [{"codes": [13], "count": 2, "window_s": 60, "severity": "warn"}]
    log = [ev(13, t=t) for t in (1000.0, 1500.0, 1510.0, 1520.0)]  # a recorded plain dmesg, judged at 1520
    (r,) = storms(judge(node(*log, time=1520.0), rate_rules=rules))
    assert r.value["count"] == 3


@pytest.mark.parametrize("rules, why", [
    ("often", "rate_rules: want a list of rules"),
    ([{"codes": [13], "count": 0, "window_s": 60}], "rate_rules.0.count: want a whole number >= 1"),
    ([{"codes": [], "count": 1, "window_s": 60}], "rate_rules.0.codes: want a non-empty list"),
    ([{"codes": ["13"], "count": 1, "window_s": 60}], "rate_rules.0.codes: want a non-empty list"),
    ([{"codes": [13], "count": 1, "window_s": 0}], "rate_rules.0.window_s: want seconds > 0"),
    ([{"codes": [13], "count": 1, "window_s": 2 * 86400}], "at most the check's window_s (86400)"),
    ([{"codes": [13], "count": 1, "window_s": 60, "severity": "drain"}], "rate_rules.0.severity: must be warn or fail"),
    ([{"codes": [13], "count": 1, "window_s": 60, "severity": "fail", "action": "restart app"}],
     "rate_rules.0.action: want a draining action"),
    ([{"codes": [13], "count": 1, "window_s": 60, "action": "reset GPU"}], "only a severity: fail rule drains"),
    ([{"codes": [13], "count": 1, "window_s": 60, "per": "node"}], "rate_rules.0.per: unknown key"),
])
def test_bad_rate_rules_are_named_errors_never_a_drain(rules, why):
    out = judge(node(*storm(13, 200)), rate_rules=rules)
    errors = [r for r in out.results if r.status is Status.ERROR]
    assert errors and why in errors[0].message
    assert not [r for r in out.results if r.status is Status.FAIL]
    assert any(why in p for p in CHECK.validate({**CHECK.defaults, "rate_rules": rules}))


def test_rate_rules_in_a_config_file_are_validated_with_their_line(tmp_path):
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("checks:\n  xid:\n    thresholds:\n      rate_rules:\n"
                   "        - {codes: [13, 31, 43], count: 20, window_s: 3600, severity: fail}\n"
                   "        - {codes: [13], count: -1, window_s: 3600}\n")
    with pytest.raises(ConfigError, match=r"must not be negative"):
        load_config(str(cfg))
    cfg.write_text(cfg.read_text().replace("count: -1", "count: 0"))
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg))
    assert "checks.xid.thresholds.rate_rules.1.count" in str(err.value) and ":6" in str(err.value)
    cfg.write_text(cfg.read_text().replace("count: 0", "count: 5"))
    good = load_config(str(cfg))
    assert good.check_settings("xid")["thresholds"]["rate_rules"][0]["count"] == 20


def test_a_held_xid_says_it_is_held_and_what_releases_it_without_changing_the_reason():
    """Issue 21: after the GPU looked healthy again, the FAIL line did not say that the Xid is
    held, nor what ends the hold. The note is shown beside the message (the drain reason stays
    the same from run to run)."""
    from gpuhc.export.output import message_of

    log = (ev(79, gpu=3, t=T0 - 20),)
    first = judge(node(*log))
    assert "held" not in first.results[0].value  # a fresh fault is not "held"
    second = judge(node(*log, time=T0 + 300), prev=first.state)
    fail = second.results[0]
    assert fail.message == first.results[0].message
    assert fail.value["held"].startswith("held: a reboot, an admin's resume or 24h with no new one after ")
    assert message_of(fail).endswith(f"({fail.value['held']})")
    third = judge(node(*log, ev(79, gpu=3, t=T0 + 400), time=T0 + 500), prev=second.state)
    assert "held" not in third.results[0].value  # a new event: not merely held any more


def test_the_drivers_own_reset_mark_after_one_119_drains_at_once():
    out = judge(node(ev(119, gpu=4), sig("gsp_rpc_timeouts", gpu=4, t=T0 - 50)))
    assert (Status.FAIL, Action.RESET_GPU, "gpu4") in brief(out)
