"""The short real campaign (issue 23's Proof; docs/campaign.md, "Trusting the model"): 16 nodes
on a real slurmctld with one slurmd each, the model's schedule of faults and `sbatch` jobs for
90 wall seconds (an hour and a half of the month, compressed 60 times), and the model on the
same seed and the same compression: both must make the same drains, reboots and resumes (the
reboots on Slurm's RebootProgram, bench/campaign_model/real_boot.py), the same escapes,
and the same timings within the tolerance real_agree.py holds. The comparison's own rules are
tested first, on hand-made records, so that a disagreement is known to fail the test.
"""

from __future__ import annotations

import sys

import pytest

from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from campaign_model import faults as F  # noqa: E402
from campaign_model.real import Record  # noqa: E402
from campaign_model.real_agree import bounds, disagreements, races  # noqa: E402
from campaign_model.real_run import campaign  # noqa: E402

REMAP, APP = F.BY_NAME["row-remap-pending"], F.BY_NAME["app-xid13-43"]


def record(drain_at: float, back_at: float, job_at: float = 50.0, app_drain: bool = False) -> Record:
    """A row remap on n1 at 10 s drained at ``drain_at`` and resumed at ``back_at``; an
    application's Xid on n2 at 20 s (drained too with ``app_drain``)."""
    rec = Record(faults=[F.Fault(0, REMAP, "n1", 10.0, end=back_at - 1.0), F.Fault(1, APP, "n2", 20.0, end=30.0)])
    rec.events = [(drain_at, "n1", "drain", "gpuhc: ecc gpu1"), (back_at, "n1", "resume", None)]
    if app_drain:
        rec.events.append((21.0, "n2", "drain", "gpuhc: xid Xid 13"))
    rec.job_starts = [(job_at, ("n1",))]
    return rec


def test_timings_agree_within_ten_percent_or_the_floor():
    model = record(drain_at=12.0, back_at=32.0)  # fault->drain 2 s, drain->back 20 s
    assert disagreements(model, record(12.9, 32.9), 90.0, floor_s=1.0) == []  # 0.9 s: under the floor
    off = disagreements(model, record(12.0, 34.5), 90.0, floor_s=1.0)  # back 22.5 s: 12.5 % off
    assert len(off) == 1 and "fault 0 (row-remap-pending on n1) back: model 20.0s, real 22.5s" in off[0]
    late = disagreements(model, record(14.0, 34.0), 90.0, floor_s=1.0)  # drained 2 s later
    assert len(late) == 1 and "to_drain: model 2.0s, real 4.0s" in late[0]


def test_a_fault_racing_a_job_start_must_drain_but_is_not_timed():
    model = record(drain_at=10.0, back_at=32.0, job_at=9.0)
    assert races(model) == {0}
    assert disagreements(model, record(11.5, 38.0, job_at=9.0), 90.0, floor_s=1.0) == []
    never = record(11.5, 38.0, job_at=9.0)
    never.events = []
    assert any("drained (node, class)" in x for x in disagreements(model, never, 90.0, floor_s=1.0))


def test_a_prolog_stop_the_real_health_check_pre_empted_is_named_not_counted():
    """The model's prolog stops a job on n1 at 12 s; on the real side Slurm's scheduling took
    longer than the node's next health check, which drained n1 first (0.6 s later): the job ran
    elsewhere. Named as a race; a real drain 4 s later, or no job started elsewhere, is still a
    disagreement."""
    model = record(drain_at=12.0, back_at=32.0)
    model.prolog_stops = [(12.0, "n1")]
    real = record(12.6, 32.6)
    real.job_starts.append((13.4, ("n2",)))
    assert disagreements(model, real, 90.0, floor_s=1.0) == []
    late = record(16.5, 36.5)
    late.job_starts.append((16.8, ("n2",)))
    assert any("prolog stops" in x for x in disagreements(model, late, 90.0, floor_s=1.0))
    nowhere = record(12.6, 32.6)  # drained, but the job did not run elsewhere: the prolog missed it
    assert any("prolog stops" in x for x in disagreements(model, nowhere, 90.0, floor_s=1.0))
    stopped = record(12.6, 32.6)
    stopped.prolog_stops = [(12.5, "n1")]
    assert disagreements(model, stopped, 90.0, floor_s=1.0) == []


