"""`gpuhc sweep analyze --apply` against a fake scontrol: drains held back by the circuit
breaker stay pending (and are retried after the next sweep starts), the quarantine cycle goes up
with every sweep drain until RETIRED, the post-drain recount undoes a drain past the cap, and
results made with the test-only fault hook never drain without the explicit test flag."""

from __future__ import annotations

from click.testing import CliRunner

from gpuhc.text.schema import defaults
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sweep.analyze import analyze_sweep, apply_culprits, apply_pending, drain_reason, remember_culprits
from gpuhc.sweep.settings import SCHEMA
from gpuhc.sweep.store import SweepStore
from tests.helpers.sweep_apply import Config, FakeScontrol, idle, record, SLURM
from tests.helpers.sweep_apply import EVIDENCE


def test_a_drain_the_breaker_withholds_stays_pending_and_is_done_after_the_next_sweep_starts(tmp_path):
    store = SweepStore(str(tmp_path))
    fake = FakeScontrol({**idle("n2", "n3", "n4"), "n1": ("IDLE+DRAIN", "gpuhc: xid79 gpu0")})
    tight = {**SLURM, "breaker": {"max_drained_percent": 25.0, "settle_s": 0.0}}  # 1 of 4 held: open
    index: dict = {}
    first = record("s1", "n3")
    store.save_sweep(first)
    remember_culprits(index, first, 10.0)
    lines: list[str] = []
    done = apply_pending(index, first, store, Config(tight), Scontrol(run=fake), 10.0, lines)
    assert [(d["node"], d["act"]) for d in done] == [("n3", "blocked")] and fake.updates == []
    assert "circuit breaker open" in lines[-1] and "n3" in index["pending_drains"]
    # A new sweep is current now; the admin released n1, so the breaker closed.
    fake.nodes["n1"] = ["IDLE", None, "2026-11-26T10:00:00"]
    second = record("s2")
    done = apply_pending(index, second, store, Config(tight), Scontrol(run=fake), 20.0, lines)
    assert [(d["node"], d["act"], d["sweep"]) for d in done] == [("n3", "drain", "s1")]
    assert fake.nodes["n3"][1] == drain_reason("n3", EVIDENCE, "s1", cycle=1)
    assert index["pending_drains"] == {} and index["nodes"]["n3"]["sweep_cycle"] == 1
    assert store.load_sweep("s1")["applied"]["n3"]["act"] == "drain"  # shown by `report --sweep-id s1`


def test_every_sweep_drain_moves_the_node_up_a_quarantine_cycle_until_retired():
    fake = FakeScontrol(idle("n1", "n2", "n3", "n4"))
    index: dict = {"nodes": {}}
    reasons = []
    for i in range(3):
        rec = record(f"s{i}", "n3")
        remember_culprits(index, rec, float(i))
        done = apply_pending(index, rec, None, Config(SLURM), Scontrol(run=fake), float(i), [])
        assert done[0]["act"] == "drain" and done[0]["verified"]
        reasons.append(fake.nodes["n3"][1])
        fake.nodes["n3"] = ["IDLE", None, "2026-11-26T12:00:00"]  # `gpuhc quarantine retest` resumed it
    assert reasons[0].endswith("(sweep s0) [q1]") and reasons[1].endswith("(sweep s1) [q2]")
    # slurm.quarantine.max_cycles 3: the third sweep drain retires it, like a third failed retest.
    assert reasons[2].startswith("gpuhc: RETIRED nccl-sweep n3 ") and "[q" not in reasons[2]
    from gpuhc.slurm.policy.reason import parse_reason

    assert [parse_reason(r).cycle for r in reasons[:2]] == [1, 2] and parse_reason(reasons[2]).retired


def test_concurrent_drains_past_the_cap_undo_this_one_and_keep_it_pending():
    """Counted before the drain: 0 held, cap 1 of 4. Meanwhile a health check drained n1 (earlier
    reason time): 2 held > cap, and n3 ranks last, so its drain is undone, as in entry.py."""
    def health_check_drains_n1(fake, name):
        if name == "n3":
            fake.nodes["n1"] = ["IDLE+DRAIN", "gpuhc: xid79 gpu0", "2026-11-26T10:30:00"]

    fake = FakeScontrol(idle("n1", "n2", "n3", "n4"), on_drain=health_check_drains_n1)
    cap1 = {**SLURM, "breaker": {"max_drained": 1, "max_drained_percent": None, "settle_s": 0.0}}
    index: dict = {}
    rec = record("s1", "n3")
    remember_culprits(index, rec, 1.0)
    done = apply_pending(index, rec, None, Config(cap1), Scontrol(run=fake), 1.0, [])
    assert done[0]["act"] == "blocked" and "drain undone" in done[0]["why"] and "cap 1" in done[0]["breaker"]
    assert [u[3] for u in fake.updates] == ["State=DRAIN", "State=RESUME"] and fake.nodes["n3"][0] == "IDLE"
    assert "n3" in index["pending_drains"] and "sweep_cycle" not in index.get("nodes", {}).get("n3", {})


