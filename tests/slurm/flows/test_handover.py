"""An admin's resume of a node gpuhc drained acknowledges the old kernel-log evidence.

Without it, the next health check would find the same Xid (held for `xid.window_s`) and drain
the node again minutes after the admin fixed it.
"""

from __future__ import annotations

import os
import time

from tests.helpers.minislurm import OK, XID, MiniSlurm, config, flow, run

from gpuhc.run.report import RunOptions, RunReport
from gpuhc.slurm.flows import entry
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sources import SourceSpec
from gpuhc.state.node import StateStore
from tests.helpers.paths import REPO

ROOT = str(REPO)
XID79 = os.path.join(ROOT, "examples", "scenarios", "xid79-fallen-off-bus.yaml")


def real_flow(tmp_path, slurm: MiniSlurm) -> entry.Flow:
    opts = RunOptions(stage="passive", config=config(tmp_path), sources=SourceSpec(nvml_scenario=XID79, step=0),
                      state_dir=str(tmp_path / "state"), hostname="n1")
    return entry.Flow(stage="passive", opts=opts, log=entry.Log("gpuhc healthcheck n1", None, False, False),
                      make_scontrol=lambda deadline: Scontrol(run=slurm, deadline=deadline), env={})


def test_resume_by_admin_acknowledges_and_the_node_stays_in_service(tmp_path):
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    first = entry.healthcheck(real_flow(tmp_path, slurm))
    assert first.decision.act is Act.DRAIN and slurm.nodes["n1"][0] == "IDLE+DRAIN"

    # Still drained by us: the next run keeps it drained and acknowledges nothing.
    again = entry.healthcheck(real_flow(tmp_path, slurm))
    assert again.exit_code == 1 and slurm.nodes["n1"][0] == "IDLE+DRAIN"
    assert StateStore(str(tmp_path / "state")).read()["checks"]["xid"].get("cleared_at") is None

    slurm.nodes["n1"] = ["IDLE", None]  # the admin reset the GPU and resumed the node
    after = entry.healthcheck(real_flow(tmp_path, slurm))
    assert after.exit_code == 0, after.lines
    assert slurm.nodes["n1"] == ["IDLE", None]
    assert any("resumed outside gpuhc" in line for line in after.lines)
    assert StateStore(str(tmp_path / "state")).read()["checks"]["xid"]["cleared_at"] is not None


def test_admin_drain_after_ours_is_not_an_acknowledgement(tmp_path):
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    entry.healthcheck(real_flow(tmp_path, slurm))
    slurm.nodes["n1"] = ["IDLE+DRAIN", "admin: RMA ticket 1234"]
    out = entry.healthcheck(real_flow(tmp_path, slurm))
    assert not any("resumed outside gpuhc" in line for line in out.lines)
    assert slurm.nodes["n1"] == ["IDLE+DRAIN", "admin: RMA ticket 1234"]
    assert StateStore(str(tmp_path / "state")).read()["checks"]["xid"].get("cleared_at") is None


