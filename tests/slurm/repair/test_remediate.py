"""The ladder's node side: the command runner of the reset procedure (a real subprocess standing
in for `nvidia-smi -r`) and which finding drives the ladder."""

from __future__ import annotations

import os
import sys

import pytest

from gpuhc.model.result import Action, Result, Status
from gpuhc.slurm.repair.gpureset import run_argv
from gpuhc.slurm.repair.remediate import finding_of, owner_of
from tests.helpers.paths import REPO
from tests.helpers.unprivileged import make_user, namesake


def script(tmp_path, body: str):
    p = tmp_path / "reset"
    p.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    p.chmod(0o755)
    return str(p)


def test_the_argv_runs_without_a_shell(tmp_path):
    rec = tmp_path / "calls"
    s = script(tmp_path, f"open({str(rec)!r}, 'a').write(repr(sys.argv[1:]) + '\\n')")
    r = run_argv([s, "-r", "-i", "1", "$(touch x); rm"], 5)
    assert r.ok and r.detail.endswith(": ok")
    assert rec.read_text().splitlines() == [repr(["-r", "-i", "1", "$(touch x); rm"])]
    assert not (tmp_path / "x").exists()


def test_a_failure_quotes_its_output_escaped(tmp_path):
    s = script(tmp_path, "print('GPU 00000000:18:00.0 is currently in use by another process.\\x1b[2J'); sys.exit(255)")
    r = run_argv([s, "-r", "-i", "2"], 5)
    assert not r.ok and "exit 255" in r.detail and "in use by another process" in r.detail
    assert "\x1b" not in r.detail  # escaped for the log


def test_a_hanging_command_is_stopped_at_its_timeout(tmp_path):
    s = script(tmp_path, "time.sleep(60)")
    r = run_argv([s], 1.0)
    assert not r.ok and "timed out after 1s" in r.detail  # a run that waited the sleep out would exit 0


def test_a_missing_command_is_a_failed_step(tmp_path):
    r = run_argv([str(tmp_path / "no-such-nvidia-smi"), "-r"], 5)
    assert not r.ok and "no-such-nvidia-smi" in r.detail


def fail(check, subject, action):
    return Result(check, Status.FAIL, f"{check} on {subject}", subject, action=action)


def test_the_finding_is_the_worst_failure_with_its_gpus():
    results = [fail("ecc", "gpu1", Action.RESET_GPU), fail("ecc", "gpu4", Action.RESET_GPU),
               Result("xid", Status.PASS, "ok", "gpu2")]
    f = finding_of(results)
    assert (f.action, f.gpus) == (Action.RESET_GPU, (1, 4))
    # A worse action on the node wins, and a node-wide finding names no GPU to reset.
    f = finding_of(results + [fail("infiniband", "mlx5_0/1", Action.DRAIN_REBOOT)])
    assert (f.action, f.gpus) == (Action.DRAIN_REBOOT, ())
    assert finding_of([Result("xid", Status.WARN, "w")]) is None


# ---------------------------------------------------------------- busy: Slurm's view, then NVML's

SCEN = REPO / "examples" / "scenarios"


def busy(tmp_path, scenario_text: str | None, state="IDLE", flags=("DRAIN",)):
    from types import SimpleNamespace

    from gpuhc.slurm.read.nodes import Node
    from gpuhc.slurm.repair.remediate import busy_of
    from gpuhc.sources import SourceSpec

    spec = SourceSpec()
    if scenario_text is not None:
        p = tmp_path / "node.yaml"
        p.write_text(scenario_text)
        spec = SourceSpec(nvml_scenario=str(p))
    node = Node("n1", state, frozenset(flags), "gpuhc: ecc gpu1 x", "root", 1.0, ("gpu",), f"{state}+DRAIN")
    remediation = {"admin_tools": ["dcgmi"], "reset": {"proc_root": str(tmp_path / "proc")}}  # no pid there
    return busy_of(node, SimpleNamespace(opts=SimpleNamespace(sources=spec), slurm={"remediation": remediation}))


