"""Hooks slurmd kills at its timeout (bench/campaign_model/hook_kill.py, docs/campaign.md):
a gpuhc prolog that cannot end because NVML sleeps uninterruptibly in the driver is Slurm's
"Prolog error" drain, its job requeued; on a node with no fault that drain is a false drain
gpuhc's hook caused. Each test can fail: model the kill away and the wedged node's job starts
(an escape), the healthy node's drain disappears."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import faults as F  # noqa: E402
from campaign_model.metrics import compute  # noqa: E402
from campaign_model.people import People  # noqa: E402
from campaign_model.sim import T0  # noqa: E402
from tests.helpers.campaign import campaign  # noqa: E402

JOB_AT = 600.0


def wedged(monkeypatch, uninterruptible):
    real = F.strength
    monkeypatch.setattr(F, "strength", lambda cls, rng: (
        {"uninterruptible": uninterruptible} if cls.name == "nvml-hang" else real(cls, rng)))


def test_a_prolog_that_cannot_end_is_slurms_prolog_error_and_its_job_is_requeued(tmp_path, monkeypatch):
    # A wedged driver whose NVML call never returns: gpuhc's prolog ERRORs by its deadline and
    # would exit 0, but its process cannot end; slurmd kills the hook at PrologEpilogTimeout and
    # slurmctld drains the node with its own reason. The job goes back to the queue, not onto
    # the node; a person looks at the node a working day later and finds the fault.
    wedged(monkeypatch, True)
    c = campaign(tmp_path, [(300, "nvml-hang", "gpu001", False)], nodes=1, days=1.5,
                 jobs=[(JOB_AT, 1, 3600.0, ("gpu001",))])
    m = compute(c)
    first = c.slurm.events[0]
    assert first[1:] == ("gpu001", "slurm-drain", "Prolog error")
    assert first[0] - T0 == pytest.approx(JOB_AT + F.HOOK_TIMEOUT_S, abs=1)
    assert c.stats.jobs["requeued"] == 1 and c.stats.jobs["started"] == 0 and m["escapes"]["total"] == 0
    assert m["faults_drained_by_slurm"] == {"nvml-hang": 1} and m["faults_never_drained"] == {}
    assert m["false_drains"]["slurm_hook_killed"] == 0
    assert [(round(t - T0), k) for t, _, k, _ in c.stats.human] == [
        (round(first[0] - T0 + People.HUMAN_AFTER_S), "rma")]
    assert c.stats.runs["killed by slurmd (prolog)"] == 1


def test_a_prolog_that_ends_by_its_deadline_lets_the_job_start_on_the_wedged_node(tmp_path, monkeypatch):
    # The same driver, its calls failing in time: gpuhc's prolog ERRORs and exits 0 (docs/slurm.md),
    # the job starts on the wedged node (an escape) and ends with it; no Slurm drain.
    wedged(monkeypatch, False)
    c = campaign(tmp_path, [(300, "nvml-hang", "gpu001", False)], nodes=1, days=0.2,
                 jobs=[(JOB_AT, 1, 3600.0, ("gpu001",))])
    m = compute(c)
    assert m["escapes"]["by_class"] == {"nvml-hang": 1}
    assert not [e for e in c.slurm.events if e[2] == "slurm-drain"] and not c.stats.runs["killed by slurmd (prolog)"]


def test_a_healthy_nodes_nvml_stall_that_outlasts_the_prolog_is_a_false_drain_by_gpuhcs_hook(tmp_path, monkeypatch):
    # NVML busy for 5-15 min on a healthy GPU, the call uninterruptible: the prolog at 600 s
    # cannot end, Slurm drains the node "Prolog error", and the person a day later finds nothing
    # and resumes it. gpuhc cannot undo Slurm's reason: it is a false drain its hook caused.
    monkeypatch.setattr(F, "UNINTERRUPTIBLE", 1.0)
    c = campaign(tmp_path, [], nodes=1, days=1.5, noise=True, noise_inject=[(JOB_AT - 60, "nvml-timeout-long", "gpu001")],
                 jobs=[(JOB_AT, 1, 1200.0, ("gpu001",))])
    m = compute(c)
    assert [(w, r) for _, _, w, r in c.slurm.events] == [("slurm-drain", "Prolog error"), ("admin-resume", None)]
    assert m["false_drains"]["slurm_hook_killed"] == 1 and m["false_drains"]["total"] == 1
    assert [k for _, _, k, _ in c.stats.human] == ["resume (nothing found)"]
    assert c.stats.jobs["requeued"] == 1 and c.slurm.nodes["gpu001"].in_service  # back after the person's look


def test_a_healthy_nodes_nvml_stall_that_ends_within_the_prolog_is_no_drain(tmp_path, monkeypatch):
    # The same stall, interruptible (its calls fail in time): the prolog ends, the job starts.
    monkeypatch.setattr(F, "UNINTERRUPTIBLE", 0.0)
    c = campaign(tmp_path, [], nodes=1, days=0.2, noise=True, noise_inject=[(JOB_AT - 60, "nvml-timeout-long", "gpu001")],
                 jobs=[(JOB_AT, 1, 1200.0, ("gpu001",))])
    assert not [e for e in c.slurm.events if e[2] == "slurm-drain"] and c.stats.jobs["started"] == 1


def test_an_epilog_that_cannot_end_is_slurms_epilog_error(tmp_path, monkeypatch):
    # The driver wedges under a running job, which ends with it; the job's epilog cannot end
    # either, and Slurm drains the node with "Epilog error" at the timeout, before gpuhc's
    # health checks have seen NVML hung long enough (20 min) to drain it themselves.
    wedged(monkeypatch, True)
    c = campaign(tmp_path, [(JOB_AT, "nvml-hang", "gpu001", False)], nodes=1, days=0.2,
                 jobs=[(300, 1, 3600.0, ("gpu001",))])
    first = c.slurm.events[0]
    assert first[1:] == ("gpu001", "slurm-drain", "Epilog error")
    assert first[0] - T0 == pytest.approx(JOB_AT + F.HOOK_TIMEOUT_S, abs=1)
    assert compute(c)["faults_drained_by_slurm"] == {"nvml-hang": 1}
