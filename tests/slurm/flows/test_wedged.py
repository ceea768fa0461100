"""A wedged driver is a fault (gpuhc/slurm/flows/wedged.py): NVML that times out or fails on consecutive
health checks for as long as ``evidence.driver`` holds (3 runs over 20 min) drains the node,
through the policy and the breaker; a shorter stall (a long driver call on a healthy GPU) does
not, and a clean read starts the count again. The Slurm side is tests/helpers/minislurm.py; the results are
the runner's own words for a source that hung (gpuhc/run/runner.py)."""

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


T0 = 1_800_000_000.0
EVERY = 300.0  # the health check's interval in the examples (HealthCheckInterval=300)


def runs(tmp_path, monkeypatch, s, seq, start=T0, **kw):
    """One health check per entry of ``seq`` (its results), ``EVERY`` seconds apart."""
    return [run(tmp_path, monkeypatch, "passive", s, results, now=start + i * EVERY, **kw)
            for i, results in enumerate(seq)]


def test_nvml_timing_out_for_ten_minutes_is_a_long_driver_call_not_a_wedge(tmp_path, monkeypatch):
    # A healthy GPU in a long resource-manager call: NVML answers "Timeout" on three health checks
    # in a row (ten minutes); the shipped rule drained at the second.
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = runs(tmp_path, monkeypatch, s, [[OK, NVML_TIMEOUT]] * 3 + [[OK]])
    assert [o.exit_code for o in outs] == [3, 3, 3, 0] and s.updates() == [], [o.lines for o in outs]
    assert any("drains when held 3 runs over 1200 s (evidence.driver)" in line for line in outs[1].lines), outs[1].lines


def test_nvml_answering_timeout_for_twenty_minutes_drains_with_the_span_in_the_reason(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = runs(tmp_path, monkeypatch, s, [[OK, NVML_TIMEOUT]] * 5)
    assert [o.exit_code for o in outs[:4]] == [3] * 4  # 3 runs, but 15 minutes: held, not yet the span
    last = outs[4]
    assert last.exit_code == 1 and last.decision.act is Act.DRAIN and last.acted, last.lines
    assert s.nodes["n1"][1].startswith("gpuhc: nvml NVML hung or failed on 5 consecutive health checks over 20 min "
                                       "(driver wedged?)"), s.nodes["n1"][1]


def test_nvml_hanging_or_failing_counts_the_same(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = runs(tmp_path, monkeypatch, s, [[OK, HUNG], [OK, FAILED], [HUNG], [FAILED], [OK, HUNG]])
    assert outs[-1].decision.act is Act.DRAIN, outs[-1].lines
    assert s.nodes["n1"][1].startswith("gpuhc: nvml NVML hung or failed on 5 consecutive health checks over 20 min")


def test_the_hold_is_the_sites_to_set(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    cfg = config(tmp_path)
    cfg.data["evidence"]["driver"].update({"runs": 2, "span_s": 300.0})
    outs = runs(tmp_path, monkeypatch, s, [[HUNG], [HUNG]], cfg=cfg)
    assert outs[0].exit_code == 3 and outs[1].decision.act is Act.DRAIN
    assert s.nodes["n1"][1].startswith("gpuhc: nvml NVML hung or failed on 2 consecutive health checks over 5 min")


def test_a_clean_read_starts_the_count_again(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = runs(tmp_path, monkeypatch, s, [[HUNG]] * 4 + [[OK]] + [[HUNG]] * 4)
    assert outs[-1].exit_code == 3 and s.updates() == []


def test_a_count_an_older_release_kept_starts_its_span_now(tmp_path, monkeypatch):
    from gpuhc.state.node import StateStore

    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc.setdefault("slurm", {}).setdefault("wedged", {})["n1"] = 7  # the bare count of before
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = runs(tmp_path, monkeypatch, s, [[HUNG]] * 5)
    assert [o.exit_code for o in outs[:4]] == [3] * 4 and outs[4].decision.act is Act.DRAIN
    assert s.nodes["n1"][1].startswith("gpuhc: nvml NVML hung or failed on 12 consecutive health checks over 20 min")


def test_a_damaged_count_starts_again(tmp_path, monkeypatch):
    from gpuhc.state.node import StateStore

    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc.setdefault("slurm", {}).setdefault("wedged", {})["n1"] = {"runs": "x", "first": T0 + 9e9}
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = runs(tmp_path, monkeypatch, s, [[HUNG]] * 4)
    assert [o.exit_code for o in outs] == [3] * 4 and s.updates() == []


def test_a_wedged_driver_is_drained_only_within_the_breaker(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE+DRAIN", "gpuhc: xid x")})
    cfg = config(tmp_path, breaker={"max_drained": 1})
    out = runs(tmp_path, monkeypatch, s, [[HUNG]] * 5, cfg=cfg)[-1]
    assert out.exit_code == 4 and out.decision.act is Act.BLOCKED and s.updates() == []