def two_spells(real_merged: bool, gap: float = 0.7) -> tuple[Record, Record]:
    """The model: a row remap on n1 at 10 s, drained at 12 s and resumed at 32 s; a second one
    arises ``gap`` s after that resume, drained at 36 s and resumed at 50 s. The real side: the
    same, or (``real_merged``) one spell, the retest having run after the second fault arose."""
    def rec(events):
        r = Record(faults=[F.Fault(0, REMAP, "n1", 10.0, end=31.0), F.Fault(1, REMAP, "n1", 32.0 + gap, end=49.0)])
        r.events = events
        return r
    model = rec([(12.0, "n1", "drain", "gpuhc: ecc"), (32.0, "n1", "resume", None),
                 (36.0, "n1", "drain", "gpuhc: ecc"), (50.0, "n1", "resume", None)])
    real = rec([(12.0, "n1", "drain", "gpuhc: ecc"), (50.5, "n1", "resume", None)]) if real_merged else rec(
        [(12.2, "n1", "drain", "gpuhc: ecc"), (32.3, "n1", "resume", None),
         (36.1, "n1", "drain", "gpuhc: ecc"), (50.2, "n1", "resume", None)])
    return model, real


def test_a_fault_racing_its_nodes_resume_may_make_one_spell_of_two():
    # Seed 10 on 24.11: the second fault arose 0.74 s after the model's resume; the real retest
    # ran after it, failed, and the node stayed out until the second fault was repaired.
    assert disagreements(*two_spells(real_merged=False), 90.0, floor_s=1.0) == []
    assert disagreements(*two_spells(real_merged=True), 90.0, floor_s=1.0) == []
    # The same merge with the fault 2 s after the resume is no race: the real retest missed a
    # fault the model's resume had left behind it.
    off = disagreements(*two_spells(real_merged=True, gap=2.0), 90.0, floor_s=1.0)
    assert any("acts per node" in x for x in off)
    # A merged spell that ends before the raced fault is gone never drained for it.
    model, real = two_spells(real_merged=True)
    real.events[-1] = (32.5, "n1", "resume", None)
    assert any("never drained for it: [1]" in x for x in disagreements(model, real, 90.0, floor_s=1.0))


def test_an_act_in_the_last_second_may_fall_after_the_real_runs_end():
    # Seed 44: a GSP timeout at 86.75 s that the model drained at 89.69 s of 90.
    model, real = record(12.0, 32.0), record(12.0, 32.0)
    model.faults.append(F.Fault(2, F.BY_NAME["gsp-timeout"], "n3", 86.75))
    real.faults.append(F.Fault(2, F.BY_NAME["gsp-timeout"], "n3", 86.75))
    model.events.append((89.69, "n3", "drain", "gpuhc: xid Xid 119"))
    assert disagreements(model, real, 90.0, floor_s=1.0) == []
    model.events[-1] = (88.5, "n3", "drain", "gpuhc: xid Xid 119")  # before the last second: compared
    assert any("acts per node" in x for x in disagreements(model, real, 90.0, floor_s=1.0))


def test_a_prolog_stop_must_happen_on_both_sides_and_may_cost_one_slot():
    # Seed 13: the model's prolog found a GSP timeout on n1 and Slurm requeued the job. On the
    # real side the prolog started 0.6-1.6 s after the job's arrival, and Slurm kept n1
    # COMPLETING until the job's epilog had run (0.9-1.7 s): a health check slot inside that
    # waited, and the node came back one 5 s slot later.
    model, real = record(drain_at=12.0, back_at=32.0), record(drain_at=13.5, back_at=37.5)
    model.prolog_stops, real.prolog_stops = [(12.0, "n1")], [(13.5, "n1")]
    assert disagreements(model, real, 90.0, floor_s=1.0, slot_s=5.0) == []
    assert any("back, Slurm's latency allowed" in x for x in disagreements(model, real, 90.0, floor_s=1.0))
    late = record(drain_at=13.5, back_at=41.0)  # 9 s late: more than a slot
    late.prolog_stops = real.prolog_stops
    assert any("back, Slurm's latency allowed" in x for x in disagreements(model, late, 90.0, floor_s=1.0, slot_s=5.0))
    slow = record(drain_at=16.5, back_at=36.5)  # the prolog 4.5 s after the job's arrival
    slow.prolog_stops = [(16.5, "n1")]
    assert any("to_drain, Slurm's latency allowed" in x for x in disagreements(model, slow, 90.0, floor_s=1.0, slot_s=5.0))
    real.prolog_stops = []  # the real side drained n1 another way
    assert any("prolog stops" in x for x in disagreements(model, real, 90.0, floor_s=1.0, slot_s=5.0))


