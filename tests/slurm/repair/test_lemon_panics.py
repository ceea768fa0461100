"""Issue 51: a previous boot's kernel panic caused by the hardware is one fault in the node's
lemon history (gpuhc/slurm/repair/lemon_panics.py), counted once, never a drain by itself; three
in 30 days retire the node. The node's kernel log is faked where gpuhc meets the hardware: /dev/kmsg,
the boot id, and pstore's dmesg records (their panic lines are gpud's test inputs, cited in
tests/helpers/panic_lines.py); the health check's flow, its policy, the lemon rule and the
actuator are the real ones, Slurm the MiniSlurm table."""

from __future__ import annotations

import os

from tests.helpers.minislurm import MiniSlurm, config, flow
from tests.helpers.snapshots import context
from tests.helpers.panic_lines import MCE, OOM, WHEN

from gpuhc.checks import kernel_health
from gpuhc.model.snapshot import Snapshot
from gpuhc.run.report import RunReport
from gpuhc.slurm.flows import entry
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.repair.lemon_memory import STATE_KEY
from gpuhc.sources import kernel_log as kl
from gpuhc.state.node import StateStore

DAY = 86400.0


class Node:
    """n1's kernel as gpuhc reads it live, boot after boot: pstore keeps every record it was
    given (``panic``: the record's lines and time) until the test erases it."""

    def __init__(self, tmp_path):
        self.dir, self.boot, self.checks = tmp_path, 0, {}
        (tmp_path / "pstore").mkdir(parents=True)
        (tmp_path / "kmsg").write_text("6,1,5000000,-;Linux version 6.8.0\n")
        (tmp_path / "journalctl").write_text("#!/bin/sh\nexit 1\n")
        (tmp_path / "journalctl").chmod(0o755)

    def panic(self, lines: list[str], when: float) -> None:
        """The kernel panicked at ``when``; pstore keeps the record; the node boots again."""
        f = self.dir / "pstore" / f"dmesg-ramoops-{len(os.listdir(self.dir / 'pstore'))}"
        f.write_text("\n".join(lines) + "\n")
        os.utime(f, (when, when))
        self.reboot()

    def reboot(self) -> None:
        self.boot += 1
        (self.dir / "boot_id").write_text(f"{self.dir.name}-boot-{self.boot}\n")

    def health_check(self, monkeypatch, s: MiniSlurm, now: float, cfg=None):
        """One health-check run: the real kernel-health check on the live read, its state kept."""
        name, f = flow(self.dir, monkeypatch, "passive", s, [], cfg=cfg or config(self.dir), now=now)
        log = kl.LiveKernelLog(kl.KmsgSource(str(self.dir / "kmsg"), boot_id_path=str(self.dir / "boot_id")),
                               pstore_dir=str(self.dir / "pstore"), journalctl=str(self.dir / "journalctl"))
        check = kernel_health.CHECKS[0]

        def run_stage(opts):
            snap = Snapshot(hostname=opts.hostname, time=now)
            snap.kernel = log.read()
            out = check.judge(snap, context(check, prev=self.checks))
            self.checks = out.state
            return RunReport(node=opts.hostname, stage=opts.stage, started=now, duration_s=0.01,
                             results=out.results, snapshot=snap)

        monkeypatch.setattr("gpuhc.run.runner.run_stage", run_stage)
        return entry.healthcheck(f)

    def faults(self) -> list[dict]:
        return StateStore(str(self.dir / "state")).read().get(STATE_KEY, {}).get("faults", [])


def test_a_hardware_panic_counts_once_across_runs_and_boots_and_never_drains(tmp_path, monkeypatch):
    s, node = MiniSlurm({"n1": ("IDLE", None)}), Node(tmp_path)
    node.panic(MCE, WHEN)
    first = node.health_check(monkeypatch, s, WHEN + 600)
    assert [r.evidence for r in first.report.results] == ["panic-hardware"]
    assert any("counted 1 hardware panic of a previous boot as a fault of n1 (1 of 3 in 30d): Kernel panic - "
               "not syncing: Fatal Machine check" in line for line in first.lines), first.lines
    assert node.faults() == [{"time": WHEN, "node": "n1", "check": "panic-hardware", "gpus": [], "hardware": True}]
    for t in (900, 1200):  # later runs of the boot: the panic is read from the cache, not counted again
        later = node.health_check(monkeypatch, s, WHEN + t)
        assert not any("lemon memory" in line for line in later.lines)
    node.reboot()  # a second boot, pstore still holding the record: the WARN again, the count not
    again = node.health_check(monkeypatch, s, WHEN + 3600)
    assert [r.evidence for r in again.report.results] == ["panic-hardware"]
    assert len(node.faults()) == 1 and not any("lemon memory" in line for line in again.lines)
    assert s.nodes["n1"] == ["IDLE", None] and not [c for c in s.calls if c[1] == "update"]  # never a drain


