"""submit and analyze against recorded Slurm answers: exact sbatch argv and job script,
idempotency, dry runs, and draining through the policy (admin reasons, circuit breaker)."""

from __future__ import annotations

import shlex

import pytest
from tests.helpers import slurm_answers

from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sweep.analyze import apply_culprits, drain_reason
from gpuhc.sweep.slurmcli import SlurmCli
from gpuhc.sweep.store import SweepStore
from gpuhc.sweep.submit import submit_sweep
from tests.helpers.sweep_apply import Config
from tests.helpers.sweep_slurm import FakeSlurm, section
from tests.helpers.paths import REPO
from tests.helpers.trusted import trusted_copy


def test_observe_mode_says_what_it_would_submit_sends_nothing_and_remembers_nothing(tmp_path):
    """Observe mode sends no sbatch: the plan is said, no sweep is recorded (none waits for jobs
    that never ran), and it is no failure for cron to mail every half hour."""
    fake = FakeSlurm()
    cli = fake.cli()
    cli.observe = True
    store = SweepStore(str(tmp_path))
    out = submit_sweep(section(), store, cli=cli, now=1000.0)
    assert out["observed"] and not out["submitted"] and fake.sbatched == []
    assert out["lines"][0].startswith("observe mode (slurm.mode: observe): would submit 2 probe job(s) for sweep ")
    assert "r0g0000 (n1,n2)" in out["lines"][0]
    again = submit_sweep(section(), store, cli=cli, now=2000.0)  # plans anew: nothing was left pending
    assert again["observed"] and again["sweep_id"] != out["sweep_id"]


def test_submit_sends_one_exclusive_job_per_group_with_the_launch_line(tmp_path):
    fake = FakeSlurm()
    store = SweepStore(str(tmp_path))
    out = submit_sweep(section(), store, cli=fake.cli(), now=1000.0)
    assert out["submitted"] and [g["nodes"] for g in out["groups"]] == [["n1", "n2"], ["n4", "n5"]]
    argv, script = fake.sbatched[0]
    sid = out["sweep_id"]
    assert argv[:2] == ["sbatch", "--parsable"]
    for want in (f"--job-name=gpuhc-sweep-{sid}-r0g0000", "--nodelist=n1,n2", "--nodes=2", "--ntasks-per-node=8",
                 "--exclusive", "--time=00:15:00", "--partition=gpu", "--account=ops", "--qos=probe", "--priority=1000",
                 "--gres=gpu:8", "--deadline=now+120minutes"):
        assert want in argv
    launch = shlex.split(script.strip().splitlines()[-1])
    assert launch[:4] == ["srun", "--mpi=pmi2", "--ntasks-per-node=8", "--kill-on-bad-exit=1"]
    assert launch[4:7] == ["/opt/gpuhc/bin/gpuhc", "sweep", "run"]
    assert launch[launch.index("--max-bytes") + 1] == str(2 << 30) and "--nodes" in launch
    rec = store.load_sweep(sid)
    assert sorted(g["job_id"] for g in rec["rounds"][0]["groups"]) == ["101", "102"]  # sbatch runs in parallel
    assert store.read_index()["current"] == sid


@pytest.mark.parametrize("backend, configured, want", [
    ("nccl", None, ["--gres=gpu:8"]),  # one GPU per rank: with cgroup device limits, --exclusive alone gives none
    ("mpi", None, []),  # host buffers: no GPU needed
    ("nccl", 0, []),  # the site asks for GPUs its own way (extra_args)
    ("mpi", 2, ["--gres=gpu:2"]),
])
def test_probe_jobs_request_gpus_for_the_nccl_backend(tmp_path, backend, configured, want):
    s = section(backend=backend)
    s["job"]["gpus_per_node"] = configured
    fake = FakeSlurm()
    submit_sweep(s, SweepStore(str(tmp_path)), cli=fake.cli(), now=1.0)
    for argv, _ in fake.sbatched:
        assert [a for a in argv if a.startswith("--gres")] == want


def test_no_new_sweep_while_jobs_run_or_wait_for_analyze(tmp_path):
    store = SweepStore(str(tmp_path))
    submit_sweep(section(), store, cli=FakeSlurm().cli(), now=1000.0)
    running = FakeSlurm(squeue="101|gpuhc-sweep-x-r0g0000|RUNNING\n")
    out = submit_sweep(section(), store, cli=running.cli(), now=1100.0)
    assert not out["submitted"] and "still queued or running" in out["reason"] and not running.sbatched
    finished = FakeSlurm()
    out = submit_sweep(section(), store, cli=finished.cli(), now=1200.0)
    assert not out["submitted"] and "gpuhc sweep analyze" in out["reason"] and not finished.sbatched
    # A sweep job of another admin host (the same sweep account) blocks too: found by its name prefix.
    other = SweepStore(str(tmp_path / "other"))
    out = submit_sweep(section(), other, cli=FakeSlurm(squeue="7|gpuhc-sweep-y-r0g0001|PENDING\n").cli(), now=1.0)
    assert not out["submitted"]


