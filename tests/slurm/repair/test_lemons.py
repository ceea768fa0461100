"""Lemon memory: the pure rule (K drains within D days, per node and per GPU wherever it sat),
its history in the state and its rebuild from the event log, and the flows retiring a lemon.

The real-Slurm proof (fails, passes, fails again, retired) is tests/slurm_real/test_repair.py.
"""

from __future__ import annotations

import json
import os

from tests.helpers.minislurm import OK, XID, MiniSlurm, config, flow, run

from gpuhc.export.eventlog import append_event
from gpuhc.model.nvml import GpuReading, NvmlReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.slurm.repair.lemon_memory import STATE_KEY, read_faults
from gpuhc.slurm.repair.lemons import Fault, GpuId, LemonSettings, fault_of, judge, lemon_reason, standings
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.policy.reason import MAX_BYTES, parse_reason
from gpuhc.state.node import StateStore

DAY = 86400.0
S = LemonSettings(True, 3, 30 * DAY)
G7 = GpuId("1652320010007", "GPU-aaaa-7")


def fault(day: float, node: str = "n1", *gpus: GpuId, check: str = "xid") -> Fault:
    return Fault(day * DAY, node, check, tuple(gpus))


def test_k_drains_within_d_days_make_a_lemon_and_the_window_slides():
    history = [fault(0), fault(10)]
    lemon = judge(fault(20), history, S)
    assert lemon is not None and (lemon.kind, lemon.key, len(lemon.faults)) == ("node", "n1", 3)
    # The injected clock: the first drain is 45 days old by the third, outside D.
    assert judge(fault(45), history, S) is None
    near = [s for s in standings([*history, fault(45)], 45 * DAY, S) if s.kind == "node"]
    assert [(s.key, len(s.faults), s.lemon, s.near) for s in near] == [("n1", 1, False, False)]
    assert [(s.near, s.lemon) for s in standings(history, 10 * DAY, S)] == [(True, False)]
    assert judge(fault(20), history, LemonSettings(False, 3, 30 * DAY)) is None


def test_a_gpu_keeps_its_record_on_another_node_and_by_uuid_alone():
    history = [fault(0, "n1", G7), fault(5, "n2", G7)]
    moved = GpuId(None, G7.uuid)  # NVML gave no serial this time: the UUID joins the record
    lemon = judge(fault(6, "n3", moved), history, S)
    assert lemon is not None and (lemon.kind, lemon.key, lemon.nodes) == ("gpu", G7.serial, ["n1", "n2", "n3"])
    reason = lemon_reason(lemon, S, "gpuhc: xid79 gpu3 GPU has fallen off the bus")
    mine = parse_reason(reason)
    assert mine.retired and mine.check == "lemon" and reason.startswith(
        "gpuhc: RETIRED lemon gpu 1652320010007: 3 drains in 30d (xid); last: xid79 gpu3 GPU")
    # the last drain's reason, written by the release before this one, is kept as written
    old = lemon_reason(lemon, S, "gpuhc: xid Xid 79 on gpu3: GPU has fallen off the bus")
    assert old.endswith("(xid); last: xid Xid 79 on gpu3: GPU has fallen off the bus")
    # A drain of another GPU on n3 is no lemon: the GPU's record, not the node's.
    assert judge(fault(6, "n3", GpuId("other", None)), history, S) is None


def test_the_lemon_reason_stays_inside_slurms_255_bytes():
    st = judge(fault(2, "n" * 200, GpuId("s" * 300, None)), [fault(0, "n" * 200), fault(1, "n" * 200)], S)
    reason = lemon_reason(st, S, "gpuhc: " + "x" * 300)
    assert len(reason.encode()) <= MAX_BYTES and parse_reason(reason).retired


def test_fault_records_read_back_are_tolerant_and_bounded():
    assert Fault.from_dict({"time": True, "node": "n1"}) is None
    assert Fault.from_dict({"time": float("nan"), "node": "n1"}) is None
    assert Fault.from_dict({"time": 1.0, "node": ""}) is None
    assert Fault.from_dict(["not", "a", "dict"]) is None
    f = Fault.from_dict({"time": 1, "node": "n" * 5000, "check": 7,
                         "gpus": [{"serial": "s" * 5000}, {"uuid": 3}, "junk"] + [{"uuid": "u"}] * 5000})
    assert len(f.node) == 256 and f.check == "?" and len(f.gpus) == 1024 and len(f.gpus[0].serial) == 256


