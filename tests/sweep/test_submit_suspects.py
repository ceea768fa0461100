"""`gpuhc sweep submit` probes suspects first: a suspect leads the plan even when it was probed
within the period, and takes the first group when the sweep is capped."""

from __future__ import annotations

from gpuhc.sweep.plan import due_order, plan_probe
from gpuhc.sweep.store import SweepStore
from gpuhc.sweep.submit import submit_sweep

from tests.helpers.sweep_slurm import FakeSlurm, section


def test_suspects_lead_and_never_wait():
    last = {"n1": 10.0, "n2": 20.0, "n5": 990.0}  # n5 was probed a moment ago
    due, waiting = due_order(["n1", "n2", "n4", "n5"], last, now=1000.0, period_s=3600.0)
    assert "n5" in waiting
    due, waiting = due_order(["n1", "n2", "n4", "n5"], last, now=1000.0, period_s=3600.0, first=["n5"])
    assert due[0] == "n5" and waiting == ["n1", "n2"]


def test_capped_sweep_takes_the_suspect_in_its_first_group():
    idle = [f"n{i}" for i in range(1, 9)]
    plan = plan_probe(idle, {}, 1000.0, group_size=2, max_nodes=2, first=["n7"])
    assert [g.nodes for g in plan.groups] == [["n7", "n1"]]
    plain = plan_probe(idle, {}, 1000.0, group_size=2, max_nodes=2)
    assert [g.nodes for g in plain.groups] == [["n1", "n2"]]


def test_submit_reports_the_suspects_it_planned(tmp_path):
    out = submit_sweep(section(max_nodes=2), SweepStore(str(tmp_path)), cli=FakeSlurm().cli(), now=1000.0,
                       suspects=["n5", "n6"])  # n6 is drained: not probed, not claimed
    assert out["submitted"] and out["groups"][0]["nodes"][0] == "n5"
    assert out["suspects_first"] == ["n5"]


def test_no_accounting_means_no_suspects_and_a_note(tmp_path, monkeypatch):
    from gpuhc.config.load import load_config
    from gpuhc.fleet.gather import suspects_for_sweep

    monkeypatch.setenv("PATH", str(tmp_path))  # no sacct here
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("{}\n")
    notes: list[str] = []
    assert suspects_for_sweep(load_config(str(cfg), "admin"), notes.append) == []
    assert len(notes) == 1 and "suspects not probed first" in notes[0] and "sacct not found" in notes[0] and "slurm.sacct" in notes[0]
    cfg.write_text("fleet:\n  suspects:\n    sweep_first: false\n")
    assert suspects_for_sweep(load_config(str(cfg), "admin"), notes.append) == [] and len(notes) == 1