def test_node_not_held_costs_no_query_before_the_checks(tmp_path):
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    flow = real_flow(tmp_path, slurm)
    flow.opts.sources = SourceSpec(nvml_scenario=os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml"))
    out = entry.healthcheck(flow)
    assert out.exit_code == 0 and slurm.calls == []


def test_release_on_the_node_itself_acknowledges_too(tmp_path, monkeypatch):
    """`gpuhc quarantine release` run on the node clears gpuhc's local hold, so the next health
    check could not notice the resume: the release itself must acknowledge the old evidence."""
    from gpuhc.cli.common import node_name
    from gpuhc.slurm.repair.retest import forget_here

    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    entry.healthcheck(real_flow(tmp_path, slurm))  # drained for the Xid, incident held
    cfg = config(tmp_path)
    cfg.data["state_dir"] = str(tmp_path / "state")
    monkeypatch.delenv("GPUHC_STATE_DIR", raising=False)
    forget_here([node_name(None)], node_name(None), cfg)
    doc = StateStore(str(tmp_path / "state")).read()
    assert doc["checks"]["xid"]["cleared_at"] is not None and doc["checks"]["xid"]["held"] == []


# ------------------------------------------------------------------ one query per held run


def _shows(slurm: MiniSlurm) -> list[str]:
    return [MiniSlurm.verb(c) for c in slurm.calls]


def test_held_node_costs_one_show_node_per_run(tmp_path, monkeypatch):
    """The handover read before the checks is the reading the policy decides on: a held node
    that waits (hysteresis) or keeps failing costs Slurm one `show node` per run, not two."""
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    assert run(tmp_path, monkeypatch, "passive", slurm, [OK, XID]).decision.act is Act.DRAIN
    for results, act in (([OK], Act.WAIT), ([OK, XID], Act.KEEP), ([OK], Act.WAIT), ([OK], Act.WAIT)):
        slurm.calls.clear()
        out = run(tmp_path, monkeypatch, "passive", slurm, results)
        assert out.decision.act is act, out.lines
        assert _shows(slurm) == ["show"], slurm.calls
    # Third healthy run in a row: a resume, which re-reads right before sending it, then verifies.
    slurm.calls.clear()
    out = run(tmp_path, monkeypatch, "passive", slurm, [OK])
    assert out.decision.act is Act.RESUME and out.acted
    assert _shows(slurm) == ["show", "show", "resume", "show"]


def test_an_admin_drain_during_the_checks_is_seen_before_acting(tmp_path, monkeypatch):
    """The pre-check reading is not trusted for an act: a resume that became wrong while the
    checks ran (an admin drained the node with their own reason) is not sent."""
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    cfg = config(tmp_path, resume_after=1)
    run(tmp_path, monkeypatch, "passive", slurm, [OK, XID], cfg=cfg)
    _, f = flow(tmp_path, monkeypatch, "passive", slurm, [OK], cfg=cfg)

    def checks_meanwhile_admin_drains(opts):
        slurm.nodes["n1"] = ["IDLE+DRAIN", "admin: RMA ticket 99"]
        return RunReport(node="n1", stage="passive", started=time.time(), duration_s=0.01, results=[OK])

    monkeypatch.setattr("gpuhc.run.runner.run_stage", checks_meanwhile_admin_drains)
    slurm.calls.clear()
    out = entry.healthcheck(f)
    assert out.decision.act is Act.NONE and not out.acted
    assert slurm.nodes["n1"] == ["IDLE+DRAIN", "admin: RMA ticket 99"] and slurm.updates() == []


# ------------------------------------------------------------------ wherever gpuhc sees it first (issue 20)


def test_slurm_24_11_keeps_our_reason_on_a_resume_and_it_is_still_the_acknowledgement(tmp_path):
    """24.11 puts a resumed node back to IDLE with the old reason (docs/slurm.md, "Slurm
    releases"): in service is what counts, not the reason text."""
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    entry.healthcheck(real_flow(tmp_path, slurm))
    reason = slurm.nodes["n1"][1]
    slurm.nodes["n1"] = ["IDLE", reason]  # resumed on 24.11
    after = entry.healthcheck(real_flow(tmp_path, slurm))
    assert after.exit_code == 0 and slurm.nodes["n1"] == ["IDLE", reason], after.lines
    assert any("resumed outside gpuhc" in line for line in after.lines)


def test_slurms_own_return_after_gpuhcs_reboot_is_no_acknowledgement(tmp_path):
    """A node Slurm returned to service after gpuhc's reboot (" : reboot complete") is not an
    admin's word: its boot-time retest decides, and the held Xid still counts."""
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    entry.healthcheck(real_flow(tmp_path, slurm))
    slurm.nodes["n1"] = ["IDLE", slurm.nodes["n1"][1] + " : reboot issued : reboot complete"]
    out = entry.healthcheck(real_flow(tmp_path, slurm))
    assert not any("resumed outside gpuhc" in line for line in out.lines)
    assert StateStore(str(tmp_path / "state")).read()["checks"]["xid"].get("cleared_at") is None


def test_the_epilog_honours_the_resume_and_forgets_the_hold_once(tmp_path):
    """The epilog of a job that ran on the resumed node (no prolog configured) acknowledges, and
    a second epilog asks Slurm nothing: acknowledging again would drop incidents newer than the resume."""
    slurm = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    entry.healthcheck(real_flow(tmp_path, slurm))
    slurm.nodes["n1"] = ["ALLOCATED", None]
    for n in (1, 2):
        flow = real_flow(tmp_path, slurm)
        flow.stage, flow.opts.stage, flow.env = "epilog", "epilog", {"SLURM_JOB_ID": str(n), "SLURM_JOB_GPUS": "3"}
        slurm.calls.clear()
        out = entry.epilog(flow)
        assert out.exit_code == 0 and slurm.nodes["n1"] == ["ALLOCATED", None], out.lines
        # the node, then when slurmctld started (a cold start is no resume: test below); then nothing
        assert len(slurm.calls) == (2 if n == 1 else 0), slurm.calls
        assert any("resumed outside gpuhc" in line for line in out.lines) is (n == 1)


def test_a_flows_slurm_warnings_go_to_its_log(tmp_path):
    """slurmd discards the health check's stderr: a node record skipped while reading Slurm is
    said in the flow's log (syslog and slurm.log_file), escaped, not only on stderr."""
    opts = RunOptions(stage="passive", config=config(tmp_path), sources=SourceSpec(nvml_scenario=XID79, step=0),
                      state_dir=str(tmp_path / "state"), hostname="n1")
    flow = entry.Flow(stage="passive", opts=opts, log=entry.Log("gpuhc healthcheck n1", None, False, False), env={})
    sc = flow.scontrol()
    sc.note("sinfo: skipped a node record that does not read: 'x\x1b[31m'")
    assert [line for line in flow.log.lines if "Slurm output: sinfo: skipped" in line]
    assert not any("\x1b" in line for line in flow.log.lines)


def test_every_check_that_declares_it_is_acknowledged(tmp_path, monkeypatch):
    """Which checks hold kernel-log incidents is the checks' word (Check.acknowledge), not a
    list in slurm/: a new one is acknowledged without an edit here."""
    import gpuhc.checks
    from gpuhc.checks.base import Check, CheckOutput
    from gpuhc.slurm.flows.handover import acknowledge_kernel_log

    real = gpuhc.checks.passive_checks()
    assert sorted(c.id for c in real if c.acknowledge is not None) == ["hung-task", "infiniband", "machine-check",
                                                                     "nic-health", "nvlink", "nvswitch", "pcie-aer", "storage",
                                                                     "xid"]
    newer = Check(id="new-kernel-log", needs=(), judge=lambda snap, ctx: CheckOutput([]),
                  acknowledge=lambda state, now: {**(state or {}), "acked_at": now})
    monkeypatch.setattr(gpuhc.checks, "passive_checks", lambda: [*real, newer])
    state = str(tmp_path / "state")
    with StateStore(state).transaction() as doc:
        doc["checks"] = {"new-kernel-log": {"kept": 1}, "ecc": {"untouched": True}}
    acknowledge_kernel_log(state, 5.0)
    checks = StateStore(state).read()["checks"]
    assert checks["new-kernel-log"] == {"kept": 1, "acked_at": 5.0} and checks["ecc"] == {"untouched": True}
    assert checks["xid"]["cleared_at"] == 5.0 and checks["nvswitch"]["cleared_at"] == 5.0


class RestartedSlurm(MiniSlurm):
    """slurmctld answering ``scontrol show config`` with its BOOT_TIME (as 22.05-26.05 print it)."""

    boot = None

    def __call__(self, argv, timeout):
        if argv[1:3] == ["show", "config"]:
            self.calls.append(argv)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.boot))
            return 0, f"Configuration data as of {stamp}\nAccountingStorageBackupHost = (null)\n" \
                      f"BOOT_TIME               = {stamp}\nBurstBufferType         = (null)\n", ""
        return super().__call__(argv, timeout)


