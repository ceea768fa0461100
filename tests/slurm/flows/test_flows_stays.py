"""Evidence that stays drains at the next job boundary (issue 43), through the real runner and
the health check's flow, on a node that runs a job (Slurm state ALLOCATED or MIXED, the Slurm
side tests/helpers/minislurm.py): the drain is ``State=DRAIN``, which lets the running job
finish, and the reason says how long the evidence held. A single burst that stops never drains.

- NVLink errors growing below the FAIL rate for hours: the fake pynvml at the hardware boundary
  (tests/helpers/fake_pynvml.py), one health check every 5 minutes on a virtual clock, as
  tests/checks/test_nvlink_persistent.py judges the check alone.
- Single IB flaps recurring over a day: examples/scenarios/ib-flaps-recurring.yaml (real mlx5_core
  lines), replayed at the times of its own lines; a burst within one hour, then a quiet day.
"""

from __future__ import annotations

import yaml

from gpuhc.checks.infiniband import RECURRING_FLAPS_CLASS
from gpuhc.checks.nvlink import PERSISTENT_CLASS
from gpuhc.model.result import Status
from gpuhc.run.report import RunOptions
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.slurm.flows import entry
from gpuhc.slurm.flows.frame import Outcome
from gpuhc.sources import SourceSpec
from tests.helpers.fake_pynvml import FakeNvml, live_with
from tests.helpers.minislurm import MiniSlurm, config
from tests.helpers.paths import SCENARIOS

EVERY_S = 300.0  # slurm.conf's HealthCheckInterval in examples/slurm/
T0 = 1_741_082_400.0  # 2025-03-04T10:00:00Z: on an hour, so the clock hours are exact
REPLAY = "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY"
FLAPS = SCENARIOS / "ib-flaps-recurring.yaml"


def health_check(tmp_path, slurm: MiniSlurm, sources: SourceSpec, now: float | None, **opts) -> Outcome:
    o = RunOptions(stage="passive", config=config(tmp_path), sources=sources, state_dir=str(tmp_path / "state"),
                   hostname="n1", now=now, **opts)
    flow = entry.Flow(stage="passive", opts=o, log=entry.Log("gpuhc healthcheck n1", None, False, False),
                      make_scontrol=lambda deadline: Scontrol(run=slurm, deadline=deadline), env={})
    return entry.healthcheck(flow)


def drains(slurm: MiniSlurm) -> list[str]:
    return [u for u in slurm.updates() if "State=DRAIN" in u]


# ---------------------------------------------------------------------------- NVLink


def grow(fake: FakeNvml, link: int, by: int) -> None:
    key = (link, REPLAY)
    fake.gpus[0].per_link_errors[key] = fake.gpus[0].per_link_errors.get(key, fake.gpus[0].link_errors[REPLAY]) + by


def nvlink_checks(tmp_path, slurm, fake, growth: list[int]):
    """One health check per entry of ``growth`` (replays added on gpu0 link 5 before it)."""
    spec = SourceSpec(sysfs_root=str(tmp_path), kernel_log=str(tmp_path / "none.log"))
    out = []
    for i, by in enumerate(growth):
        grow(fake, 5, by)
        out.append(health_check(tmp_path, slurm, spec, T0 + i * EVERY_S, only=("nvlink",)))
    return out


def test_nvlink_errors_growing_below_fail_for_hours_drain_a_busy_node_at_its_next_job_boundary(tmp_path, monkeypatch):
    fake = live_with(monkeypatch)
    s = MiniSlurm({"n1": ("ALLOCATED", None), "n2": ("IDLE", None)})
    # 300 replays per health check: over WARN at each reading of the link, far under FAIL
    outs = nvlink_checks(tmp_path, s, fake, [300] * 40)
    first = next(i for i, o in enumerate(outs) if o.exit_code == 1)
    assert first == 38 and all(o.exit_code == 0 for o in outs[:first]), [o.lines for o in outs[first - 1:first + 1]]
    warned = [i for i, o in enumerate(outs[:first]) if Status.WARN in {r.status for r in o.report.results}]
    assert len(warned) > 10  # it warned at every reading of the link before (one run in three)
    (f,) = [r for r in outs[first].report.results if r.status is Status.FAIL]
    assert f.evidence == PERSISTENT_CLASS
    assert s.nodes["n1"] == ["ALLOCATED+DRAIN", "gpuhc: nvlink gpu0 link 5 replay errors growing 2.8 h "
                             "(WARN in 4 separate hours of the last 6 h, below the FAIL rate)"]
    assert len(drains(s)) == 1  # DRAIN, not DOWN: the job runs to its end, no job is killed
    assert not [u for u in s.updates() if "State=DOWN" in u or "requeue" in u]


def test_a_burst_of_nvlink_errors_that_stops_never_drains(tmp_path, monkeypatch):
    fake = live_with(monkeypatch)
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    outs = nvlink_checks(tmp_path, s, fake, [3000] * 6 + [0] * 90)  # 30 min of growth, then 7.5 quiet hours
    assert any(Status.WARN in {r.status for r in o.report.results} for o in outs[:8])  # it was seen
    assert all(o.exit_code == 0 for o in outs) and s.updates() == []


# ---------------------------------------------------------------------------- InfiniBand


def test_single_ib_flaps_recurring_over_a_day_drain_a_busy_node_with_the_span_in_the_reason(tmp_path):
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    spec = SourceSpec(nvml_scenario=str(FLAPS))
    outs = [health_check(tmp_path, s, spec, None) for _ in range(3)]  # judged at the time of its lines
    assert [o.exit_code for o in outs] == [0, 0, 1], [o.lines for o in outs]
    (f,) = [r for r in outs[-1].report.results if r.status is Status.FAIL]
    assert f.evidence == RECURRING_FLAPS_CLASS and f.subject == "mlx5_1/1"
    state, reason = s.nodes["n1"]
    assert state == "MIXED+DRAIN" and len(drains(s)) == 1
    assert reason.startswith("gpuhc: infiniband mlx5_1/1 ") and "single flaps recurring 7.3 h (down in 3 separate " \
        "hours of the last 24 h)" in reason, reason


def test_a_burst_of_ib_flaps_then_a_quiet_day_never_drains(tmp_path):
    down_up = ["2025-03-04T10:40:10,101010+00:00 mlx5_core 0000:1c:00.0 mlx5_1: Port: 1 Link DOWN",
               "2025-03-04T10:40:13,104220+00:00 mlx5_core 0000:1c:00.0 mlx5_1: Port: 1 Link ACTIVE"]
    quiet = {"ib_ports": [{"device": "mlx5_1", "port": 1, "counters": {"link_downed": 2}}]}
    doc = {"extends": str(FLAPS),  # its first flap, at 10:01, and a second in the same hour
           "steps": [{**quiet, "kernel_log": down_up}] + [quiet] * 24}
    path = tmp_path / "burst.yaml"
    path.write_text(yaml.safe_dump(doc))
    s = MiniSlurm({"n1": ("MIXED", None), "n2": ("IDLE", None)})
    spec = SourceSpec(nvml_scenario=str(path))
    times = [T0 + 5 * 60, T0 + 45 * 60] + [T0 + h * 3600 + 45 * 60 for h in range(1, 25)]  # then hourly for a day
    outs = [health_check(tmp_path, s, spec, t) for t in times]
    assert Status.WARN in {r.status for r in outs[1].report.results}  # the flap was seen
    assert all(o.exit_code == 0 for o in outs) and s.updates() == [], [o.lines for o in outs if o.exit_code]
