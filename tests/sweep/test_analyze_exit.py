"""The exit status of `gpuhc sweep analyze` (docs/sweep.md, "Exit codes"): whether this call found
and acted on a failure, never how far the round has got. One test per state, through the CLI,
with Slurm answered by fakes (squeue lists the running round; scontrol holds the nodes).

The real-Slurm sweep test once failed on a busy machine because a drain made while a follow-up
round was still running exited 0: the same findings gave 1 or 0 depending on the probe jobs' speed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuhc.cli.sweep_cmd import sweep
from gpuhc.errors import EXIT_BREAKER, EXIT_INTERNAL, EXIT_UNHEALTHY
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sweep.analyze import remember_culprits
from gpuhc.sweep.store import SweepStore, write_group_result
from gpuhc.sweep.submit import submit_sweep
from gpuhc.sweep.slurmcli import SlurmCli
from tests.helpers.sweep_apply import EVIDENCE, FakeScontrol, idle
from tests.helpers.sweep_slurm import FakeSlurm, good_result, section

NODES = ("n1", "n2", "n3", "n4", "n5", "n6")


@pytest.fixture
def analyze(tmp_path, monkeypatch):
    """``run(*args, breaker_pct=50, squeue="")`` invokes `gpuhc sweep analyze ARGS --json` with its own
    config and state; sinfo/squeue come from FakeSlurm, scontrol from FakeScontrol (``fake``)."""
    store = SweepStore(str(tmp_path / "state"), str(tmp_path / "results"))
    fake = FakeScontrol(idle(*NODES))
    slurm = FakeSlurm()
    monkeypatch.setattr(SlurmCli, "from_config", classmethod(lambda cls, config: slurm.cli()))
    # fake.answer: the scontrol the CLI builds from the config; a test may wrap it
    fake.answer = fake
    monkeypatch.setattr(Scontrol, "from_section",
                        classmethod(lambda cls, section: Scontrol(run=lambda argv, timeout: fake.answer(argv, timeout))))

    def run(*args, breaker_pct=50.0, squeue=""):
        slurm.squeue = squeue
        cfg = tmp_path / "gpuhc.yaml"
        cfg.write_text(f"state_dir: {tmp_path / 'state'}\nsweep:\n  results_dir: {tmp_path / 'results'}\n"
                       f"slurm:\n  breaker:\n    max_drained_percent: {breaker_pct}\n    settle_s: 0\n")
        res = CliRunner().invoke(sweep, ["analyze", *args, "--json", "--config", str(cfg)], catch_exceptions=False)
        return res.exit_code, (json.loads(res.stdout) if res.stdout.strip() else {})

    return run, store, fake


def store_sweep(store: SweepStore, *, culprit: str | None, running: bool) -> str:
    """A sweep as `submit` makes it (groups n1,n2 and n4,n5, jobs 101 and 102), its round 0 judged
    (naming ``culprit``, if any); with ``running``, a follow-up round 1 whose job is still queued.
    Returns squeue's line for that job."""
    record = store.load_sweep(submit_sweep(section(), store, cli=FakeSlurm().cli(), now=1000.0)["sweep_id"])
    record["rounds"][0]["judged_at"] = 1001.0
    record["findings"] = {"culprits": [{"kind": "node", "nodes": [culprit], "evidence": EVIDENCE, "group": "r0g0001"}]
                          if culprit else [], "suspects": [], "unresolved": []}
    if running:
        follow_up = {**record["rounds"][0]["groups"][1], "id": "r1g0000", "round": 1, "job_id": "201"}
        record["rounds"].append({"round": 1, "groups": [follow_up], "verdicts": {}, "judged_at": None})
    else:
        record["state"] = "done"
    store.save_sweep(record)
    if culprit:
        with store.locked() as index:
            remember_culprits(index, record, 1001.0)
    return f"201|gpuhc-sweep-{record['id']}-r1g0000|RUNNING"