IDLE = "occupancy:\n  gpus:\n    - {index: 1, memory_used_mib: 0, memory_total_mib: 81559}\n"


def test_busy_from_slurm_before_nvml(tmp_path):
    text = f"extends: {SCEN / 'healthy-8xh100.yaml'}\n{IDLE}"
    assert busy(tmp_path, text) is None
    assert "jobs on the node" in busy(tmp_path, text, state="MIXED")
    assert "jobs on the node" in busy(tmp_path, text, state="IDLE", flags=("DRAIN", "COMPLETING"))


def test_a_process_on_a_gpu_or_an_unknown_occupancy_is_busy(tmp_path):
    stray = busy(tmp_path, (SCEN / "stray-process.yaml").read_text().replace(
        "extends: healthy-8xh100.yaml", f"extends: {SCEN / 'healthy-8xh100.yaml'}"))
    assert stray == "gpu1: process 48213 (python3, unknown)"  # its owner cannot be read: no stray for sure
    # A recording that did not list the processes says nothing: not idle.
    assert "unknown" in busy(tmp_path, f"extends: {SCEN / 'healthy-8xh100.yaml'}\n")


def test_a_bug_in_the_ladder_costs_the_step_not_the_health_check():
    from types import SimpleNamespace

    from gpuhc.slurm.repair import remediate

    lines = []
    flow = SimpleNamespace(slurm={"remediation": None}, log=lambda text, loud=False: lines.append((text, loud)))
    out = SimpleNamespace(extra={})
    got = remediate.climb(flow, None, None, out)  # from_section fails on the broken section
    assert out.extra["remediation"]["error"].startswith("TypeError")
    assert (got.step, got.done) == (None, remediate.Done.NOT_TAKEN) and got.why.startswith("internal error: TypeError")
    assert lines and lines[0][1] and lines[0][0].startswith("remediation: internal error, step not taken")


def test_only_slurm_jobs_make_a_stray_some_job_s():
    """jobs_of: Slurm's view alone. A process on a GPU of a node where it is None is no job's,
    and the ladder reboots (remediate._climb) instead of waiting for it forever."""
    from gpuhc.slurm.read.nodes import Node
    from gpuhc.slurm.repair.remediate import jobs_of

    def n(state, flags=("DRAIN",)):
        return Node("n1", state, frozenset(flags), "gpuhc: occupancy gpu1 x", "root", 1.0, ("gpu",), state)

    assert jobs_of(n("IDLE")) is None and jobs_of(n("DOWN", ())) is None
    for state, flags in (("ALLOCATED", ("DRAIN",)), ("MIXED", ()), ("IDLE", ("DRAIN", "COMPLETING")),
                         ("COMPLETING", ())):
        assert "jobs on the node" in jobs_of(n(state, flags)), (state, flags)


@pytest.fixture
def user():
    yield from make_user("gpuhcr")


def test_a_users_set_uid_process_on_a_held_gpu_is_a_stray_not_roots(user):
    """Issue 45: /proc/<pid> shows a set-uid program's effective uid (root), which made a user's
    process on a GPU an admin's and the ladder waited; the real uid in its status says stray. A
    name an admin tool has still only makes it wait."""
    remediation = {"admin_tools": ["dcgmi"], "reset": {"proc_root": "/proc"}}
    with namesake(user, "python3") as p:
        assert os.stat(f"/proc/{p.pid}").st_uid == 0
        assert owner_of(p.pid, "python3", remediation) == "stray"
        assert owner_of(p.pid, "dcgmi", remediation) == "admin"
    assert owner_of(os.getpid(), "python3", remediation) == ("admin" if os.getuid() == 0 else "stray")
    assert owner_of(p.pid, "python3", remediation) == "unknown"  # gone