def test_a_slurmctld_cold_start_is_not_an_admins_resume(tmp_path):
    """Issue 30: ``slurmctld -c`` starts from slurm.conf alone, the drain and its reason gone;
    that is no acknowledgement, so the held Xid stands and the node is drained again."""
    slurm = RestartedSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    entry.healthcheck(real_flow(tmp_path, slurm))
    assert slurm.nodes["n1"][0] == "IDLE+DRAIN"
    slurm.boot = time.time() + 5  # slurmctld started after the drain, without its state
    slurm.nodes["n1"] = ["IDLE", None]
    after = entry.healthcheck(real_flow(tmp_path, slurm))
    assert any("cold start" in line for line in after.lines), after.lines
    assert not any("resumed outside gpuhc" in line for line in after.lines)
    assert StateStore(str(tmp_path / "state")).read()["checks"]["xid"].get("cleared_at") is None
    assert after.decision.act is Act.DRAIN and slurm.nodes["n1"][0] == "IDLE+DRAIN", after.lines


def test_a_controller_that_started_before_the_drain_leaves_the_resume_an_acknowledgement(tmp_path):
    slurm = RestartedSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None)})
    slurm.boot = time.time() - 3600
    entry.healthcheck(real_flow(tmp_path, slurm))
    slurm.nodes["n1"] = ["IDLE", None]
    after = entry.healthcheck(real_flow(tmp_path, slurm))
    assert any("resumed outside gpuhc" in line for line in after.lines) and after.exit_code == 0

