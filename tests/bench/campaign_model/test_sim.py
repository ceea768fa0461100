"""The campaign's event loop (bench/campaign_model/sim.py, docs/campaign.md "Method"): gpuhc's own
flows against a modelled Slurm on a virtual clock. These runs are short and their faults placed by
hand, so each test holds one rule of the loop: what drains, what comes back and how soon, what
retires, what escapes, and that an application's fault never drains."""

from __future__ import annotations

import sys

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import faults as F  # noqa: E402
from campaign_model.metrics import compute  # noqa: E402
from campaign_model.policies import config_for  # noqa: E402
from campaign_model.sim import Campaign  # noqa: E402


def campaign(tmp_path, inject, policy="ladder", nodes=4, days=0.25, seed=3, load=0.0, jobs=None, **kw):
    """A short campaign with its faults placed by hand; no noise unless a test asks for it, so
    that each test holds one rule."""
    config = config_for(policy, tmp_path)
    kw.setdefault("noise", False)
    return Campaign(config, tmp_path, nodes=nodes, days=days, seed=seed, inject=inject, load=load, jobs=jobs,
                    **kw).run()


def test_a_reset_fault_drains_resets_and_is_back_within_the_goal(tmp_path):
    c = campaign(tmp_path, [(600, "row-remap-pending", "gpu002", False)])
    m = compute(c)
    acts = [(n, what) for _, n, what, _ in c.slurm.events]
    # the reset is tagged [reset 1/2] before it acts (written ahead: issue 30), then resumed
    assert acts == [("gpu002", "drain"), ("gpu002", "reason"), ("gpu002", "resume")]
    assert m["fault_to_drain"]["row-remap-pending"]["p50_min"] <= 5.5  # the next health check
    assert m["drain_to_back_repairable"]["n"] == 1 and m["drain_to_back_repairable"]["p95_min"] <= 15
    assert c.faults[0].how == "reset" and m["false_drains"]["total"] == 0 and m["human_actions"]["total"] == 0


def test_a_lemon_climbs_the_ladder_and_is_retired(tmp_path):
    c = campaign(tmp_path, [(600, "ecc-uncorrectable", "gpu003", True)], days=0.3)
    m = compute(c)
    steps = [what for _, n, what, _ in c.slurm.events if n == "gpu003"]
    assert steps[0] == "drain" and steps.count("reboot-asked") == 3  # max_cycles: 3
    assert c.slurm.nodes["gpu003"].reason.startswith("gpuhc: RETIRED ecc gpu5")
    r = m["retirement"]
    assert (r["retired"], r["lemon_nodes"], r["precision"], r["recall"], r["false_retirements"]) == (
        ["gpu003"], ["gpu003"], 1.0, 1.0, 0)
    assert len(r["time_to_retire_h"]) == 1 and 0 < r["time_to_retire_h"][0] < 6


def test_without_the_ladder_a_lemon_waits_for_a_person_and_an_rma(tmp_path):
    # etc/gpuhc.yaml as installed has no ladder: the node waits a working day for a person,
    # who swaps the GPU (days) and resumes it.
    c = campaign(tmp_path, [(600, "ecc-uncorrectable", "gpu003", True)], policy="shipped", days=12, seed=2)
    m = compute(c)
    assert m["retirement"]["recall"] == 0.0 and m["human_actions"]["by_kind"] == {"rma": 1}
    acts = [(w, t) for t, n, w, _ in c.slurm.events]
    assert [w for w, _ in acts] == ["drain", "admin-reason", "admin-resume"]
    assert 86400 <= acts[1][1] - acts[0][1] <= 86400 + 900  # the triage, a day after the drain
    assert 3 * 86400 <= acts[2][1] - acts[1][1] <= 10 * 86400  # the RMA
    assert c.faults[0].how == "a person: rma"


