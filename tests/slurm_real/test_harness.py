"""The Slurm test cluster itself: if this fails, every `slurm` test's failure is the harness's.

Starts real slurmctld/slurmd/munged daemons on localhost (root only; see tests/helpers/slurm_cluster.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.slurm_cluster import ClusterError, SlurmCluster, cluster_processes, daemons_alive, process_identity

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(slurm_cluster_module, tmp_path_factory):
    # No shims: these tests are about the harness, not about gpuhc's verdicts on fake nodes.
    no_shims = tmp_path_factory.mktemp("no-shims")
    return slurm_cluster_module(healthcheck=True, prolog=True, epilog=True, healthcheck_interval=2, gpus_per_node=2,
                                shim_dir=no_shims)


def test_all_nodes_idle(cluster):
    nodes = cluster.nodes_now()
    assert [n.name for n in nodes] == ["n1", "n2", "n3", "n4"]
    assert all(n.state == "IDLE" and not n.flags for n in nodes), nodes
    assert all(n.partitions == ("gpu",) for n in nodes)


def test_drain_and_resume_round_trip(cluster, slurm_release):
    reason = "gpuhc: xid Xid 79 on gpu3 [pci=0000:b3:00.0] x=y"
    cluster.scontrol("update", "NodeName=n2", "State=DRAIN", f"Reason={reason}")
    node = cluster.wait_for(lambda: (n := cluster.node("n2")).drained and n, 120, "n2 drained")
    assert node.reason == reason
    assert node.reason_user == "root"
    assert node.reason_time is not None
    assert node.raw_state == "IDLE+DRAIN"
    cluster.scontrol("update", "NodeName=n2", "State=RESUME")
    node = cluster.wait_for(lambda: not (n := cluster.node("n2")).drained and n, 120, "n2 resumed")
    assert node.state == "IDLE"
    # Slurm 24.11 returns the node to service but keeps its reason (docs/slurm.md, "Slurm
    # releases"); 22.05 and 26.05 clear it.
    assert node.reason == (reason if slurm_release.version == "24.11" else None)


def test_sbatch_job_completes(cluster):
    job = cluster.sbatch("-N1", "--wrap", "hostname")
    assert cluster.wait_for_job(job, 60) == "COMPLETED"


def test_srun_two_nodes(cluster):
    cp = cluster.run(["srun", "-N2", "-n2", "--label", "printenv", "SLURMD_NODENAME"], timeout=60)
    lines = sorted(cp.stdout.split())
    assert len(cp.stdout.splitlines()) == 2
    assert len({line.split(":")[-1] for line in cp.stdout.splitlines()}) == 2, lines


@pytest.mark.mpi
@pytest.mark.slurm_host  # the ranks run the host's Python
def test_srun_pmi2_mpi4py_ranks(cluster):
    code = (
        "from mpi4py import MPI\n"
        "c = MPI.COMM_WORLD\n"
        "total = c.allreduce(c.Get_rank() + 1)\n"
        "print(f'rank={c.Get_rank()} size={c.Get_size()} sum={total}', flush=True)\n"
    )
    cp = cluster.run(["srun", "--mpi=pmi2", "-N2", "-n2", sys.executable, "-c", code], timeout=90)
    got = sorted(line for line in cp.stdout.splitlines() if line.startswith("rank="))
    assert got == ["rank=0 size=2 sum=3", "rank=1 size=2 sum=3"], cp.stdout + cp.stderr


def test_slurm_programs_get_the_wrapper_environment(cluster):
    """HealthCheckProgram runs per node with its own SLURMD_NODENAME; prolog/epilog see the GPUs
    Slurm allocated; every wrapper exports what gpuhc needs."""
    job = cluster.sbatch("-w", "n3", "--gres=gpu:1", "--wrap", "true")
    assert cluster.wait_for_job(job, 60) == "COMPLETED"
    logs = cluster.log_dir
    cluster.wait_for(lambda: (logs / "env.epilog.n3").is_file(), 120, "epilog on n3")

    def no_check_yet() -> str:
        missing = [n for n in cluster.nodes if not (logs / f"env.healthcheck.{n}").is_file()]
        return "no health check yet on " + ", ".join(missing)

    cluster.wait_for(lambda: all((logs / f"env.healthcheck.{n}").is_file() for n in cluster.nodes), 120,
                     "a health check on every node", pending=no_check_yet)
    env = dict(line.split("=", 1) for line in (logs / "env.prolog.n3").read_text().splitlines() if "=" in line)
    assert env["SLURMD_NODENAME"] == "n3"
    assert env["SLURM_JOB_ID"] == str(job)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["GPUHC_STATE_DIR"] == str(cluster.state_root / "n3")
    assert env["SLURM_CONF"] == str(cluster.conf_path)
    assert env["GPUHC_CONFIG"] == str(cluster.gpuhc_yaml)
    assert env["GPUHC_BIN"]
    hc = (logs / "env.healthcheck.n1").read_text()
    assert "SLURMD_NODENAME=n1" in hc and "SLURM_JOB_ID" not in hc


def test_wrappers_exec_the_shims(tmp_path):
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "prolog.sh").write_text("exit 7\n")
    c = SlurmCluster(tmp_path / "c", nodes=("n1",), shim_dir=shims)
    for d in ("bin", "log"):
        (c.workdir / d).mkdir(parents=True)
    c._write_wrappers()
    env = {"SLURMD_NODENAME": "n1"}
    assert subprocess.run([str(c.workdir / "bin" / "prolog")], env=env).returncode == 7
    assert subprocess.run([str(c.workdir / "bin" / "epilog")], env=env).returncode == 0  # no shim: no-op
    assert "SLURMD_NODENAME=n1" in (c.log_dir / "env.prolog.n1").read_text()


def test_gpuhc_yaml_carries_node_scenarios(tmp_path):
    c = SlurmCluster(tmp_path, nodes=("n1", "n2"), gpuhc_config={"budget_s": {"passive": 10}},
                     node_scenarios={"n2": "xid79.yaml"})
    c._write_gpuhc_yaml()
    import yaml

    data = yaml.safe_load(c.gpuhc_yaml.read_text())
    # the bundle directories stay in the cluster's own (tests/project/test_live_paths.py)
    bundles = {"postmortem_dir": str(c.workdir / "postmortem"), "retire_bundle": {"dir": str(c.workdir / "retired")}}
    assert data == {"budget_s": {"passive": 10}, "slurm": bundles,
                    "hosts": [{"match": "n2", "sources": {"nvml_scenario": "xid79.yaml"}}]}


def test_teardown_leaves_no_process_of_the_cluster(tmp_path, slurm_release):
    """Daemons, slurmstepds, a batch job's processes (in a session of their own, so killing
    slurmd's group misses them) and an srun the test never waited for: all gone after stop()."""
    c = SlurmCluster(tmp_path / "c", nodes=("n1", "n2"), release=slurm_release)
    try:
        c.start()
        job = c.sbatch("-w", "n1", "-o", "/dev/null", "--wrap", "sleep 300")
        assert c.wait_for_job(job, 120, ("RUNNING",)) == "RUNNING"
        c.popen(["srun", "-w", "n2", "-o", "/dev/null", "sleep", "301"])  # left hanging on purpose

        def running() -> dict[int, str]:
            procs = {pid: _comm(pid) for pid in daemons_alive(c)}
            naps = {tuple(argv[1:]) for argv in map(_cmdline, procs) if argv and Path(argv[0]).name == "sleep"}
            want = {"slurmctld", "slurmd", "slurmstepd", "munged", "srun"} <= set(procs.values()) and \
                {("300",), ("301",)} <= naps
            return procs if want else {}

        procs = c.wait_for(running, 120, "the batch job, the srun and their steps running",
                           pending=lambda: f"processes of the cluster: {sorted(set(map(_comm, daemons_alive(c))))}")
        slurmd_sessions = {os.getsid(pid) for pid, name in procs.items() if name == "slurmd"}
        sleeps = [pid for pid, name in procs.items() if name == "sleep"]
        assert all(os.getsid(pid) not in slurmd_sessions for pid in sleeps)  # what a group kill misses
        before = [process_identity(pid) for pid in procs]
    finally:
        c.stop()
    assert daemons_alive(c) == []
    # By PID and start time: nothing of the cluster was left to init, whatever its environment.
    assert [ident for ident in before if ident and process_identity(ident[0]) == ident] == []
    assert c.sock_dir is None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]
    except OSError:
        return []