def test_a_fault_that_ends_its_job_may_drain_later_by_slurms_kill_to_epilog_time():
    # Seed 1 on 22.05: a GSP timeout inside a job; the model's epilog drained at the fault's
    # instant, the real one 2.93 s later (Slurm ended the job, then ran the epilog).
    def rec(drain_at):
        r = record(drain_at=drain_at, back_at=40.0)
        r.faults[0].in_job = "7"
        return r
    assert REMAP.kills_job
    assert disagreements(rec(10.0), rec(12.93), 90.0, floor_s=1.0) == []
    assert any("to_drain, Slurm's latency allowed" in x for x in disagreements(rec(10.0), rec(14.5), 90.0, floor_s=1.0))
    plain = record(drain_at=10.0, back_at=40.0)  # not in a job: the 1 s floor holds
    assert any("to_drain: model 0.0s, real 2.93s" in x
               for x in disagreements(plain, record(drain_at=12.93, back_at=40.0), 90.0, floor_s=1.0))


def test_bounds_catch_a_false_drain_and_an_escape():
    assert bounds(record(12.0, 32.0)) == []
    assert bounds(record(12.0, 32.0, app_drain=True)) == ["false drain: n2 at 21.0s: gpuhc: xid Xid 13"]
    rec = record(12.0, 32.0)
    rec.escapes = [(11.0, 3, "n1", "row-remap-pending", False), (40.0, 4, "n1", "row-remap-pending", True)]
    assert bounds(rec) == ["escape: job 3 started on n1 with row-remap-pending at 11.0s"]


def test_a_reboot_one_side_missed_is_a_disagreement():
    model, real = record(12.0, 32.0), record(12.0, 32.0)
    model.reboots = [(20.0, "n1")]  # the model rebooted n1 between the drain and the resume
    assert any("acts per node" in x and "'reboot'" in x for x in disagreements(model, real, 90.0, floor_s=1.0))
    real.reboots = [(20.5, "n1")]
    assert disagreements(model, real, 90.0, floor_s=1.0) == []


def test_the_real_kth_reboot_heals_what_the_models_kth_reboot_healed(tmp_path):
    # The model rebooted n1 twice (20 s, 40 s): the NVLink fault survived the first and went with
    # the second; the application's fault goes with any reboot. The harness's first and second
    # reboots of n1 must do the same, and time the machine's return from the request.
    from types import SimpleNamespace

    from campaign_model.node import Node
    from campaign_model.real_boot import Reboots
    from campaign_model.sim import T0

    down, app = F.BY_NAME["nvlink-down"], F.BY_NAME["app-xid31"]
    mf = [F.Fault(0, down, "n1", T0 + 10.0, end=T0 + 40.0), F.Fault(1, app, "n1", T0 + 12.0, end=T0 + 20.0)]
    mf[0].how, mf[1].how = "reboot", "reboot"
    model = SimpleNamespace(faults=mf, ts=1 / 60, slurm=SimpleNamespace(events=[
        (T0 + 20.0, "n1", "rebooted", None), (T0 + 40.0, "n1", "rebooted", None)]))
    node = Node("n1", tmp_path)
    node.faults = [F.Fault(0, down, "n1", 10.0), F.Fault(1, app, "n1", 12.0)]
    repaired = []
    camp = SimpleNamespace(model=model, nodes={"n1": node}, rec=Record(), rel=lambda: 15.0, write_all=lambda: None,
                           repair=lambda f, how, keep_lines: (node.faults.remove(f), repaired.append((f.id, how))))
    boots = Reboots(camp, tmp_path / "boots", reboot_s=10.0)
    boots.seen("n1", frozenset({"REBOOT_REQUESTED"}), running=False, decided=9.5)
    assert boots.due("n1") == pytest.approx(9.5 + 10.0 / 60 + 10.0)  # from the run that asked
    boots._boot("n1")
    assert repaired == [(1, "reboot")] and [f.id for f in node.faults] == [0]
    boots._boot("n1")
    assert repaired == [(1, "reboot"), (0, "reboot")] and node.faults == []
    assert [n for _, n in camp.rec.reboots] == ["n1", "n1"]


