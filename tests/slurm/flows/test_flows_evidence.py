"""Evidence buys the act, on replays through the real runner and the health check's flow
(issue 43): a healthy busy node whose host section shows a slow DCGM probe once and whose
kernel log has a corrected AER on its NIC passes or warns and is never drained, with the
shipped config and with the remediation ladder on; a DCGM that stays silent for an hour of
health checks is drained, with how long it held in the reason. The Slurm side is
tests/helpers/minislurm.py; the node is a scenario (examples/scenarios/healthy-8xh100.yaml with
a host section), its NIC's AER line a real one (tests/fixtures/host/README.md)."""

from __future__ import annotations

import pytest
import yaml

from gpuhc.model.result import Status
from gpuhc.runreport import RunOptions
from gpuhc.slurm.flows import entry
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sources import SourceSpec
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


def health_checks(tmp_path, path: str, n: int, slurm: MiniSlurm, **settings):
    cfg = config(tmp_path, **settings)
    out = []
    for i in range(n):
        opts = RunOptions(stage="passive", config=cfg, sources=SourceSpec(nvml_scenario=path),
                          state_dir=str(tmp_path / "state"), hostname="n1", now=T0 + i * EVERY_S)
        flow = entry.Flow(stage="passive", opts=opts, log=entry.Log("gpuhc healthcheck n1", None, False, False),
                          make_scontrol=lambda deadline: Scontrol(run=slurm, deadline=deadline), env={})
        out.append(entry.healthcheck(flow))
    return out


LADDER = {"off": {}, "on": {"remediation": {"enabled": True}}}


@pytest.mark.parametrize("ladder", LADDER)
def test_a_healthy_busy_node_with_host_noise_is_never_drained(tmp_path, ladder):
    path = scenario(tmp_path, [False] + [True] * 5)  # one slow dcgmi, then it answers
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    outs = health_checks(tmp_path, path, 6, s, **LADDER[ladder])
    assert s.updates() == [] and all(o.exit_code == 0 for o in outs), [o.lines for o in outs]
    statuses = [{r.status for r in o.report.results} for o in outs]
    assert all(Status.FAIL not in st and Status.ERROR not in st for st in statuses)
    first = {(r.check, r.subject): r for r in outs[0].report.results}
    assert first[("services", "dcgm")].status is Status.WARN  # said, not acted on


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
