"""Evidence buys the act, on replays through the real runner and the health check's flow
(issue 43), one health check every 5 minutes on a virtual clock, the Slurm side
tests/helpers/minislurm.py:

- a healthy busy node with host noise (examples/scenarios/healthy-busy-host-noise.yaml: an NFS
  reader in state D whose CPU time grows, one slow dcgmi, a corrected AER on its NIC, real lines
  cited there) passes or warns for an hour and is never drained, with the shipped config and
  with the remediation ladder on; the recording's processes are what the live reader reads of
  the same processes in a /proc tree (tests/helpers/fake_proc.py);
- a process parked behind a user's FUSE mount for an hour is never drained; one stuck in the
  GPU driver holding a GPU is (drain + reboot); a DCGM silent for an hour is (drain + ticket),
  each with how long it held in the reason;
- an admin's resume forgives the held count: the next silent run warns again, not drains.
"""

from __future__ import annotations

import pytest
import yaml

from gpuhc.checks import host
from gpuhc.model.result import Action, Status
from gpuhc.run.report import RunOptions
from gpuhc.slurm.flows import entry
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sources import SourceSpec
from gpuhc.sources.host import HostLive, settings_for
from gpuhc.sources.scenario import load_scenario
from gpuhc.state.node import StateStore
from tests.helpers.fake_proc import FakeProc
from tests.helpers.minislurm import MiniSlurm, config
from tests.helpers.paths import FIXTURES, SCENARIOS

NIC = "0000:07:00.0"
EVERY_S = 300.0  # slurm.conf's HealthCheckInterval in examples/slurm/
T0 = 1_800_000_000.0


def scenario(tmp_path, dcgm_steps: list[bool]) -> str:
    """healthy-8xh100 with DCGM needed and answering per step, and the NIC's corrected AER."""
    lines = (FIXTURES / "host" / "aer_corrected_nic_alx_endless.log").read_text().splitlines()

    def host(answering: bool) -> dict:
        dcgm = {"expected": True, "running": True, "answering": answering,
                "error": None if answering else "dcgmi discovery -l: no answer within 3s"}
        return {"pci_watch": {NIC: {"role": "nic", "upstream": ["0000:00:1d.0"]}},
                "services": {"persistenced": {"expected": True, "running": True, "answering": True, "error": None},
                             "dcgm": dcgm}}

    doc = {"extends": str(SCENARIOS / "healthy-8xh100.yaml"), "kernel_log": lines, "host": host(dcgm_steps[0])}
    if len(dcgm_steps) > 1:
        doc["steps"] = [{"host": host(a)} for a in dcgm_steps[1:]]
    p = tmp_path / "node.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def health_checks(tmp_path, path: str, n: int, slurm: MiniSlurm, start: int = 0, **settings):
    cfg = config(tmp_path, **settings)
    out = []
    for i in range(start, start + n):
        opts = RunOptions(stage="passive", config=cfg, sources=SourceSpec(nvml_scenario=path),
                          state_dir=str(tmp_path / "state"), hostname="n1", now=T0 + i * EVERY_S)
        flow = entry.Flow(stage="passive", opts=opts, log=entry.Log("gpuhc healthcheck n1", None, False, False),
                          make_scontrol=lambda deadline: Scontrol(run=slurm, deadline=deadline), env={})
        out.append(entry.healthcheck(flow))
    return out


LADDER = {"off": {}, "on": {"remediation": {"enabled": True}}}


BUSY = SCENARIOS / "healthy-busy-host-noise.yaml"
HOUR = 13  # health checks in an hour, the first and the last included


def live_reading(root, dstate: list[dict]) -> list[dict]:
    """What the live host reader reads of these processes, written into a /proc tree under
    ``root`` in the kernel's formats."""
    proc = FakeProc(root)
    for p in dstate:
        proc.process(p["pid"], p["comm"], "D", p["wchan"], p["cpu"], p["switches"], p["start"])
    return HostLive(settings_for({"host": host.CHECKS[0].defaults}), str(root)).read().dstate


def test_the_busy_nodes_recording_is_what_the_live_reader_reads(tmp_path):
    recorded = [load_scenario(str(BUSY), i).host.dstate for i in range(HOUR)]
    assert len({p[0]["cpu"] for p in recorded}) == HOUR  # its CPU time grows at every check
    for i, dstate in enumerate(recorded):
        assert live_reading(tmp_path / str(i), dstate) == dstate


@pytest.mark.parametrize("ladder", LADDER)
def test_a_healthy_busy_node_with_host_noise_is_never_drained(tmp_path, ladder):
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    outs = health_checks(tmp_path, str(BUSY), HOUR, s, **LADDER[ladder])
    assert s.updates() == [] and all(o.exit_code == 0 for o in outs), [o.lines for o in outs]
    statuses = [{r.status for r in o.report.results} for o in outs]
    assert all(Status.FAIL not in st and Status.ERROR not in st for st in statuses)
    first = {(r.check, r.subject): r for r in outs[0].report.results}
    assert first[("services", "dcgm")].status is Status.WARN  # said, not acted on
    assert Status.WARN not in statuses[-1]
    # the NFS reader never counts as stuck, and the NIC's one corrected AER is no finding
    assert not [r for o in outs for r in o.report.results if r.subject == "pid48213" or r.status is Status.WARN
                and r.check == "pcie-aer"]
    assert s.nodes["n1"] == ["MIXED", None]