def test_fault_hook_results_never_drain_without_the_test_flag():
    fake = FakeScontrol(idle("n1", "n2", "n3", "n4"))
    rec = record("s1", "n3", fault_hook=True)
    lines: list[str] = []
    done = apply_culprits(rec, Config(SLURM), Scontrol(run=fake), 1.0, lines)
    assert done[0]["act"] == "refused" and fake.updates == [] and "test-only fault hook" in lines[-1]
    done = apply_culprits(rec, Config(SLURM), Scontrol(run=fake), 2.0, [], allow_fault_hook=True)
    assert done[0]["act"] == "drain" and fake.nodes["n3"][0] == "IDLE+DRAIN"


def test_a_pending_fault_hook_drain_is_forgotten_once_its_sweep_is_over():
    index: dict = {}
    remember_culprits(index, record("s1", "n3", fault_hook=True), 1.0)
    assert apply_pending(index, record("s2"), None, Config(SLURM), Scontrol(run=FakeScontrol(idle("n3"))), 2.0, []) == []
    assert index["pending_drains"] == {}


def test_analyze_exits_4_when_the_breaker_withheld_a_drain(monkeypatch, tmp_path):
    import gpuhc.sweep.analyze as analyze

    canned = {"lines": ["n3: blocked: circuit breaker open"], "culprits": [{"kind": "node", "nodes": ["n3"]}],
              "applied": [{"node": "n3", "act": "blocked"}]}
    monkeypatch.setattr(analyze, "analyze_sweep", lambda *a, **k: canned)
    from gpuhc.cli.sweep_cmd import sweep

    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("sweep: {}\n")
    res = CliRunner().invoke(sweep, ["analyze", "--apply", "--state-dir", str(tmp_path), "--config", str(cfg)])
    assert res.exit_code == 4, res.output
    canned["applied"] = [{"node": "n3", "act": "drain"}]
    res = CliRunner().invoke(sweep, ["analyze", "--apply", "--state-dir", str(tmp_path), "--config", str(cfg)])
    assert res.exit_code == 1, res.output


def test_analyze_apply_retries_pending_drains_while_the_current_round_still_runs(tmp_path):
    """The drain held back in sweep s1 is done by the next `analyze --apply`, even though the
    current sweep s2 is still waiting for its jobs."""
    from gpuhc.sweep.slurmcli import SlurmCli

    store = SweepStore(str(tmp_path))
    store.save_sweep(record("s1", "n3"))
    s2 = record("s2")
    s2["state"] = "running"
    s2["rounds"] = [{"round": 0, "groups": [{"id": "r0g0000", "nodes": ["n1", "n2"], "job_id": "77"}],
                     "verdicts": {}, "judged_at": None}]
    store.save_sweep(s2)
    with store.locked() as index:
        index["current"] = "s2"
        remember_culprits(index, store.load_sweep("s1"), 5.0)

    def squeue(argv, timeout):
        assert argv[0] == "squeue", argv
        return 0, "77|RUNNING|gpuhc-sweep-s2-r0g0000\n", ""

    fake = FakeScontrol(idle("n1", "n2", "n3", "n4"))
    out = analyze_sweep(defaults(SCHEMA), store, apply=True, config=Config(SLURM), cli=SlurmCli(run=squeue),
                        scontrol=Scontrol(run=fake), now=10.0)
    assert out["state"] == "waiting" and [(a["node"], a["act"]) for a in out["applied"]] == [("n3", "drain")]
    assert store.read_index()["pending_drains"] == {} and store.load_sweep("s1")["applied"]["n3"]["act"] == "drain"


def test_a_node_that_passes_a_later_probe_loses_its_pending_drain():
    from gpuhc.sweep.analyze import drop_cleared
    from gpuhc.sweep.judge import Verdict

    index = {"pending_drains": {"n3": {"sweep": "s1", "evidence": EVIDENCE, "group": "r1g0", "since": 1.0}}}
    rec = {"id": "s2", "rounds": [{"round": 0, "groups": [{"id": "r0g0000", "nodes": ["n3", "n4"]}]}]}
    lines = drop_cleared(index, rec, {"r0g0000": Verdict("pass")})
    assert index["pending_drains"] == {} and "passed r0g0000 in sweep s2" in lines[0]
