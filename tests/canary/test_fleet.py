"""The admin side's state: result files in, known answers elected, standings, overdue GPUs,
the status table and metrics. Records are made by the real node run on the fake GPU."""

from __future__ import annotations

import json

from gpuhc.canary import fleet, node, status, submit
from gpuhc.cli.canary_cmd import STATUS
from gpuhc.canary.settings import SCHEMA
from tests.helpers.canary_fake import worker_argv

SETTINGS = {k: v.default for k, v in SCHEMA.items() if hasattr(v, "default")}
NOW = 1_800_000_000.0
CASES = ["bf16-exact-32", "fp32-random-32"]


def record(name: str, spec: dict, ended: float = NOW, inject=None, known=None) -> dict:
    node.WORKER_ARGV = worker_argv(spec)
    try:
        r = node.run({"cases": CASES, "seed": 1, "repeats": 2, "known": known or {}, "inject": inject}, 30.0, node=name)
    finally:
        node.WORKER_ARGV = None
    doc = json.loads(json.dumps(r.record(), default=str))
    doc["ended"] = ended
    return doc


def test_votes_elect_a_known_answer_only_with_enough_agreeing_gpus():
    doc: dict = {}
    fleet.ingest(doc, record("n1", {"gpus": 1}), SETTINGS, NOW)
    fleet.ingest(doc, record("n2", {"gpus": 1}), SETTINGS, NOW)
    assert fleet.elect(doc, SETTINGS, NOW) == []  # 2 voters < min_voters 3
    fleet.ingest(doc, record("n3", {"gpus": 1, "sick": {"gpu0": {"case": "fp32-random-32", "word": 0, "bit": 3}}}),
                 SETTINGS, NOW)
    fleet.ingest(doc, record("n4", {"gpus": 1}), SETTINGS, NOW)
    lines = fleet.elect(doc, SETTINGS, NOW)
    assert any(line.startswith("known answer learnt for") and "3 of 4 GPUs" in line for line in lines), lines
    # the odd one out is suspect (its lone node could not tell), with the short cadence
    assert doc["gpus"]["n3/gpu0"]["status"] == "suspect"
    assert fleet.period_h(doc["gpus"]["n3/gpu0"], SETTINGS, NOW) == SETTINGS["suspect_period_h"]
    # its next run is judged against the fleet's answer and confirmed
    key = doc["gpus"]["n3/gpu0"]["key"]
    again = record("n3", {"gpus": 1, "sick": {"gpu0": {"case": "fp32-random-32", "word": 0, "bit": 3}}},
                   known={key: doc["known"][key]})
    lines = fleet.ingest(doc, again, SETTINGS, NOW + 60)
    assert doc["gpus"]["n3/gpu0"]["status"] == "failed" and doc["pending"]["n3"]["gpu"] == "gpu0", lines
    assert "fp32 32x32x32" in doc["pending"]["n3"]["finding"]


def test_a_new_driver_is_a_new_key_and_its_answer_is_learnt_again():
    doc: dict = {}
    for n in ("n1", "n2", "n3"):
        fleet.ingest(doc, record(n, {"gpus": 1}), SETTINGS, NOW)
    fleet.elect(doc, SETTINGS, NOW)
    for n in ("n1", "n2", "n3"):
        fleet.ingest(doc, record(n, {"gpus": 1, "driver": 13000}), SETTINGS, NOW)
    lines = fleet.elect(doc, SETTINGS, NOW)
    assert len(doc["known"]) == 2 and any("driver 13000" in line and "learnt" in line for line in lines)


def test_failed_stays_failed_and_is_no_voter_injected_runs_do_not_count():
    doc: dict = {}
    sick = {"gpus": 2, "sick": {"gpu1": {"case": "bf16-exact-32", "word": 1, "bit": 1}}}
    fleet.ingest(doc, record("n1", sick), SETTINGS, NOW)
    assert doc["gpus"]["n1/gpu1"]["status"] == "failed"
    fleet.ingest(doc, record("n1", {"gpus": 2}, NOW + 3600), SETTINGS, NOW + 3600)  # clean later: still failed
    assert doc["gpus"]["n1/gpu1"]["status"] == "failed"
    assert "n1/gpu1" not in json.dumps(doc["votes"])
    before = json.dumps(doc, sort_keys=True)
    lines = fleet.ingest(doc, record("n1", {"gpus": 2}, inject={"subject": "gpu0", "case": "bf16-exact-32", "word": 1,
                                                                  "bit": 1}), SETTINGS, NOW)
    assert json.dumps(doc, sort_keys=True) == before and "not counted" in lines[0]