def test_cluster_processes_match_the_work_directory_exactly(tmp_path):
    """A cluster in .../slurm1 must not claim the processes of another in .../slurm10."""
    (tmp_path / "slurm10").mkdir()
    nap = [sys.executable, "-c", "import time; time.sleep(30)"]
    other = subprocess.Popen([*nap, str(tmp_path / "slurm10" / "slurm.conf")])
    mine = subprocess.Popen([*nap, f"--conf={tmp_path / 'slurm1' / 'slurm.conf'}"])
    try:
        c = SlurmCluster(tmp_path / "slurm1", nodes=("n1",))
        found = cluster_processes(c)
        assert mine.pid in found and other.pid not in found and os.getpid() not in found
    finally:
        for p in (other, mine):
            p.kill()
            p.wait()


def test_a_cluster_that_cannot_start_says_why(tmp_path, slurm_release):
    c = SlurmCluster(tmp_path / "bad", nodes=("n1",), extra_conf="NoSuchSlurmOption=1", start_timeout=60,
                     release=slurm_release)
    with pytest.raises(ClusterError) as err:
        c.start()
    text = str(err.value)
    # Whichever daemon read the file first and died names the key (slurmd wins the race on
    # 24.11 at times); every daemon is gone either way.
    assert ("slurmctld" in text or "slurmd" in text) and "NoSuchSlurmOption" in text
    assert daemons_alive(c) == []