def test_the_fault_names_the_failing_gpus_by_serial_and_uuid():
    gpus = [GpuReading(index=i, name="H100", uuid=f"GPU-{i}", pci_bus_id=f"0000:{i:02x}:00.0", serial=f"S{i}")
            for i in range(4)]
    snap = Snapshot(hostname="n1", time=0.0, nvml=NvmlReading(available=True, gpus=gpus))
    results = [Result("pcie", Status.FAIL, "gpu3 PCIe link x8", "gpu3"), Result("ecc", Status.PASS, "ok", "gpu1"),
               Result("nvlink", Status.FAIL, "link 2 down", "gpu2/nvlink2")]
    f = fault_of(results, snap, "n1", "gpuhc: pcie gpu3 PCIe link x8", 5.0)
    assert (f.check, f.gpus) == ("pcie", (GpuId("S2", "GPU-2"), GpuId("S3", "GPU-3")))


def lemon_config(tmp_path, **lemon):
    return config(tmp_path, lemon={"faults": 2, **lemon}, cooldown_s=0, resume_after=1)


def drain_resume_drain(tmp_path, monkeypatch, cfg, between=None):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    first = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
    assert first.decision.act is Act.DRAIN and s.nodes["n1"][1].startswith("gpuhc: xid")
    assert run(tmp_path, monkeypatch, "passive", s, [OK], cfg=cfg).decision.act is Act.RESUME
    if between:
        between(first)
    return s, run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)


def test_a_node_drained_again_after_passing_is_retired_as_a_lemon(tmp_path, monkeypatch):
    s, again = drain_resume_drain(tmp_path, monkeypatch, lemon_config(tmp_path))
    assert again.decision.act is Act.DRAIN and again.acted
    assert s.nodes["n1"] == ["IDLE+DRAIN", "gpuhc: RETIRED lemon node n1: 2 drains in 30d (xid); last: xid79 gpu3 "
                                           "GPU has fallen off the bus"]
    assert "lemon: node n1 drained 2 times in 30d" in again.decision.why
    assert len(StateStore(str(tmp_path / "state")).read()[STATE_KEY]["faults"]) == 2
    # Retired: a passing run keeps it out.
    assert run(tmp_path, monkeypatch, "passive", s, [OK], cfg=lemon_config(tmp_path)).decision.act is Act.KEEP


def test_the_history_is_rebuilt_from_the_event_log_when_the_state_is_lost(tmp_path, monkeypatch):
    from gpuhc.slurm.flows.frame import RunRecord

    log = tmp_path / "events.jsonl"
    cfg = lemon_config(tmp_path)
    cfg.data["output"]["event_log"] = str(log)

    def lose_state(first):
        assert append_event(str(log), RunRecord(first).to_dict()) is None  # what the CLI writes after the run
        doc = json.loads(log.read_text())
        assert doc["slurm"]["fault"]["node"] == "n1" and doc["slurm"]["acted"] is True
        os.unlink(tmp_path / "state" / "state.json")

    s, again = drain_resume_drain(tmp_path, monkeypatch, cfg, lose_state)
    assert s.nodes["n1"][1].startswith("gpuhc: RETIRED lemon node n1: 2 drains")
    assert any("rebuilt 1 drain from the event log" in line for line in again.lines)


def test_without_history_one_drain_is_no_lemon_and_off_means_off(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    out = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=lemon_config(tmp_path))
    assert s.nodes["n1"][1].startswith("gpuhc: xid") and out.extra["fault"]["check"] == "xid"
    s2, again = drain_resume_drain(tmp_path / "off", monkeypatch, lemon_config(tmp_path / "off", enabled=False))
    assert s2.nodes["n1"][1].startswith("gpuhc: xid") and "fault" not in again.extra