def test_the_real_kth_reset_heals_what_the_models_kth_reset_healed(tmp_path):
    # The model reset n1 twice: the first reset repaired nothing, the second the ECC fault. The
    # harness used to heal a fault the model's reset repaired at the node's first reset (seed 10
    # came back 5 s early); its k-th reset must play the model's k-th.
    from types import SimpleNamespace

    from campaign_model.node import Node
    from campaign_model.real import RealCampaign

    ecc = F.BY_NAME["ecc-uncorrectable"]
    node = Node("n1", tmp_path)
    node.faults = [F.Fault(3, ecc, "n1", 10.0)]
    repaired = []
    (tmp_path / "resets").mkdir()
    h = SimpleNamespace(resets_dir=tmp_path / "resets", resets={}, reset_count={}, reset_s=0.0, nodes={"n1": node},
                        model=SimpleNamespace(reset_outcomes={"n1": [[], [3]]}), reset_log=[], t0=0.0,
                        rel=lambda: 1.0, write_all=lambda: None,
                        repair=lambda f, how: (node.faults.remove(f), repaired.append((f.id, how))))
    for k in (1, 2):
        (tmp_path / "resets" / f"req.n1.{k}").touch()
        RealCampaign._resets(h)
        assert repaired == ([] if k == 1 else [(3, "reset")])
    assert node.faults == [] and len(h.reset_log) == 2


def test_the_boot_unit_is_compressed_and_its_retest_dated(tmp_path):
    # The machines' boot unit as SlurmCluster(reboot=True) writes it, then the campaign's version:
    # the unit's 5 s poll compressed 60x, the retest's start recorded for the timings.
    from tests.helpers.slurm_cluster import SlurmCluster
    from tests.helpers.slurm_cluster_files import write_reboot

    from campaign_model.real_boot import install

    c = SlurmCluster(tmp_path / "slurm", nodes=("n1",), reboot=True)
    (c.workdir / "bin").mkdir(parents=True)
    write_reboot(c)
    requests = install(c, tmp_path, 60.0)
    boot = (c.workdir / "bin" / "boot").read_text()
    assert "sleep 5;" not in boot and "sleep 0.083;" in boot
    assert boot.index("retest $node\" >>") < boot.index("quarantine retest")
    assert (c.workdir / "bin" / "down").stat().st_mode & 0o111 and requests == tmp_path / "boots"
    # A unit this campaign does not know is refused by name, not played wrong.
    (c.workdir / "bin" / "boot").write_text("#!/bin/sh\nexec gpuhc quarantine retest\n")
    with pytest.raises(RuntimeError, match="not the retest unit's two commands"):
        install(c, tmp_path, 60.0)


def agreed(slurm_cluster, tmp_path, seed: int):
    """Both sides on ``seed``, each within its own bounds and agreeing: (document, model, real)."""
    doc = campaign(slurm_cluster, tmp_path, seed=seed)
    model, real = doc.pop("_records")
    print(doc)
    assert bounds(real) == [] and bounds(model) == []
    assert doc["disagreements"] == []
    return doc, model, real


@pytest.mark.slurm
@pytest.mark.serial  # its timings must agree within 10 % or 1 s: runs alone (tests/run.sh)
def test_seed_1_agrees_with_the_model(slurm_cluster, tmp_path):
    # Resets and reboots that do not all heal: two reboots of gpu001 and of gpu003, an Xid 79 on
    # gpu015 rebooted through Slurm and resumed by its boot unit, two spells of gpu013; jobs Slurm
    # places. The same acts in order and the same timings as seed 11, on every release (it had
    # disagreed only on a machine loaded by other work: docs/campaign.md).
    doc, _, _ = agreed(slurm_cluster, tmp_path, seed=1)
    assert sum(acts.count("reboot") for acts in doc["real"]["acts"].values()) == 5


@pytest.mark.slurm
@pytest.mark.serial  # its timings must agree within 10 % or 1 s: runs alone (tests/run.sh)
def test_seed_10_agrees_with_the_model(slurm_cluster, tmp_path):
    # Seed 10 crashed (a Fault had no `how` until it was repaired: real_boot.py). gpu012's second
    # fault arises 0.74 s after the model's resume of its first, under either side's resolution:
    # a real retest that runs after it fails and the two spells are one (24.11 did so). The
    # comparison names that race (deviation.resume_races) and holds everything else.
    doc, _, _ = agreed(slurm_cluster, tmp_path, seed=10)
    assert list(doc["deviation"]["resume_races"]) and doc["real"]["jobs"]["started"] >= 1
    assert doc["real_slurm_rpcs"].get("REQUEST_UPDATE_NODE", 0) >= len(doc["real"]["acts"])  # sdiag saw the drains


