"""NVLink errors that keep growing below the FAIL rate drain after hours; a burst that stops never
does (gpuhc/checks/nvlink.py, ``persist_hours``; gpuhc/checks/persistence.py). Through the real
runner, state and NVML reader, the fake pynvml at the hardware boundary, one health check every
five minutes on the virtual clock (RunOptions.now), the DL counters on their default rotation."""

from __future__ import annotations

import pytest

from gpuhc.checks.nvlink import CHECKS, PERSISTENT_CLASS, WARNED
from gpuhc.checks.persistence import HOUR, MAX_EVENTS, held, remember, setting_errors, span_text
from gpuhc.config.load import Config, defaults, schema
from gpuhc.errors import ConfigError
from gpuhc.model.result import Action, Status
from gpuhc.run.runner import run_stage
from gpuhc.run.report import RunOptions
from gpuhc.slurm.policy.reason import build_reason
from gpuhc.sources import SourceSpec
from gpuhc.state.node import StateStore
from tests.helpers.fake_pynvml import FakeNvml, live_with

REPLAY = "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY"
T0 = 1_741_082_400.0  # 2025-03-04T10:00:00Z: on an hour, so the clock hours below are exact
HC = 300.0  # slurm/slurm.conf.example HealthCheckInterval


@pytest.fixture
def fake(monkeypatch):
    return live_with(monkeypatch)