def test_withheld_and_observed_drains_are_no_faults(tmp_path):
    log = tmp_path / "events.jsonl"
    rec = {"time": 1.0, "node": "n1", "check": "xid", "gpus": []}
    for acted in (True, False):
        append_event(str(log), {"node": "n1", "started": 1.0, "slurm": {"acted": acted, "fault": rec}})
    log.open("a").write("not json \"fault\":{\n")
    problems: list[str] = []
    assert [f.node for f in read_faults([str(log)], 0.0, problems)] == ["n1"]
    assert problems == [f"{log}: a line that is not a gpuhc event was skipped"]


def test_an_event_log_that_is_a_link_or_a_fifo_is_refused_and_said(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text('{"slurm":{"acted":true,"fault":{"time":1,"node":"x"}}}\n')
    link = tmp_path / "events.jsonl"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    problems: list[str] = []
    assert read_faults([str(link), str(fifo), str(tmp_path / "missing.jsonl")], 0.0, problems) == []
    assert len(problems) == 3 and all("event log" in p for p in problems[:2]), problems


def test_a_held_node_failing_again_reads_no_history(tmp_path, monkeypatch):
    """Only a drain reads the history: a node gpuhc holds fails every few minutes (KEEP), and
    those runs must not scan event logs."""
    cfg = lemon_config(tmp_path)
    os.mkfifo(tmp_path / "events.jsonl")  # reading it would be refused, and said
    cfg.data["output"]["event_log"] = str(tmp_path / "events.jsonl")
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    first = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
    assert any("lemon memory: event log" in line for line in first.lines), first.lines
    os.unlink(tmp_path / "state" / "state.json")
    keep = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
    assert keep.decision.act is Act.KEEP and not any("lemon memory" in line for line in keep.lines), keep.lines


def test_fleet_lemons_lists_lemons_and_near_lemons_with_their_drains(tmp_path):
    import time

    from gpuhc.config.load import Config, defaults, schema
    from gpuhc.fleet.lemons import gather, table

    log = tmp_path / "events.jsonl"
    now = time.time()
    for node, gpu, age_days in (("n1\x1b[2J", G7, 3), ("n2", G7, 2), ("n2", None, 1), ("n3", None, 40)):
        rec = Fault(now - age_days * DAY, node, "xid", (gpu,) if gpu else ()).to_dict()
        append_event(str(log), {"node": node, "started": rec["time"], "slurm": {"acted": True, "fault": rec}})
    rows, settings, notes, _ = gather(Config(defaults(schema())), [str(log)], now)
    got = [(s.kind, s.key, len(s.faults), s.lemon, s.near) for s in rows]
    assert got == [("node", "n2", 2, False, True), ("gpu", G7.serial, 2, False, True)] and notes == []
    text = "\n".join(table(rows, settings))
    assert "\x1b" not in text and "n1\\x1b" in text and "near" in text
    assert [s.key for s in gather(Config(defaults(schema())), [str(log)], now, show_all=True)[0]] == [
        "n2", G7.serial, "n1\x1b[2J"]


def test_stray_processes_never_make_a_lemon():
    """A process left on a GPU is a job's leftover, not the hardware's: the month-long campaign
    (docs/campaign.md) retired a healthy node that kept being handed stray processes. Such
    drains are not counted; a hardware drain among them still is."""
    strays = [fault(0, check="occupancy"), fault(1, check="occupancy")]
    assert judge(fault(2, check="occupancy"), strays, S) is None
    assert judge(fault(2), strays, S) is None  # one hardware drain: no lemon
    assert judge(fault(3), [*strays, fault(2), fault(2.5)], S) is not None  # three hardware drains
    assert [s.key for s in standings(strays, 2 * DAY, S)] == []


def test_only_hardware_evidence_makes_a_lemon():
    """issue 43, from gpuhc/catalog/evidence.py's table: a GPU, NVLink, PCIe fatal, uncorrected memory
    count; a service, a mount, the host's CPUs or DIMMs at boot, a wedged NVML never do."""
    def drained(results, day):
        return fault_of(results, Snapshot(hostname="n1", time=0.0), "n1", f"gpuhc: {results[0].check} x", day * DAY)

    def fail(check, evidence=None):
        return Result(check, Status.FAIL, "x", "node", action=Action.DRAIN_REBOOT, evidence=evidence)

    host = [drained([fail("services")], 0), drained([fail("host", "mount")], 1), drained([fail("nvml")], 2)]
    assert [f.hardware for f in host] == [False, False, False]
    assert judge(drained([fail("services")], 3), host, S) is None
    assert standings(host, 3 * DAY, S) == []
    hw = [drained([fail("xid")], 0), drained([fail("pcie-aer")], 1), drained([fail("machine-check")], 2)]
    assert [f.hardware for f in hw] == [True, True, True]
    assert judge(drained([fail("ecc")], 3), hw, S) is not None
    # a drain whose results hold hardware evidence beside a service's counts; a corrected-AER rate does not
    assert drained([fail("services"), fail("nvlink")], 0).hardware is True
    assert drained([fail("pcie-aer", "aer-corrected")], 0).hardware is False
    # records written before the table was kept are judged by their check's class
    assert Fault.from_dict({"time": 1.0, "node": "n1", "check": "services"}).counts is False
    assert Fault.from_dict({"time": 1.0, "node": "n1", "check": "xid"}).counts is True
    assert Fault.from_dict(drained([fail("services")], 0).to_dict()).hardware is False


def test_forged_lemon_lines_are_refused_or_count_for_their_own_node_only(tmp_path):
    """Issue 29: slurm.lemon.event_logs naming a glob users can write: two forged lines naming
    any node made that node's first real drain a retirement. A log users can write is refused
    and said; a root's log speaks only for the node its first event names."""
    shared = tmp_path / "shared"
    shared.mkdir()
    rec = {"time": 100.0, "node": "n5", "check": "xid", "gpus": []}
    forged = shared / "mine.jsonl"
    for t in (100.0, 200.0):
        append_event(str(forged), {"node": "n5", "started": t, "slurm": {"acted": True, "fault": dict(rec, time=t)}})
    problems: list[str] = []
    if os.geteuid() == 0:
        os.chown(forged, 1000, 1000)
        assert read_faults([str(shared / "*.jsonl")], 0.0, problems) == []
        assert len(problems) == 1 and "owned by uid 1000, not root" in problems[0]
        os.chown(forged, 0, 0)
    # a root-owned log of n1 that carries lines naming n5: they count for nobody
    n1 = shared / "n1.jsonl"
    append_event(str(n1), {"node": "n1", "started": 50.0, "slurm": {"acted": True, "fault": dict(rec, node="n1", time=50.0)}})
    append_event(str(n1), {"node": "n5", "started": 60.0, "slurm": {"acted": True, "fault": dict(rec, time=60.0)}})
    append_event(str(n1), {"node": "n1", "started": 70.0, "slurm": {"acted": True, "fault": dict(rec, time=70.0)}})
    problems = []
    got = read_faults([str(n1)], 0.0, problems)
    assert [(f.node, f.time) for f in got] == [("n1", 50.0)]
    assert problems == [f"{n1}: 2 fault line(s) for another node than the log's own (n1) skipped"]


# ---------------------------------------------------------------- a person's word, test mode (issue 30)


def test_an_admins_resume_restarts_the_history(tmp_path, monkeypatch):
    """Drained, resumed by an admin (``quarantine release`` is one), drained again: not a lemon.
    gpuhc's own resume (the hysteresis above) leaves the history standing."""
    cfg = lemon_config(tmp_path)
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    assert run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg).decision.act is Act.DRAIN
    s.nodes["n1"] = ["IDLE", None]  # the admin mended it and resumed it
    seen = run(tmp_path, monkeypatch, "passive", s, [OK], cfg=cfg)
    assert any("resumed outside gpuhc" in line for line in seen.lines)
    again = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
    assert again.acted and s.nodes["n1"][1].startswith("gpuhc: xid"), s.nodes  # drained, not retired


