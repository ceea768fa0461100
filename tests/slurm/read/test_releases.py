"""gpuhc/slurm/read/releases.py, the one home of Slurm release differences, on what the releases really
print (tests/fixtures/slurm/slurm-<release>/, recorded by tests/matrix/capture.py)."""

from __future__ import annotations


import pytest

from gpuhc.cli.report_cmd import read_live
from gpuhc.errors import SlurmError
from gpuhc.slurm.read.releases import REBOOT_NEXTSTATES, REBOOT_NOTES_TAIL, json_hint
from gpuhc.slurm.act.scontrol import Scontrol
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"


def recorded_22_05_json_refusal() -> str:
    """22.05's own answer to ``scontrol --json show node`` (its stderr), as recorded."""
    line = (FIX / "slurm-22.05" / "UNSUPPORTED").read_text().strip()
    return line.split(": exit 1: ", 1)[1]


def test_drain_report_says_why_22_05_has_no_json_fallback():
    refusal = recorded_22_05_json_refusal()
    answers = {"--oneliner": (0, "no node listing here\n", ""), "--json": (1, "", refusal)}

    def run(argv, timeout):
        return answers[argv[2]]

    with pytest.raises(SlurmError, match=r"unrecognized option '--json'.*needs Slurm 23\.02 or later"):
        read_live(5, Scontrol(run=run))


def test_json_hint_only_for_a_missing_option():
    assert json_hint(recorded_22_05_json_refusal()).endswith("needs Slurm 23.02 or later)")
    assert json_hint("slurm_load_node error: Unable to contact slurm controller") == ""


@pytest.mark.parametrize("reason, kept", [
    ("gpuhc: xid 79 gpu3 fell off the bus [q1] : reboot issued", "gpuhc: xid 79 gpu3 fell off the bus [q1]"),
    ("gpuhc: ecc [q2] : reboot issued : reboot complete", "gpuhc: ecc [q2]"),
    ("gpuhc: ecc : reboot timed out", "gpuhc: ecc"),
    ("gpuhc: the word reboot issued inside", "gpuhc: the word reboot issued inside"),
])
def test_slurms_reboot_notes_are_cut_from_the_end_only(reason, kept):
    assert REBOOT_NOTES_TAIL.sub("", reason) == kept


def test_reboot_refuses_a_nextstate_no_release_accepts():
    with pytest.raises(SlurmError, match="must be DOWN or RESUME, got 'DRAIN'"):
        Scontrol(run=lambda argv, t: (0, "", "")).reboot("n1", "gpuhc: x", nextstate="DRAIN")
    assert REBOOT_NEXTSTATES == ("DOWN", "RESUME")


def test_the_config_offers_the_reboot_states_every_release_accepts():
    """slurm/settings.py repeats the tuple rather than import releases on every config load
    (as it does for the ladders); this keeps the two the same."""
    from gpuhc.slurm.settings import SCHEMA

    assert tuple(SCHEMA["quarantine"]["reboot_nextstate"].choices) == REBOOT_NEXTSTATES


# --- the health check's own settings (issue 33) ----------------------------------------------


def test_the_passive_deadline_follows_health_check_timeout_when_the_site_sets_it():
    from gpuhc.slurm.read.releases import passive_deadline_s

    assert passive_deadline_s(55.0, None) == 55.0  # Slurm's fixed 60 s: deadline_s.passive
    assert passive_deadline_s(55.0, 300.0) == 295.0  # HealthCheckTimeout=300: five seconds before it
    assert passive_deadline_s(55.0, 6.0) == 1.0


def test_a_flows_deadline_uses_it(tmp_path, monkeypatch):
    from tests.helpers.minislurm import MiniSlurm, config, flow

    cfg = config(tmp_path)
    cfg.data["slurm"]["health_check_timeout_s"] = 120.0
    _, f = flow(tmp_path, monkeypatch, "passive", MiniSlurm({"n1": ("IDLE", None)}), [], cfg=cfg)
    assert f.deadline.at - f.started == pytest.approx(115.0)  # monotonic times: a float's rounding
    _, p = flow(tmp_path, monkeypatch, "prolog", MiniSlurm({"n1": ("IDLE", None)}), [], cfg=cfg)
    assert p.deadline.at - p.started == pytest.approx(float(cfg.data["slurm"]["deadline_s"]["prolog"]))  # its own


def test_the_actuator_sizes_its_time_to_verify_from_the_same_stage(tmp_path, monkeypatch):
    """A short HealthCheckTimeout shortens the run and, with it, the share of the run the actuator
    keeps to verify a drain (a quarter) and to get a place first (a tenth): not the 55 s default's
    10 s and 5 s, which a 20 s health check could never leave."""
    from gpuhc.slurm.act.actuator import CLAIM_NEEDS_S, VERIFY_NEEDS_S
    from gpuhc.slurm.flows.frame import actuator
    from tests.helpers.minislurm import MiniSlurm, config, flow

    cfg = config(tmp_path)
    cfg.data["slurm"]["health_check_timeout_s"] = 20.0
    _, f = flow(tmp_path, monkeypatch, "passive", MiniSlurm({"n1": ("IDLE", None)}), [], cfg=cfg)
    assert f.stage_s == 15.0 and f.deadline.at - f.started == pytest.approx(15.0)
    assert actuator(f).needs == pytest.approx((0.25 * 15.0, 0.1 * 15.0))
    del cfg.data["slurm"]["health_check_timeout_s"]
    _, g = flow(tmp_path, monkeypatch, "passive", MiniSlurm({"n1": ("IDLE", None)}), [], cfg=cfg)
    assert actuator(g).needs == (VERIFY_NEEDS_S, CLAIM_NEEDS_S)

