"""`gpuhc sweep run` with real MPI ranks (PyPI mpich's mpiexec), mpi backend: results, wrong sums,
a slow node, a hung node bounded by the watchdog, and the nccl backend refusing cleanly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhc.sweep.judge import FAIL, PASS, judge_group
from gpuhc.sweep.settings import thresholds_for
from gpuhc.sweep.store import load_group_result
from tests.helpers.paths import REPO

pytestmark = pytest.mark.mpi


def mpiexec() -> str:
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    assert found, "mpiexec not found: pip install mpich (the test extra)"
    return found


# The ranks' watchdog (`--timeout-s`) bounds their start-up too: both ranks must have started
# Python and met within it, which on a busy 2-core machine takes seconds. A run that must
# complete gets a bound it never reaches; a hung one a bound it ends at (the test's cost).
COMPLETES_S, HANGS_S = 60.0, 6.0


def launch(tmp_path, nodes=("a", "b"), fault="", backend="mpi", max_bytes=1 << 16, timeout_s=COMPLETES_S, extra=()):
    """One rank per fake node, each with its own SLURMD_NODENAME (MPMD), like srun would set;
    `env` sets it portably (MPICH and Open MPI alike)."""
    argv = [mpiexec()]
    for i, node in enumerate(nodes):
        if i:
            argv.append(":")
        argv += ["-n", "1", "env", f"SLURMD_NODENAME={node}", f"GPUHC_SWEEP_FAULT={fault}",
                 sys.executable, "-m", "gpuhc", "sweep", "run", "--backend", backend, "--sweep-id", "s1",
                 "--group-id", "r0g0000", "--nodes", ",".join(nodes), "--results-dir", str(tmp_path),
                 "--max-bytes", str(max_bytes), "--warmup", "1", "--iters", "3", "--latency-iters", "5",
                 "--latency-max-bytes", "4096", "--timeout-s", str(timeout_s), *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def test_two_ranks_write_one_complete_correct_result(tmp_path):
    cp = launch(tmp_path)
    assert cp.returncode == 0, cp.stderr
    res = load_group_result(str(tmp_path), "s1", "r0g0000")
    assert res["complete"] and res["nodes"] == ["a", "b"] and res["nranks"] == 2
    assert [r["bytes"] for r in res["sizes"]] == [8 << i for i in range(14)]
    assert all(r["correct"] for r in res["sizes"])
    small, big = res["sizes"][0], res["sizes"][-1]
    assert {"p50_us", "p95_us", "p99_us"} <= set(small) and small["iters"] == 5
    assert "p50_us" not in big and big["busbw_gbs"] > 0
    assert set(big["node_time_us"]) == {"a", "b"}
    assert judge_group(res, thresholds_for({}, "mpi", "2x1")).status == PASS
    assert not list(tmp_path.glob("s1/*.rank*.json"))


def test_a_wrong_contribution_fails_the_exact_check(tmp_path):
    cp = launch(tmp_path, fault="corrupt:b")
    assert cp.returncode == 0, cp.stderr
    res = load_group_result(str(tmp_path), "s1", "r0g0000")
    assert not any(r["correct"] for r in res["sizes"])
    assert judge_group(res, thresholds_for({}, "mpi", "2x1")).reasons[0] == "wrong sum at 8 B"


def test_a_slow_node_slows_every_collective_it_is_in(tmp_path):
    cp = launch(tmp_path, fault="slow:b:0.01")
    assert cp.returncode == 0, cp.stderr
    res = load_group_result(str(tmp_path), "s1", "r0g0000")
    # Each collective waits for b's 10 ms nap: a floor set by sleep, not a speed claim.
    assert all(r["p50_us"] >= 5000 for r in res["sizes"] if "p50_us" in r)


def test_a_hung_node_is_bounded_and_named(tmp_path):
    cp = launch(tmp_path, fault="hang:b:1024", timeout_s=HANGS_S)
    assert cp.returncode != 0
    assert not (tmp_path / "s1" / "r0g0000.json").exists()
    res = load_group_result(str(tmp_path), "s1", "r0g0000")
    assert res["timeouts"] == [{"bytes": 1024, "ranks": [0], "silent_ranks": [1], "silent_nodes": ["b"]}]
    assert [r["bytes"] for r in res["sizes"]] == [8, 16, 32, 64, 128, 256, 512]
    v = judge_group(res, thresholds_for({}, "mpi", "2x1"))
    assert v.status == FAIL and v.silent_nodes == ["b"] and "hung at 1 KiB (silent: b)" in v.reasons


def test_after_a_hang_run_out_merges_the_survivors_files(tmp_path):
    """`sweep run --out` has no analyze to merge the rank files: the survivors do it."""
    out = tmp_path / "pair.json"
    out.write_text("{}")  # a stale file from an earlier run is not mistaken for this one
    (tmp_path / "pair.rank1.json").write_text('{"rank": 1, "stale": true}')
    cp = launch(tmp_path, fault="hang:b:1024", timeout_s=HANGS_S, extra=("--out", str(out)))
    assert cp.returncode != 0
    res = json.loads(out.read_text())
    assert res["timeouts"] == [{"bytes": 1024, "ranks": [0], "silent_ranks": [1], "silent_nodes": ["b"]}]
    assert [r["bytes"] for r in res["sizes"]] == [8, 16, 32, 64, 128, 256, 512]
    assert res["merged_from"] == ["pair.rank0.json"] and res["fault_hook"] is True and not res["complete"]
    assert not (tmp_path / "pair.rank1.json").exists()
    v = judge_group(res, thresholds_for({}, "mpi", "2x1"))
    assert v.status == FAIL and "hung at 1 KiB (silent: b)" in v.reasons


def test_nccl_backend_without_cupy_or_gpu_reports_instead_of_crashing(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU for these ranks, even on a GPU machine
    cp = launch(tmp_path, backend="nccl")
    assert cp.returncode != 0
    res = load_group_result(str(tmp_path), "s1", "r0g0000")
    assert res["sizes"] == [] and ("CuPy" in res["errors"][0] or "CUDA" in res["errors"][0])
    assert judge_group(res, thresholds_for({}, "nccl", "2x1")).status == "error"


def test_out_file_and_table_on_rank_0(tmp_path):
    out = tmp_path / "sweep.json"
    argv = [mpiexec(), "-n", "2", sys.executable, "-m", "gpuhc", "sweep", "run", "--backend", "mpi", "--out", str(out),
            "--max-bytes", "1024", "--latency-iters", "3", "--warmup", "0"]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count("busbw GB/s") == 1  # rank 0 only
    assert json.loads(out.read_text())["complete"] is True