def test_quarantine_forget_restarts_the_history_and_says_who(tmp_path, monkeypatch):
    import yaml
    from click.testing import CliRunner

    from gpuhc.cli.quarantine_cmd import quarantine

    cfg_path = tmp_path / "gpuhc.yaml"
    cfg_path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "slurm": {
        "syslog": False, "log_file": str(tmp_path / "decisions.log")}}))
    with StateStore(str(tmp_path / "state")).transaction() as doc:
        doc[STATE_KEY] = {"faults": [fault(1.0).to_dict(), fault(2.0).to_dict()]}
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    r = CliRunner().invoke(quarantine, ["forget", "n1", "--config", str(cfg_path)])
    assert r.exit_code == 0, r.output
    rec = StateStore(str(tmp_path / "state")).read()[STATE_KEY]
    assert rec["cleared_at"] > 2 * DAY and len(rec["faults"]) == 2  # kept for the record, no longer counted
    assert "history of n1 forgotten by " in (tmp_path / "decisions.log").read_text()
    r = CliRunner().invoke(quarantine, ["forget", "n7", "--config", str(cfg_path)])
    assert r.exit_code == 2 and "clush -w n7" in r.output


def test_cleared_and_replaced_history_does_not_count():
    old = [fault(1.0, "n1", G7), fault(2.0, "n1", G7)]
    new = fault(3.0, "n1", GpuId("1652320010099", "GPU-bbbb-9"))
    assert judge(new, old, S) is not None  # three drains of n1 in 30 days
    assert judge(new, old, S, cleared_at=2.5 * DAY) is None  # a person's word at day 2.5
    assert judge(new, old, S, present=frozenset({"1652320010099"})) is None  # G7 was replaced
    assert judge(new, old, S, present=frozenset({G7.serial, "1652320010099"})) is not None