def test_an_unconfirmed_mismatch_shortens_the_cadence_until_suspect_days_pass():
    doc: dict = {}
    once = {"gpus": 2, "sick": {"gpu1": {"case": "bf16-exact-32", "word": 1, "bit": 1, "mode": "once"}}}
    fleet.ingest(doc, record("n1", once), SETTINGS, NOW)
    e = doc["gpus"]["n1/gpu1"]
    assert e["status"] == "suspect" and len(e["mismatches"]) == 1
    later = NOW + SETTINGS["suspect_days"] * 86400 + 1
    fleet.ingest(doc, record("n1", {"gpus": 2}, later), SETTINGS, later)
    assert e["status"] == "ok" and fleet.period_h(e, SETTINGS, later) == SETTINGS["period_h"]


def test_overdue_gpus_and_never_run_nodes_are_reported():
    doc: dict = {}
    fleet.ingest(doc, record("n1", {"gpus": 2}, NOW - 25 * 3600), SETTINGS, NOW)
    fleet.ingest(doc, record("n2", {"gpus": 1}, NOW - 3600), SETTINGS, NOW)
    submit.plan(doc, {"n1": "idle", "n2": "mixed", "n3": "idle", "n4": "drained"}, set(), SETTINGS, NOW - 30 * 3600)
    rows = fleet.rows(doc, SETTINGS, NOW)
    over = [(r["node"], r["gpu"]) for r in rows if r["overdue"]]
    assert over == [("n1", "gpu0"), ("n1", "gpu1"), ("n3", None)]
    cells = [status.cells(r, NOW) for r in rows]
    text = "\n".join(STATUS.lines(cells, None, False, False))
    assert text.splitlines()[0].split() == ["NODE", "GPU", "STATUS", "AGE", "CADENCE", "DUE", "OVERDUE", "FINDING"]
    assert "n1           gpu0   ok      1d01h" in text and "n3           -      never" in text
    assert STATUS.lines(cells, "node,gpu,overdue", True, True)[0] == "n1|gpu0|OVERDUE"
    from gpuhc.export.prometheus import render

    prom = render(status.samples(rows), status.HELP).decode()
    assert 'gpuhc_canary_overdue{gpu="gpu0",node="n1",uuid="GPU-fake-x-0"} 1.0' in prom
    assert "gpuhc_canary_overdue_gpus 3.0" in prom


def test_plan_picks_due_idle_nodes_most_overdue_first():
    doc: dict = {}
    fleet.ingest(doc, record("n1", {"gpus": 1}, NOW - 30 * 3600), SETTINGS, NOW)
    fleet.ingest(doc, record("n2", {"gpus": 1}, NOW - 26 * 3600), SETTINGS, NOW)
    fleet.ingest(doc, record("n3", {"gpus": 1}, NOW - 3600), SETTINGS, NOW)
    states = {"n1": "idle", "n2": "idle", "n3": "idle", "n4": "idle", "n5": "allocated"}
    assert submit.plan(doc, states, {"n4"}, SETTINGS, NOW) == ["n1", "n2"]


def test_the_job_is_low_priority_preemptable_and_runs_the_canary():
    s = {**SETTINGS, "job": {k: v.default for k, v in SCHEMA["job"].items()}}
    s["job"].update(partition="scavenger", qos="canary")
    argv = submit.sbatch_argv(s, "n7", "gpu", "/shared/canary")
    assert argv[:5] == ["sbatch", "--parsable", "--job-name=gpuhc-canary-n7", "--nodelist=n7", "--nodes=1"]
    assert "--nice=10000" in argv and "--partition=scavenger" in argv and "--qos=canary" in argv and "--time=7" in argv
    script = submit.job_script(s, "n7", "/shared/canary")
    assert "canary run --results-dir /shared/canary --known /shared/canary/known.json" in script