def test_another_users_job_named_like_a_sweep_does_not_stop_the_sweeps(tmp_path):
    """Issue 18: `sbatch --hold -J gpuhc-sweep-x --wrap true` by any user stopped every later
    sweep. Jobs are the sweep's by the submitting user and the recorded ids, never by name."""
    store = SweepStore(str(tmp_path))
    squatter = "9|gpuhc-sweep-x|PENDING|mallory\n10|gpuhc-sweep-forged|RUNNING|mallory\n"
    fake = FakeSlurm(squeue=squatter)
    out = submit_sweep(section(), store, cli=fake.cli(), now=1000.0)
    assert out["submitted"] and fake.sbatched


def test_a_job_name_with_separators_cannot_shift_the_fields(tmp_path):
    cli = SlurmCli(run=lambda argv, timeout: (0, "11|PENDING|x|gpuhc-sweep-y|RUNNING\n", ""))
    # the name is the last field: "x|gpuhc-sweep-y|RUNNING" is not the prefix, state is PENDING
    assert cli.active_jobs("gpuhc-sweep") == {}
    assert cli.active_jobs("gpuhc-sweep", ["11"]) == {"11": "PENDING"}


def test_dry_run_records_nothing_and_mpiexec_launcher(tmp_path):
    store = SweepStore(str(tmp_path))
    s = section()
    s["launcher"].update(kind="mpiexec", args=["-bind-to", "core"])
    fake = FakeSlurm()
    out = submit_sweep(s, store, dry_run=True, cli=fake.cli(), now=5.0)
    assert out["dry_run"] and not fake.sbatched and store.read_index() == {}
    sbatch_line, launch = out["lines"][0].split("  # ")
    assert shlex.split(launch)[:7] == ["mpiexec", "-n", "16", "-ppn", "8", "-bind-to", "core"]


def test_overdue_lists_busy_nodes_in_service_and_keeps_drained_ones_apart(tmp_path):
    """n3 is allocated (busy whenever a sweep came): overdue. n6 is drained: never probed, but
    not "never idle" either."""
    out = submit_sweep(section(), SweepStore(str(tmp_path)), cli=FakeSlurm().cli(), now=1e6)
    assert out["overdue"] == ["n3"] and out["out_of_service"] == ["n6"]
    assert any("1 node(s) in service not probed within 24 h (busy or left over" in x and x.endswith("n3")
               for x in out["lines"])
    assert any(x.startswith("1 node(s) out of service (drained, down, ...)") for x in out["lines"])


@pytest.mark.parametrize("state, up", [("idle", True), ("mixed", True), ("allocated+", True), ("idle$", True),
                                       ("idle*", False), ("idle~", False), ("drained", False), ("draining", False),
                                       ("down*", False), ("maint", False), ("fail", False)])
def test_in_service_reads_sinfo_states(state, up):
    from gpuhc.sweep.slurmcli import in_service

    assert in_service(state) is up


def test_a_stray_fault_hook_in_the_environment_never_reaches_the_jobs(tmp_path):
    """sbatch hands the submitting environment to the job: a GPUHC_SWEEP_FAULT left in cron's
    environment would make healthy production nodes look bad."""
    fake = FakeSlurm()
    out = submit_sweep(section(), SweepStore(str(tmp_path)), cli=fake.cli(), now=1.0,
                       environ={"GPUHC_SWEEP_FAULT": "slow:n1:0.5"})
    for _, script in fake.sbatched:
        assert "unset GPUHC_SWEEP_FAULT\n" in script and "slow:n1" not in script
    assert any("GPUHC_SWEEP_FAULT is set here but not passed to the jobs" in n for n in out["notes"])


def test_test_fault_is_passed_on_purpose_to_every_round(tmp_path):
    from gpuhc.sweep.plan import Group
    from gpuhc.sweep.submit import submit_groups

    fake = FakeSlurm()
    store = SweepStore(str(tmp_path))
    out = submit_sweep(section(), store, cli=fake.cli(), now=1.0, test_fault="slow:n4:0.05", environ={})
    rec = store.load_sweep(out["sweep_id"])
    assert rec["test_fault"] == "slow:n4:0.05" and not out["notes"]
    follow_up = [Group("r1g0000", ["n4", "n1"], 1, "isolate", "", 8, suspects=["n4"])]
    submit_groups(section(), rec, follow_up, store, fake.cli(), {})
    for _, script in fake.sbatched:
        assert "export GPUHC_SWEEP_FAULT=slow:n4:0.05  # TEST ONLY" in script and "unset" not in script