def run(tmp_path, now: float, stage: str = "passive", gpus: list[int] | None = None, **thresholds):
    data = defaults(schema())
    if thresholds:
        data["checks"] = {"nvlink": {"thresholds": thresholds}}
    spec = SourceSpec(sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    opts = RunOptions(stage=stage, config=Config(data), sources=spec, state_dir=str(tmp_path / "state"),
                      hostname="gpu001", only=("nvlink",), gpus=gpus, now=now)
    return [r for r in run_stage(opts).results if r.status not in (Status.PASS, Status.NA)]


def grow(fake: FakeNvml, gpu: int, link: int, by: int) -> None:
    key = (link, REPLAY)
    base = fake.gpus[gpu].per_link_errors.get(key, fake.gpus[gpu].link_errors[REPLAY])
    fake.gpus[gpu].per_link_errors[key] = base + by


def fails(found):
    return [r for r in found if r.status is Status.FAIL]


def test_replays_growing_below_fail_for_hours_drain_with_the_span_in_the_reason(fake, tmp_path):
    # 300 replays per health check on gpu0 link 5: 900 per reading of the link (one run in
    # three reads it), over WARN (100), far under FAIL (10,000).
    first_fail = None
    for i in range(60):
        grow(fake, 0, 5, 300)
        found = run(tmp_path, T0 + i * HC)
        assert all(r.status is not Status.FAIL or "growing" in r.message for r in found)
        if fails(found) and first_fail is None:
            first_fail = i
            (f,) = fails(found)
    # link 5 is read at runs 2, 5, 8, ... (its slice): first seen at 10:10, warned from 10:25
    # (its second reading), in a 4th distinct hour at 13:10
    assert first_fail == 38 and T0 + first_fail * HC == T0 + 3 * HOUR + 10 * 60
    assert f.action is Action.DRAIN_TICKET and f.subject == "gpu0"
    assert f.evidence == PERSISTENT_CLASS and f.value["link"] == 5 and f.value["hours"] == 4
    assert f.message == ("gpu0 link 5 replay errors growing 2.8 h "
                         "(WARN in 4 separate hours of the last 6 h, below the FAIL rate)")
    assert build_reason([f]) == ("gpuhc: nvlink gpu0 link 5 replay errors growing 2.8 h "
                                 "(WARN in 4 separate hours of the last 6 h, below the FAIL rate)")
    # it holds on the runs that read other links: one verdict, no drain/resume flapping
    assert fails(run(tmp_path, T0 + 60 * HC)) and fails(run(tmp_path, T0 + 61 * HC))


def test_a_burst_that_stops_never_drains(fake, tmp_path):
    for i in range(6):  # a burst: 6 runs (30 min) of growth, seen at 2 readings
        grow(fake, 0, 5, 3000)
        assert not fails(run(tmp_path, T0 + 50 * 60 + i * HC))
    for i in range(6, 200):  # then a quiet week's worth of hours
        assert not fails(run(tmp_path, T0 + 50 * 60 + i * HC))
    # two bursts a day apart are not one that stays either
    for i in range(6):
        grow(fake, 0, 5, 3000)
        assert not fails(run(tmp_path, T0 + 86400 + i * HC))


def test_a_counter_reset_or_an_admins_resume_starts_the_evidence_again(fake, tmp_path):
    from gpuhc.slurm.flows.handover import acknowledge_kernel_log

    for i in range(40):
        grow(fake, 0, 5, 300)
        found = run(tmp_path, T0 + i * HC)
    assert fails(found)
    acknowledge_kernel_log(str(tmp_path / "state"), T0 + 40 * HC)
    stored = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert WARNED not in stored and any(k.startswith("GPU-0/5/") for k in stored)  # the readings stay
    assert not fails(run(tmp_path, T0 + 41 * HC))
    # building again after the resume (warned from 13:25, the reading of run 41): it takes the
    # same 2.8 h as the first time, not less
    found = {}
    for i in range(41, 78):
        grow(fake, 0, 5, 300)
        found[i] = fails(run(tmp_path, T0 + i * HC))
    assert [i for i, f in found.items() if f] == [74, 75, 76, 77] and "growing 2.8 h" in found[74][0].message
    # a GPU reset sets the counters back: the evidence before it is not this link's any more,
    # from the next reading of the link on (within dl_rotation runs)
    fake.gpus[0].per_link_errors[(5, REPLAY)] = 0
    after = [bool(fails(run(tmp_path, T0 + i * HC))) for i in range(79, 88)]
    assert after[:3].count(True) < 3 and not any(after[3:]) and after == sorted(after, reverse=True)
    stored = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"]
    assert "GPU-0/5/replay" not in stored.get(WARNED, {})


def test_the_prologs_run_over_one_gpu_keeps_the_others_history(fake, tmp_path):
    for i in range(30):
        grow(fake, 0, 5, 300)
        grow(fake, 1, 2, 300)
        run(tmp_path, T0 + i * HC)
    before = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"][WARNED]
    run(tmp_path, T0 + 30 * HC, stage="prolog", gpus=[1])
    after = StateStore(str(tmp_path / "state")).read()["checks"]["nvlink"][WARNED]
    assert after["GPU-0/5/replay"] == before["GPU-0/5/replay"] and "GPU-1/2/replay" in after


def test_persistence_off_and_kinds_without_a_fail_rate_never_drain(fake, tmp_path):
    for i in range(60):
        grow(fake, 0, 5, 300)
        assert not fails(run(tmp_path, T0 + i * HC, persist_hours=0))
    (tmp_path / "b").mkdir()
    for i in range(60):  # replays with no FAIL rate: "below the FAIL rate" has no meaning
        grow(fake, 0, 5, 300)
        assert not fails(run(tmp_path / "b", T0 + i * HC, replay_fail=0))


def test_history_is_thinned_to_two_times_an_hour_and_bounded():
    now = T0 + 10 * HOUR
    every_minute = [T0 + 60 * k for k in range(600)]
    kept = remember(None, every_minute, now, 6)
    assert len(kept) == 2 * 6 and held(kept, 6).hours == 6 and held(kept, 7) is None
    assert held(kept, 6).first == T0 + 4 * HOUR + 60 and held(kept, 6).last == T0 + 599 * 60
    # however long the window and the cadence, never more than MAX_EVENTS
    assert len(remember(None, [T0 + 60 * k for k in range(100_000)], T0 + 6_000_000, 72)) <= MAX_EVENTS
    # a hand-edited or damaged state, times after now and before an acknowledgement are dropped
    assert remember(["x", None, True, float("nan"), now + 5, T0 + HOUR], [], now, 24, since=T0 + 2 * HOUR) == []
    assert remember({"not": "a list"}, [now], now, 6) == [now]


def test_span_text_reads_at_a_glance():
    assert [span_text(s) for s in (30, 45 * 60, 3 * HOUR, 4.24 * HOUR, 3 * 86400)] == \
        ["1 min", "45 min", "3.0 h", "4.2 h", "3.0 d"]


@pytest.mark.parametrize("thresholds, why", [
    ({"persist_hours": -1}, "persist_hours: must not be negative, got -1"),
    ({"persist_hours": 2.5}, "persist_hours: must be a whole number of hours (0: off), got 2.5"),
    ({"persist_window_h": 100}, "persist_window_h: must be hours from more than 0 to 72, got 100"),
    ({"persist_hours": 9, "persist_window_h": 6}, "persist_hours: 9 distinct hours cannot fit in persist_window_h 6 h"),
])
def test_a_bad_setting_is_a_config_error_naming_the_key(tmp_path, thresholds, why):
    from gpuhc.config.load import load_config

    cfg = tmp_path / "gpuhc.yaml"
    body = "".join(f"      {k}: {v}\n" for k, v in thresholds.items())
    cfg.write_text("checks:\n  nvlink:\n    thresholds:\n" + body)
    with pytest.raises(ConfigError) as e:
        load_config(str(cfg))
    assert why.split(": ", 1)[1] in str(e.value) and "nvlink.thresholds.persist_" in str(e.value)
    assert setting_errors({**CHECKS[0].defaults, **thresholds}, "persist_hours", "persist_window_h")