def test_a_software_panic_counts_nothing(tmp_path, monkeypatch):
    s, node = MiniSlurm({"n1": ("IDLE", None)}), Node(tmp_path)
    node.panic(OOM, WHEN)
    out = node.health_check(monkeypatch, s, WHEN + 600)
    assert [(r.status.value, r.evidence) for r in out.report.results] == [("warn", "kernel-health")]
    assert node.faults() == [] and not any("lemon memory" in line for line in out.lines)


def test_three_hardware_panics_in_30_days_retire_the_node_naming_the_panics(tmp_path, monkeypatch):
    s, node = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)}), Node(tmp_path)
    for day in (0, 9):
        node.panic(MCE, WHEN + day * DAY)
        assert node.health_check(monkeypatch, s, WHEN + day * DAY + 600).decision is None  # counted, nothing sent
    assert s.nodes["n1"] == ["IDLE", None] and len(node.faults()) == 2
    node.panic(MCE, WHEN + 18 * DAY)
    third = node.health_check(monkeypatch, s, WHEN + 18 * DAY + 600)
    assert third.acted and third.decision.act is Act.DRAIN
    assert s.nodes["n1"] == ["IDLE+DRAIN", "gpuhc: RETIRED lemon node n1: 3 faults in 30d (panic-hardware); last: "
                                           "panic-hardware node Kernel panic - not syncing: Fatal Machine check"]
    assert third.extra["fault"]["check"] == "panic-hardware" and len(node.faults()) == 3  # the event log's record too
    assert "3 faults (drains, hardware panics) in 30d" in third.decision.why
    assert third.exit_code == third.report.exit_code  # the run itself only warned
    # A panic 31 days after the first: two in the window, no lemon.
    s2, late = MiniSlurm({"n1": ("IDLE", None)}), Node(tmp_path / "late")
    for day in (0, 20, 51):
        late.panic(MCE, WHEN + day * DAY)
        late.health_check(monkeypatch, s2, WHEN + day * DAY + 600)
    assert s2.nodes["n1"] == ["IDLE", None]


def test_observe_mode_says_what_it_would_count_and_keeps_nothing(tmp_path, monkeypatch):
    s, node = MiniSlurm({"n1": ("IDLE", None)}), Node(tmp_path)
    cfg = config(tmp_path, mode="observe")
    node.panic(MCE, WHEN)
    out = node.health_check(monkeypatch, s, WHEN + 600, cfg)
    assert any("lemon memory: observe mode: would count 1 hardware panic" in line for line in out.lines), out.lines
    assert node.faults() == []
    later = node.health_check(monkeypatch, s, WHEN + 900, cfg)  # said once, on the run that reports it
    assert not any("lemon memory" in line for line in later.lines) and node.faults() == []


def test_a_retirement_the_breaker_withholds_is_decided_again_at_the_next_run(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE+DRAIN", "gpuhc: xid79 gpu3 x")})
    node = Node(tmp_path)
    with StateStore(str(tmp_path / "state")).transaction() as doc:  # two hardware drains this month
        doc[STATE_KEY] = {"faults": [{"time": WHEN - d * DAY, "node": "n1", "check": "xid", "gpus": []} for d in (2, 1)]}
    cfg = config(tmp_path, breaker={"max_drained": 1})  # n2 holds the one place
    node.panic(MCE, WHEN)
    held = node.health_check(monkeypatch, s, WHEN + 600, cfg)
    assert held.decision.act is Act.BLOCKED and s.nodes["n1"] == ["IDLE", None] and len(node.faults()) == 2
    s.nodes["n2"] = ["IDLE", None]  # the place is free again
    retired = node.health_check(monkeypatch, s, WHEN + 900, cfg)
    assert retired.acted and s.nodes["n1"][1].startswith("gpuhc: RETIRED lemon node n1: 3 faults in 30d (xid,panic-hardware)")
    assert len(node.faults()) == 3