def test_mpiexec_flavors_spell_ranks_per_node_their_own_way(tmp_path):
    from gpuhc.sweep.campaign import job_settings
    from gpuhc.sweep.plan import Group
    from gpuhc.sweep.submit import launch_argv

    s = section()
    s["launcher"]["kind"] = "mpiexec"
    g = Group("r0g0000", ["a", "b"], 0, "probe", "", 4)
    assert launch_argv(s, job_settings(s), "S", g, "/r")[:5] == ["mpiexec", "-n", "8", "-ppn", "4"]  # hydra: MPICH, Intel
    s["launcher"]["flavor"] = "openmpi"
    assert launch_argv(s, job_settings(s), "S", g, "/r")[:5] == ["mpiexec", "-n", "8", "--map-by", "ppr:4:node"]
    # Open MPI forwards only named variables: the test-only hook needs -x when asked for.
    assert launch_argv(s, job_settings(s), "S", g, "/r", pass_fault=True)[5:7] == ["-x", "GPUHC_SWEEP_FAULT"]


def test_topology_makes_leaf_groups(tmp_path):
    topo = "SwitchName=s1 Level=0 Nodes=n[1-2]\nSwitchName=s2 Level=0 Nodes=n[4-5]\n"
    out = submit_sweep(section(cross_switch_fraction=0.0), SweepStore(str(tmp_path)), cli=FakeSlurm(topology=topo).cli(),
                       now=1.0)
    assert out["topology"] and [(g["nodes"], g["span"]) for g in out["groups"]] == [(["n1", "n2"], "leaf"),
                                                                                     (["n4", "n5"], "leaf")]


# ---------------------------------------------------------------------------- draining


def show(name, state="IDLE", reason=None):
    line = f"NodeName={name} CPUTot=2 State={state} Partitions=gpu"
    if reason:
        line += f" Reason={reason} [admin@2024-06-11T10:23:45]"
    return line + "\n"


class FakeScontrol:
    def __init__(self, nodes: dict[str, tuple[str, str | None]]):
        self.nodes = dict(nodes)
        self.updates: list[list[str]] = []

    def __call__(self, argv, timeout):
        if slurm_answers.is_sinfo(argv):  # gpuhc reads nodes with sinfo (docs/slurm.md, Slurm traffic)
            table = {n: (st, r, "2024-06-11T10:23:45", ("gpu",)) for n, (st, r) in self.nodes.items()}
            return 0, slurm_answers.render(table, argv), ""
        if argv[1:3] == ["show", "node"]:
            names = argv[4:] or list(self.nodes)
            return 0, "".join(show(n, *self.nodes[n]) for n in names), ""
        if argv[1] == "update":
            self.updates.append(argv)
            name = argv[2].split("=", 1)[1]
            reason = argv[4].split("=", 1)[1]
            self.nodes[name] = ("IDLE+DRAIN", reason)
            return 0, "", ""
        raise AssertionError(argv)


def record(*culprits):
    return {"id": "s9", "findings": {"culprits": [{"kind": k, "nodes": n, "evidence": "busbw 9.0 GB/s < 350 at 2 GiB",
                                                   "group": "r1g0000"} for k, n in culprits]}}


SLURM = {"scontrol": "scontrol", "timeout_s": 5.0, "breaker": {"max_drained_percent": 50.0, "settle_s": 0.0}}


def test_apply_drains_node_culprits_once_and_never_links():
    fake = FakeScontrol({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None), "n4": ("IDLE", None)})
    rec = record(("node", ["n3"]), ("link", ["n1", "n2"]))
    lines: list[str] = []
    done = apply_culprits(rec, Config(SLURM), Scontrol(run=fake), 100.0, lines)
    assert [(d["node"], d["act"], d["verified"]) for d in done] == [("n3", "drain", True)]
    reason = drain_reason("n3", "busbw 9.0 GB/s < 350 at 2 GiB", "s9")
    assert fake.updates == [["scontrol", "update", "NodeName=n3", "State=DRAIN", f"Reason={reason}"]]
    assert reason == "gpuhc: nccl-sweep n3 busbw 9.0 GB/s < 350 at 2 GiB (sweep s9) [q1]"
    assert apply_culprits(rec, Config(SLURM), Scontrol(run=fake), 200.0, lines) == []  # not twice