def test_application_faults_never_drain_and_the_job_ends(tmp_path):
    inject = [(1800, "app-xid13-43", "any", False), (3600, "app-xid31", "any", False)]
    c = campaign(tmp_path, inject, nodes=4, days=0.2, jobs=[(600, 2, 7200.0, ()), (700, 2, 7200.0, ())])
    m = compute(c)
    assert len(c.faults) == 2 and all(f.in_job for f in c.faults)  # they happen inside jobs
    assert c.stats.runs["real"] > 0  # the epilog and health checks really judged the lines
    assert c.slurm.events == [] and m["false_drains"]["total"] == 0 and m["escapes"]["total"] == 0
    assert c.stats.jobs["killed"] == 2


def test_a_fault_the_prolog_cannot_see_is_counted_as_an_escape(tmp_path):
    # A hot GPU fails the health check, not the prolog (the thermal check runs in the passive
    # stage): a job placed between the fault and the next health check starts on it.
    c = campaign(tmp_path, [(10, "thermal", "gpu001", False)], nodes=1, days=0.05,
                 jobs=[(20, 1, 600.0, ()), (30, 1, 600.0, ())])
    m = compute(c)
    assert m["escapes"] == {"total": 1, "by_class": {"thermal": 1}, "after_in_job_fault": 0,
                            "per_1000_job_starts": 1000.0 / c.stats.jobs["started"]}
    assert m["sick_job_node_hours"]["by_class"]["thermal"] > 0.1  # it ran there until it ended
    assert m["fault_to_drain"]["thermal"]["n"] == 1  # the health check at 5 min drains it
    second = c.jobs[2]  # waits while the node is drained: it starts, if at all, once the GPU cooled
    assert second.start is None or second.start >= c.faults[0].end


def test_a_stray_process_is_stopped_by_the_prolog(tmp_path):
    c = campaign(tmp_path, [(600, "stray-process", "gpu001", False)], nodes=1, days=0.3,
                 jobs=[(900, 1, 600.0, ("gpu001",))])
    m = compute(c)
    drains = [r for _, n, what, r in c.slurm.events if what == "drain"]
    assert drains and drains[0].startswith("gpuhc: occupancy gpu1")
    assert m["escapes"]["by_class"].get("stray-process", 0) == 0 and c.stats.jobs["requeued"] >= 1


def test_observe_mode_decides_but_never_changes_a_node(tmp_path):
    """The observe policy (slurm.mode: observe, docs/repair.md): the same fault that the shipped
    config drains is decided and logged, and Slurm is never asked to change anything."""
    c = campaign(tmp_path, [(600, "fallen-off-bus", "gpu001", False)], policy="observe", nodes=2, days=0.1,
                 jobs=[(1200, 1, 600.0, ("gpu001",))])
    # (observe overlays the ladder policy: what would be rebooted is decided, not done)
    assert not [e for e in c.slurm.events if e[2] in ("drain", "reason", "resume", "reboot-asked")], c.slurm.events
    # `gpuhc prolog` exits 0 in observe mode (gpuhc/cli/slurm_cmd.py): the job starts on the sick GPU
    m = compute(c)
    assert m["escapes"]["by_class"] == {"fallen-off-bus": 1} and c.stats.jobs["requeued"] == 0
    (tmp_path / "shipped").mkdir()
    shipped = campaign(tmp_path / "shipped", [(600, "fallen-off-bus", "gpu001", False)], policy="shipped", nodes=2,
                       days=0.1)
    assert [e for e in shipped.slurm.events if e[2] == "drain"]


def test_a_fallen_off_bus_lemon_is_rebooted_through_its_cycles_and_retired(tmp_path):
    # Xid 79 is "drain + reboot" (NVIDIA's RESTART_BM; it was a ticket that no ladder step
    # climbed, recall 0 in docs/campaign.md): the lemon goes through the cycles, showing again
    # after each boot, and is retired with no person.
    c = campaign(tmp_path, [(600, "fallen-off-bus", "gpu002", True)], days=0.3)
    m = compute(c)
    assert c.slurm.nodes["gpu002"].reason.startswith("gpuhc: RETIRED xid79 gpu3")
    assert m["retirement"]["recall"] == 1.0 and m["escapes"]["total"] == 0
    assert sum(1 for e in c.slurm.events if e[2] == "reboot-asked") == 3 and m["human_actions"]["total"] == 0