def test_test_mode_runs_and_in_job_findings_never_make_a_lemon(tmp_path, monkeypatch):
    from gpuhc.slurm.flows import entry
    from gpuhc.sources import SourceSpec

    cfg = lemon_config(tmp_path)
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    for _ in range(3):  # three test-mode replays (gpuhc/sources/testmode.py), each drained
        _, f = flow(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
        f.opts.sources = SourceSpec(test_scenario=str(tmp_path / "replay.yaml"))
        out = entry.healthcheck(f)
        assert out.acted and "fault" not in out.extra and s.nodes["n1"][1].startswith("gpuhc: xid"), s.nodes
        s.nodes["n1"] = ["IDLE", None]
    assert not StateStore(str(tmp_path / "state")).read().get(STATE_KEY, {}).get("faults")
    # An in-job finding (the jobs check: a hung or slowed job) is the job's, never the node's.
    assert judge(fault(3.0, check="jobs"), [fault(1.0), fault(2.0)], S) is None


def test_an_admins_resume_of_a_retired_lemon_quotes_the_retired_reason(tmp_path, monkeypatch):
    """The message after a resume names the reason the node carried (RETIRED lemon ...), not
    the drain reason that the retirement replaced."""
    s, again = drain_resume_drain(tmp_path, monkeypatch, lemon_config(tmp_path))
    assert again.decision.memory.reason.startswith("gpuhc: RETIRED lemon node n1")
    s.nodes["n1"] = ["IDLE", None]  # an admin's resume (22.05 and 26.05 clear the reason)
    after = run(tmp_path, monkeypatch, "passive", s, [OK], cfg=lemon_config(tmp_path))
    said = [line for line in after.lines if "was resumed outside gpuhc" in line]
    assert said and "(gpuhc: RETIRED lemon node n1" in said[0], after.lines


def test_observe_mode_rebuilds_the_history_once_not_at_every_run(tmp_path, monkeypatch):
    """In observe mode no drain is ever verified, so nothing stored the history: it was rebuilt
    (and said) at every failing run, 15 times in 7 minutes on one node. Rebuilt once, it is kept."""
    from gpuhc.slurm.flows.frame import RunRecord

    log = tmp_path / "events.jsonl"
    cfg = lemon_config(tmp_path)
    cfg.data["output"]["event_log"] = str(log)
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    first = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
    assert append_event(str(log), RunRecord(first).to_dict()) is None
    assert run(tmp_path, monkeypatch, "passive", s, [OK], cfg=cfg).decision.act is Act.RESUME
    os.unlink(tmp_path / "state" / "state.json")  # the state lost, and the site switched to observing
    cfg.data["slurm"]["mode"] = "observe"
    said = []
    for _ in range(3):
        out = run(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
        assert out.extra["observed"] == "retire" or out.decision.act is Act.DRAIN
        said += [line for line in out.lines if "rebuilt 1 drain from the event log" in line]
    assert len(said) == 1, said