def test_nothing_found_is_0_whether_the_round_runs_or_has_ended(analyze):
    run, store, fake = analyze
    assert run("--apply") == (0, {"lines": ["no sweep to analyze (run `gpuhc sweep submit` first)"]})
    running = store_sweep(store, culprit=None, running=True)
    code, out = run("--apply", squeue=running)
    assert (code, out["state"], out["culprits"], out["applied"]) == (0, "waiting", [], [])
    sid = store.read_index()["current"]
    write_group_result(store.results_dir, sid, "r1g0000", good_result("r1g0000", ["n4", "n5"]))  # it ends, passing
    code, out = run("--apply", "--no-submit")
    assert (code, out["state"], out["culprits"]) == (0, "done", []) and fake.updates == []


def test_a_drain_made_while_a_follow_up_round_runs_is_1(analyze):
    run, store, fake = analyze
    running = store_sweep(store, culprit="n3", running=True)
    code, out = run("--apply", squeue=running)
    assert out["state"] == "waiting" and "1 of 1 jobs still queued or running" in out["lines"][0]
    assert [(a["node"], a["act"]) for a in out["applied"]] == [("n3", "drain")] and fake.nodes["n3"][0] == "IDLE+DRAIN"
    assert code == EXIT_UNHEALTHY, out
    # The next call while the round still runs: the culprit is still named (1), nothing more is done.
    code, out = run("--apply", squeue=running)
    assert (code, out["applied"], [c["nodes"] for c in out["culprits"]]) == (EXIT_UNHEALTHY, [], [["n3"]])


def test_a_drain_made_at_the_end_of_the_sweep_is_1(analyze):
    run, store, fake = analyze
    store_sweep(store, culprit="n3", running=False)
    code, out = run("--apply")
    assert (code, out["state"]) == (EXIT_UNHEALTHY, "done")
    assert [(a["node"], a["act"]) for a in out["applied"]] == [("n3", "drain")]
    assert fake.nodes["n3"][1].startswith("gpuhc: nccl-sweep n3 ")


def test_a_culprit_named_without_apply_is_1_and_changes_nothing(analyze):
    run, store, fake = analyze
    running = store_sweep(store, culprit="n3", running=True)
    code, out = run(squeue=running)
    assert (code, fake.updates) == (EXIT_UNHEALTHY, []) and "applied" not in out


def test_a_drain_the_breaker_refuses_is_4_while_running_and_at_the_end(analyze):
    run, store, fake = analyze
    fake.nodes["n1"] = ["IDLE+DRAIN", "gpuhc: xid79 gpu0", "2026-11-26T10:00:00"]  # 1 of 6 held already
    running = store_sweep(store, culprit="n3", running=True)
    code, out = run("--apply", breaker_pct=10.0, squeue=running)  # cap: 10 % of 6 nodes, rounded up: 1
    assert [(a["node"], a["act"]) for a in out["applied"]] == [("n3", "blocked")] and code == EXIT_BREAKER
    code, out = run("--apply", breaker_pct=10.0)  # the round has ended meanwhile (no results: errors)
    assert [(a["node"], a["act"]) for a in out["applied"]] == [("n3", "blocked")] and code == EXIT_BREAKER
    assert fake.nodes["n3"][0] == "IDLE"


def test_a_drain_slurm_refuses_is_3_and_stays_pending(analyze):
    run, store, fake = analyze

    def refuse(argv, timeout):
        if argv[1] == "update":
            return 1, "", "slurm_update error: Invalid node state specified"
        return fake(argv, timeout)

    fake.answer = refuse
    store_sweep(store, culprit="n3", running=False)
    code, out = run("--apply")
    assert [a["act"] for a in out["applied"]] == ["error"] and code == EXIT_INTERNAL, out
    assert "n3" in store.read_index()["pending_drains"] and fake.nodes["n3"][0] == "IDLE"