def test_apply_never_overwrites_an_admin_reason():
    fake = FakeScontrol({"n3": ("IDLE+DRAIN", "bad DIMM, ticket 42"), "n1": ("IDLE", None)})
    done = apply_culprits(record(("node", ["n3"])), Config(SLURM), Scontrol(run=fake), 100.0, [])
    assert done[0]["act"] == "keep" and fake.updates == []


def test_apply_respects_the_circuit_breaker():
    fake = FakeScontrol({"n1": ("IDLE+DRAIN", "gpuhc: xid79 gpu0"), "n2": ("IDLE", None), "n3": ("IDLE", None),
                         "n4": ("IDLE", None)})
    slurm = {**SLURM, "breaker": {"max_drained_percent": 25.0}}  # 1 of 4 already held: open
    done = apply_culprits(record(("node", ["n3"])), Config(slurm), Scontrol(run=fake), 100.0, [])
    assert done[0]["act"] == "blocked" and "circuit breaker open" in done[0]["breaker"] and fake.updates == []


def test_sbatch_failure_is_recorded_per_group(tmp_path):
    class Refusing(FakeSlurm):
        def run_stdin(self, argv, timeout, stdin):
            return 1, "", "sbatch: error: Invalid account or account/partition combination specified"

    out = submit_sweep(section(), SweepStore(str(tmp_path)), cli=Refusing().cli(), now=1.0)
    assert "submitted 0 of 2 jobs" in out["lines"][0]
    assert "Invalid account" in out["lines"][1]


@pytest.mark.parametrize("bad", ["$nodez", "${launch"])
def test_a_bad_template_is_a_config_error(tmp_path, bad):
    from gpuhc.errors import ConfigError

    tpl = tmp_path / "t.sbatch"
    tpl.write_text(f"#!/bin/bash\n{bad}\n")
    s = section()
    s["job"]["template"] = str(tpl)
    with pytest.raises(ConfigError, match="sweep.job.template"):
        submit_sweep(s, SweepStore(str(tmp_path / "st")), cli=FakeSlurm().cli(), now=1.0)


def test_shipped_example_config_and_template_are_valid(tmp_path):

    from gpuhc.config.load import load_config
    from gpuhc.sweep.campaign import job_settings
    from gpuhc.sweep.plan import Group
    from gpuhc.sweep.settings import sweep_section
    from gpuhc.sweep.submit import job_script, launch_argv

    # as root gpuhc refuses files others could write: copies with root's modes, whatever the
    # checkout's (tests/helpers/trusted.py)
    ex = trusted_copy(REPO / "examples" / "sweep", tmp_path / "sweep")
    s = sweep_section(load_config(str(ex / "gpuhc-sweep.yaml")))
    assert s["thresholds"]["nccl"]["2x8-cross"]["large_busbw_gbs"] == 300
    s["job"]["template"] = str(ex / "sweep.sbatch.tmpl")
    g = Group("r0g0000", ["a", "b"], 0, "probe", "", 8)
    script = job_script(s, launch_argv(s, job_settings(s), "S1", g, "/shared"), "S1", g, "/shared")
    assert script.rstrip().splitlines()[-1].startswith("srun --mpi=pmix --ntasks-per-node=8")
    assert "${NCCL_IB_TIMEOUT:-20}" in script and "$sweep_id" in script  # $$ escapes survive


def test_drain_reason_fits_255_bytes_and_keeps_the_sweep_id():
    evidence = "; ".join(["p95 27998.0 us > 5x fleet 4970.8 at 1 KiB"] + ["busbw 0.00 GB/s < 0.3x fleet 0.14 at 64 KiB"] * 9)
    reason = drain_reason("gpu-node-0042", evidence, "20261126T014324Z-6081")
    assert len(reason.encode()) <= 255 and reason.endswith("(sweep 20261126T014324Z-6081) [q1]")
    assert reason.startswith("gpuhc: nccl-sweep gpu-node-0042 p95 27998.0 us")


def test_apply_in_observe_mode_sends_nothing_and_keeps_the_drain_pending():
    """Observe mode (docs/repair.md) covers the sweep's drains too: decided and logged, never sent."""
    fake = FakeScontrol({"n1": ("IDLE", None), "n2": ("IDLE", None), "n3": ("IDLE", None), "n4": ("IDLE", None)})
    lines: list[str] = []
    done = apply_culprits(record(("node", ["n3"])), Config({**SLURM, "mode": "observe"}), Scontrol(run=fake), 100.0,
                          lines)
    assert [(d["node"], d["act"]) for d in done] == [("n3", "observed")]
    assert done[0]["why"].startswith("observe mode, nothing sent: would drain")
    assert fake.updates == []
    assert any("observe mode: would drain n3" in line for line in lines)
