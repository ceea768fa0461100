"""A wedged driver is a fault (gpuhc/slurm/flows/wedged.py): NVML that times out or fails on consecutive
health checks drains the node, through the policy and the breaker; one such run does not, and a
clean read starts the count again. The Slurm side is tests/helpers/minislurm.py; the results are
the runner's own words for a source that hung (gpuhc/runner.py)."""

from __future__ import annotations

from gpuhc.model.result import Result, Status
from gpuhc.slurm.flows import entry
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.flows.wedged import nvml_trouble
from tests.helpers.minislurm import MiniSlurm, OK, config, run

HUNG = Result("ecc", Status.ERROR, "timed out after 5.0s reading nvml", "node")
FAILED = Result("clocks", Status.ERROR, "could not read nvml: NVMLError_Unknown: Unknown Error", "node")
NVML_TIMEOUT = Result("gpu-count", Status.ERROR, "NVML timed out: Timeout (could not judge; timing out on "
                      "consecutive health checks drains: a wedged driver)", "node")
IB_HUNG = Result("infiniband", Status.ERROR, "timed out after 5.0s reading ib", "node")


def test_what_counts_as_nvml_trouble():
    assert nvml_trouble([OK, HUNG]) == "ecc: timed out after 5.0s reading nvml"
    assert nvml_trouble([FAILED]).startswith("clocks: could not read nvml")
    assert nvml_trouble([IB_HUNG, OK]) is None  # another source's trouble is not the driver's
    assert nvml_trouble([Result("ecc", Status.FAIL, "timed out after 5.0s reading nvml")]) is None
    assert nvml_trouble([NVML_TIMEOUT]).startswith("gpu-count: NVML timed out")  # NVML's own "Timeout"
    assert nvml_trouble([Result("xid", Status.ERROR, NVML_TIMEOUT.message)]) is None  # gpu-count's words only


def test_nvml_answering_timeout_once_does_not_drain_twice_in_a_row_does(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    first = run(tmp_path, monkeypatch, "passive", s, [OK, NVML_TIMEOUT])
    assert first.exit_code == 3 and s.updates() == []  # one timeout: could not judge
    second = run(tmp_path, monkeypatch, "passive", s, [OK, NVML_TIMEOUT])
    assert second.exit_code == 1 and second.decision.act is Act.DRAIN and second.acted, second.lines
    assert s.nodes["n1"][1].startswith("gpuhc: nvml NVML hung or failed on 2 consecutive health checks")


def test_nvml_hanging_on_two_health_checks_in_a_row_drains_with_a_reason_that_says_so(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    first = run(tmp_path, monkeypatch, "passive", s, [OK, HUNG])
    assert first.exit_code == 3 and s.updates() == []  # once: gpuhc could not judge
    second = run(tmp_path, monkeypatch, "passive", s, [OK, FAILED])
    assert second.exit_code == 1 and second.decision.act is Act.DRAIN and second.acted, second.lines
    reason = s.nodes["n1"][1]
    assert reason.startswith("gpuhc: nvml NVML hung or failed on 2 consecutive health checks (driver wedged?)"), reason


def test_a_clean_read_starts_the_count_again(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    for results in ([HUNG], [OK], [HUNG]):
        out = run(tmp_path, monkeypatch, "passive", s, results)
    assert out.exit_code == 3 and s.updates() == []


def test_a_wedged_driver_is_drained_only_within_the_breaker(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE+DRAIN", "gpuhc: xid x")})
    cfg = config(tmp_path, breaker={"max_drained": 1})
    run(tmp_path, monkeypatch, "passive", s, [HUNG], cfg=cfg)
    out = run(tmp_path, monkeypatch, "passive", s, [HUNG], cfg=cfg)
    assert out.exit_code == 4 and out.decision.act is Act.BLOCKED and s.updates() == []