@pytest.mark.slurm
@pytest.mark.serial  # its timings must agree within 10 % or 1 s: runs alone (tests/run.sh)
def test_seed_13_the_prolog_stops_a_job_in_slurm(slurm_cluster, tmp_path):
    # A GSP timeout (Xid 119 twice) on idle gpu001 between its health checks; a job arrives and
    # Slurm places it there (nothing pins it). gpuhc's prolog finds the fault, drains the node and
    # fails, Slurm requeues the job, and the ladder's resets bring gpu001 back, on both sides.
    doc, model, real = agreed(slurm_cluster, tmp_path, seed=13)
    assert [n for _, n in model.prolog_stops] == ["gpu001"]
    assert doc["real"]["acts"]["gpu001"] == ["drain", "resume"]
    if doc["deviation"]["prolog_races"]:
        # The job's arrival and gpu001's next health check fall within Slurm's scheduling time:
        # on a loaded box the health check drained first and the job ran elsewhere (CI, 26.05).
        # The race is named; gpu001 was still drained for its fault, and no job met it.
        assert [n for _, n in doc["deviation"]["prolog_races"]] == ["gpu001"] and real.prolog_stops == []
        assert doc["real"]["faults"]["0"]["to_drain"] is not None and doc["real"]["escapes"] == {}
        return
    assert [n for _, n in real.prolog_stops] == ["gpu001"]
    # gpuhc's prolog failed the job (it drained gpu001, or found its health check had just done
    # so: both runs are gpuhc's) and slurmctld requeued it, on every release.
    decisions = (tmp_path / "real" / "gpuhc-decisions.log").read_text()
    assert "gpuhc prolog gpu001: job 1: failing the prolog so that Slurm requeues the job" in decisions
    ctld = (tmp_path / "real" / "slurm" / "log" / "slurmctld.log").read_text()
    assert "Prolog launch failure, JobId=1" in ctld and "Requeuing JobId=1" in ctld


@pytest.mark.slurm
@pytest.mark.serial  # its timings must agree within 10 % or 1 s: runs alone (tests/run.sh)
def test_a_real_campaign_agrees_with_the_model_on_the_same_seed(slurm_cluster, tmp_path):
    doc, _, _ = agreed(slurm_cluster, tmp_path, seed=11)  # 16 nodes, 90 s, compressed 60x, rates x1500
    # What the seed puts to the test, on both sides (the draw of the Llama 3 table's classes a
    # localhost Slurm can play, faults.REAL_CLASSES): a row remap a reset repairs, an NVLink
    # error burst drained and resumed once it stops, an Xid 79 (a GPU fallen off the bus) sent
    # through the ladder's reboot rung by Slurm's RebootProgram and resumed by the boot-time
    # retest; jobs placed by Slurm that ran.
    for side in (doc["model"], doc["real"]):
        assert sorted(side["acts"].items()) == [("gpu003", ["drain", "resume"]),
                                                ("gpu015", ["drain", "reboot", "resume"]),
                                                ("gpu016", ["drain", "resume"])]
    classes = {v["node"]: v["class"] for v in doc["real"]["faults"].values()}
    assert classes == {"gpu003": "row-remap-pending", "gpu015": "fallen-off-bus", "gpu016": "nvlink-errors"}
    # The reboot was Slurm's: its RebootProgram ran for that node, the machine booted again and
    # its boot unit's retest resumed it (tests/slurm_cluster_files.py's calls.log).
    calls = [ln.split() for ln in (tmp_path / "real" / "slurm" / "log" / "calls.log").read_text().splitlines()]
    assert [c[2] for c in calls if c[1] == "reboot"] == ["gpu015"]
    boots = (tmp_path / "real" / "slurm" / "log" / "boot.gpu015.log").read_text()
    assert "gpuhc quarantine retest gpu015: retest passed (was drained): resuming" in boots
    assert doc["real"]["jobs"]["started"] >= 1 and doc["real"]["escapes"] == {}
    # slurmctld's own count (sdiag) of the node updates and reboots gpuhc asked for
    assert doc["real_slurm_rpcs"]["REQUEST_UPDATE_NODE"] >= 3 and doc["real_slurm_rpcs"]["REQUEST_REBOOT_NODES"] >= 1
    assert doc["deviation"]["to_drain"]["n"] >= 3 and doc["deviation"]["back"]["n"] >= 2