def test_a_stray_process_holds_its_node_and_a_reboot_ends_it(tmp_path):
    # A stray process fails the prolog, not the health check's own stage: while gpuhc holds the
    # node for it the health check judges occupancy too (policy.rejudge), so the node is not
    # resumed onto the stray (it used to flap: drain, resume, drain, a person a day later), and
    # the ladder reboots it, since Slurm shows no job that could own the process.
    c = campaign(tmp_path, [(600, "stray-process", "gpu001", False)], nodes=1, days=1.2, load=1.0)
    m = compute(c)
    assert c.faults[0].how == "reboot" and m["human_actions"]["total"] == 0
    assert [e[2] for e in c.slurm.events if e[2] in ("drain", "reboot-asked")] == ["drain", "reboot-asked"]
    assert m["drain_to_back_repairable"]["p95_min"] <= 60 and m["escapes"]["total"] == 0


def test_an_nvlink_burst_lasts_while_its_counters_grow_and_is_drained(tmp_path):
    # The burst lasts the four runs of the node in which its recording's counters grow (it used
    # to last 15-30 min whatever the counters did, and a job that started after they stopped
    # counted as an escape gpuhc could not have seen); the node ran its checks before, for an
    # earlier fault, so its readings of the link start from the healthy counters.
    c = campaign(tmp_path, [(600, "row-remap-pending", "gpu001", False), (4 * 3600, "nvlink-errors", "gpu001", False)],
                 nodes=1, days=0.4)
    m = compute(c)
    burst = c.faults[1]
    assert m["fault_to_drain"]["nvlink-errors"]["n"] == 1, m["fault_to_drain"]
    # four runs, five minutes apart at most (the health check; a reset's retest is a run too)
    assert burst.how in ("cleared by itself", "reset") and burst.end - burst.start <= 4 * 300 + 60
    assert m["false_drains"]["total"] == 0 and m["escapes"]["total"] == 0


def test_observe_repeats_an_unchanged_run_and_counts_its_slurm_reads_the_same(tmp_path, monkeypatch):
    # Observe changes nothing, so a run with its stage's last inputs is not run again (a month
    # of it did not finish otherwise); what it would have cost Slurm is counted all the same.
    from campaign_model import settle

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fault = [(600, "fallen-off-bus", "gpu001", False)]
    a = campaign(tmp_path / "a", fault, policy="observe", nodes=2, days=0.3)
    monkeypatch.setattr(settle, "OBSERVE_RERUN_S", 0.0)  # every run real
    b = campaign(tmp_path / "b", fault, policy="observe", nodes=2, days=0.3)
    assert a.stats.runs["observe: repeated"] > 3 * a.stats.runs["real"] and "observe: repeated" not in b.stats.runs
    assert a.slurm.rpcs == b.slurm.rpcs and sum(a.slurm.rpcs.values()) > 0


def test_a_reboot_for_every_ticket_would_retire_a_node_whose_ib_port_comes_back(tmp_path, monkeypatch):
    # Why Xid 79 got the reboot, not every "drain + hardware ticket" finding (docs/campaign.md,
    # "What changed, and why"): an IB port down for hours is outside the node; rebooting it
    # three times retires the node, though the port comes back by itself. Shipped keeps it
    # drained and resumes it once the port is back. (The port's own 20 % chance that a reboot
    # brings it back is set aside: with it the outcome was the seed's draw.)
    from dataclasses import replace

    monkeypatch.setitem(F.BY_NAME, "ib-port-down", replace(F.BY_NAME["ib-port-down"], reboot_fix=0.0))
    inject = [(600, "ib-port-down", "gpu002", False)]
    (tmp_path / "t").mkdir()
    t = campaign(tmp_path / "t", inject, policy="ticket-reboot", days=0.6, seed=4)
    assert t.slurm.nodes["gpu002"].reason.startswith("gpuhc: RETIRED infiniband")
    assert t.faults[0].how == "cleared by itself"  # the port came back, the node stayed retired
    (tmp_path / "s").mkdir()
    s = campaign(tmp_path / "s", inject, days=0.6, seed=4)  # the ladder, without a reboot for tickets
    assert s.slurm.nodes["gpu002"].in_service and not [e for e in s.slurm.events if e[2] == "reboot-asked"]
