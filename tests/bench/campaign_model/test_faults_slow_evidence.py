"""Evidence that builds slowly, as the campaign models it (bench/campaign_model/faults.py,
docs/campaign.md "The model"): a link whose counters keep growing below the FAIL rate and a
cable whose single flaps keep coming back must show gpuhc that evidence at every check for as
long as they last, so the campaign measures gpuhc's rule for evidence that stays, not a
recording that stopped after three runs. Each test can fail: drop the growth or the recurrence
from the model and the node is never drained."""

from __future__ import annotations

import random
import sys

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import faults as F  # noqa: E402
from campaign_model.sim import T0  # noqa: E402
from tests.helpers.campaign import campaign as faults_campaign  # noqa: E402

HOUR = 3600.0


def campaign(tmp_path, cls, days):
    """One node, no jobs and no noise (tests/helpers/campaign.py), the fault at 600 s."""
    return faults_campaign(tmp_path, [(600, cls, "gpu001", False)], nodes=1, days=days)


def drains(c):
    return [((t - T0 - 600) / HOUR, r) for t, _, what, r in c.slurm.events if what == "drain"]


def test_a_link_growing_below_fail_drains_once_its_growth_held_for_hours_not_before(tmp_path):
    c = campaign(tmp_path, "nvlink-below-fail", 0.5)
    [(after_h, reason)] = drains(c)
    # persist_hours 4 of 6 (gpuhc/checks/nvlink.py): a little over three hours of readings.
    assert 2.5 < after_h < 6.5, after_h
    assert reason.startswith("gpuhc: nvlink gpu6 link 9 replay errors growing") and "separate hours" in reason


def test_a_growing_links_counters_grow_with_time_and_start_again_at_a_boot():
    f = F.Fault(0, F.BY_NAME["nvlink-below-fail"], "gpu001", start=1000.0,
                strength=F.strength(F.BY_NAME["nvlink-below-fail"], random.Random(1)))

    def replay(now, boot=0.0):
        return f.link_counters(now, boot, 300.0)["gpus"][6]["nvlinks"][0]["errors"]["replay"]

    per_check = f.strength["replay_per_check"]
    assert F.GROWTH_PER_CHECK[0] <= per_check <= F.GROWTH_PER_CHECK[1]
    assert replay(1000.0) == 0 and replay(1300.0) == int(per_check) and replay(4000.0) == int(10 * per_check)
    assert replay(4000.0, boot=3700.0) == int(per_check)  # the driver's counters start again at a boot
    assert f.changing
    f.end = 5000.0
    assert not f.changing


def test_a_building_cables_single_flaps_recur_until_gpuhc_drains_it_for_them(tmp_path):
    c = campaign(tmp_path, "ib-flap-building", 1.0)
    every_h = c.faults[0].strength["reflap_s"] / HOUR
    first = drains(c)[0]
    # flaps in 3 separate hours of 24 (gpuhc/checks/infiniband.py): the third flap, or one more
    # where two fell in one clock hour, while the cable still only flaps alone.
    assert "single flaps recurring" in first[1], first
    assert 2 * every_h - 1 <= first[0] <= 3 * every_h + 1, (first, every_h)


def test_a_single_flap_that_does_not_come_back_is_never_drained(tmp_path, monkeypatch):
    real = F.strength  # its next flap after the campaign's end; it flaps in earnest after a day or more
    monkeypatch.setattr(F, "strength", lambda cls, rng: {**real(cls, rng), "reflap_s": 40 * HOUR}
                        if cls.builds_s else real(cls, rng))
    c = campaign(tmp_path, "ib-flap-building", 0.9)
    assert c.faults[0].building and drains(c) == []


def test_healthy_siblings_spread_as_measured_never_drain_for_speed_and_a_wider_spread_would(tmp_path, monkeypatch):
    # The line a little slow GPU is held at (gpu-speed's straggler_warn_fraction, 0.95) against
    # healthy siblings that differ from run to run (active_gpu.SPREAD, the four H200s' measured
    # range): forty epilogs, each run for real, no fault, no drain. Were healthy GPUs spread by
    # 6 %, the same line would drain good nodes (and the model then runs every epilog itself,
    # settle._spread_reaches_the_line): the model can show the false drain the line risks.
    from campaign_model import active_gpu, sim

    jobs = [(600 + 1800 * k, 1, 1200.0, ("gpu001",)) for k in range(40)]
    (tmp_path / "measured").mkdir()
    (tmp_path / "wide").mkdir()
    with monkeypatch.context() as m:
        m.setattr(sim.Campaign, "_spread_reaches_the_line", lambda self: True)  # every epilog real
        quiet = faults_campaign(tmp_path / "measured", [], nodes=1, days=0.9, jobs=jobs)
    assert not drains(quiet) and quiet.stats.runs["real"] >= 40
    assert not quiet._spread_reaches_the_line()  # so the month's campaign settles healthy epilogs
    monkeypatch.setattr(active_gpu, "SPREAD", 0.06)
    assert quiet._spread_reaches_the_line()
    wide = faults_campaign(tmp_path / "wide", [], nodes=1, days=0.9, jobs=jobs)
    assert [r for _, r in drains(wide)] and all(r.startswith("gpuhc: gpu-speed") for _, r in drains(wide))