def stuck_node(tmp_path, pid: int, comm: str, wchan: str, fds: tuple[str, ...]) -> str:
    """healthy-8xh100 whose host reading is what the live reader reads of one process stuck in
    state D with no progress (the same at every run: it never ran in between)."""
    proc = FakeProc(tmp_path / "root")
    proc.process(pid, comm, "D", wchan, cpu=52000, switches=9000, fds=fds)
    reading = HostLive(settings_for({"host": host.CHECKS[0].defaults}), str(tmp_path / "root")).read()
    p = tmp_path / "node.yaml"
    p.write_text(yaml.safe_dump({"extends": str(SCENARIOS / "healthy-8xh100.yaml"), "host": {"dstate": reading.dstate}}))
    return str(p)


def test_a_process_parked_behind_a_users_fuse_mount_for_an_hour_is_never_drained(tmp_path):
    path = stuck_node(tmp_path, 600, "ls", "request_wait_answer", ("/dev/nvidia0",))
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    outs = health_checks(tmp_path, path, HOUR, s)
    assert s.updates() == [] and all(o.exit_code == 0 for o in outs), [o.lines for o in outs]
    (last,) = [r for r in outs[-1].report.results if r.subject == "pid600"]
    assert last.status is Status.WARN and "no progress for 3600s (a mount any user can make: never drained)" in last.message


def test_a_process_stuck_in_the_gpu_driver_holding_a_gpu_for_an_hour_is_drained_for_a_reboot(tmp_path):
    path = stuck_node(tmp_path, 700, "python", "os_acquire_rwlock_write", ("/dev/nvidiactl", "/dev/nvidia2"))
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = health_checks(tmp_path, path, HOUR, s)
    # stuck from the first run: WARN at 5 min (dstate_warn_s), past dstate_fail_s at 10 min, then
    # held 4 runs over 15 min (evidence.host): FAIL at 25 min, and it stays
    assert [o.exit_code for o in outs] == [0] * 5 + [1] * (HOUR - 5), [o.lines for o in outs]
    (r,) = [r for r in outs[-1].report.results if r.subject == "pid700"]
    assert r.status is Status.FAIL and r.action is Action.DRAIN_REBOOT and r.evidence == "stuck-process"
    assert [u for u in s.updates() if "State=DRAIN" in u] and s.nodes["n1"][0] == "IDLE+DRAIN"
    assert "holding a GPU; held 4 runs over 15 min" in s.nodes["n1"][1], s.nodes["n1"]


@pytest.mark.parametrize("ladder", LADDER)
def test_a_dcgm_silent_for_an_hour_of_health_checks_is_drained_saying_how_long(tmp_path, ladder):
    path = scenario(tmp_path, [False])
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = health_checks(tmp_path, path, 13, s, **LADDER[ladder])  # an hour of health checks
    assert [o.exit_code for o in outs[:3]] == [0, 0, 0]  # warned: held 3 runs, but 10 min
    assert all(o.exit_code == 1 for o in outs[3:])  # held 3 runs over 15 min: FAIL, and it stays
    drains = [u for u in s.updates() if "State=DRAIN" in u]
    reason = s.nodes["n1"][1]
    assert reason.startswith("gpuhc: services") and "held 4 runs over 15 min" in reason, reason
    assert len(drains) == 1, s.updates()  # drained once, at the fourth run
    (r,) = [r for r in outs[-1].report.results if r.subject == "dcgm"]
    assert r.action is Action.DRAIN_TICKET  # a restart of the service is the cure, not a reboot


def test_an_admins_resume_forgives_the_held_count(tmp_path):
    """A repaired node is not drained again by evidence from before the repair: after the
    resume, one more silent run warns; only held again over runs does it drain again."""
    path = scenario(tmp_path, [False])
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None)})
    outs = health_checks(tmp_path, path, 4, s)
    assert outs[-1].exit_code == 1 and s.nodes["n1"][0] == "IDLE+DRAIN"
    assert StateStore(str(tmp_path / "state")).read().get("evidence")
    s.nodes["n1"] = ["IDLE", None]  # the admin restarted the host engine and resumed the node
    after = health_checks(tmp_path, path, 4, s, start=4)
    assert any("resumed outside gpuhc" in line for line in after[0].lines), after[0].lines
    assert [o.exit_code for o in after] == [0, 0, 0, 1], [o.lines for o in after]
    (r,) = [r for r in after[0].report.results if r.subject == "dcgm"]
    assert r.status is Status.WARN and "(seen 1 run over 0 s;" in r.message
    assert len([u for u in s.updates() if "State=DRAIN" in u]) == 2  # again only once held again
