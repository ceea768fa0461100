"""The nccl backend on real GPUs (marker gpu: skipped only where no GPU is present): one rank
per GPU over NCCL, exact sums, the results file's format, and a hung rank bounded by polling +
ncclCommAbort.

The one-rank test runs on any machine with a GPU, so a 1-GPU machine still exercises the whole
nccl path (CuPy, NCCL init, CUDA-event timing, the exact check, the results file). The two-rank
tests need a second GPU: two ranks on one GPU are not a valid NCCL communicator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhc.sweep.store import load_group_result
from tests.helpers.paths import REPO



def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


# No GPU at all is skipped by conftest for every `gpu` test.
pytestmark = [pytest.mark.gpu, pytest.mark.mpi]
# Two ranks on one GPU is not a valid NCCL communicator: the two-rank tests need a second GPU.
two_gpus = pytest.mark.skipif(0 < _gpu_count() < 2, reason="needs two GPUs: one rank per GPU")


def mpi_launcher() -> list[str]:
    for name in ("mpirun", "mpiexec"):
        local = Path(sys.executable).parent / name
        found = str(local) if local.exists() else shutil.which(name)
        if found:
            return [found]
    pytest.fail("no mpirun/mpiexec on PATH")


# `--timeout-s` bounds each rank's start-up too (CuPy's import, the CUDA context, NCCL's init:
# seconds, more on a loaded host): a run that must complete gets a bound it never reaches, a hung
# one a bound it ends at (the hang test's cost).
COMPLETES_S, HANGS_S = 60.0, 15.0


def rank_cmd(tmp_path, node, fault="", max_bytes=64 << 20, timeout_s=COMPLETES_S) -> list[str]:
    # `env` sets per-rank variables portably (Open MPI and MPICH alike).
    return ["env", f"SLURMD_NODENAME={node}", f"GPUHC_SWEEP_FAULT={fault}", sys.executable, "-m", "gpuhc", "sweep",
            "run", "--backend", "nccl", "--sweep-id", "g1", "--group-id", "r0g0000", "--nodes", "a,b",
            "--results-dir", str(tmp_path), "--max-bytes", str(max_bytes), "--timeout-s", str(timeout_s)]


def launch_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "NCCL_NVLS_ENABLE": "0",
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run_pair(tmp_path, fault="", timeout_s=COMPLETES_S):
    argv = mpi_launcher() + ["-np", "1", *rank_cmd(tmp_path, "a", fault, timeout_s=timeout_s), ":",
                             "-np", "1", *rank_cmd(tmp_path, "b", fault, timeout_s=timeout_s)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, env=launch_env())


# The keys `analyze`, `report` and `merge_partials` read: the results format gpuhc-sweep-result/1.
TOP_KEYS = {"format", "sweep_id", "group_id", "backend", "nodes", "nranks", "ranks", "ranks_per_node", "complete",
            "timeouts", "errors", "duration_s", "fault_hook", "sizes"}
ROW_KEYS = {"bytes", "time_us", "algbw_gbs", "busbw_gbs", "correct", "rank_time_us", "node_time_us"}
LATENCY_KEYS = {"p50_us", "p95_us", "p99_us", "iters"}


def test_nccl_sweep_on_one_gpu_sums_exactly_and_writes_the_results_format(tmp_path):
    from gpuhc.sweep.stats import size_ladder
    from gpuhc.sweep.store import read_json

    out = tmp_path / "one.json"
    argv = mpi_launcher() + ["-np", "1", "env", "SLURMD_NODENAME=a", "GPUHC_SWEEP_FAULT=", sys.executable, "-m",
                             "gpuhc", "sweep", "run", "--backend", "nccl", "--nodes", "a", "--out", str(out),
                             "--max-bytes", str(64 << 20), "--timeout-s", str(COMPLETES_S)]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=launch_env())
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    res = read_json(str(out))
    assert TOP_KEYS <= set(res), TOP_KEYS - set(res)
    assert res["format"] == "gpuhc-sweep-result/1" and res["backend"] == "nccl"
    assert res["nodes"] == ["a"] and res["nranks"] == 1 and res["ranks_per_node"] == {"a": 1}
    assert res["complete"] and res["timeouts"] == [] and res["errors"] == [] and res["fault_hook"] is False
    (rank,) = res["ranks"]
    assert rank["rank"] == 0 and rank["node"] == "a" and rank["local_rank"] == 0 and rank["device"] == 0
    assert isinstance(rank["gpu"], str) and rank["gpu"] and isinstance(rank["nccl"], int) and rank["nccl"] > 0
    # Every size of the default ladder up to 64 MiB, each summed exactly (the worker compares the
    # float32 pattern element by element after every size).
    assert [r["bytes"] for r in res["sizes"]] == size_ladder(8, 64 << 20)
    for row in res["sizes"]:
        assert ROW_KEYS <= set(row), (row["bytes"], ROW_KEYS - set(row))
        assert row["correct"] is True, row["bytes"]
        assert row["time_us"] > 0 and row["algbw_gbs"] >= 0  # 8 B rounds to 0.001 GB/s or below
        assert row["busbw_gbs"] == 0  # one rank: no bus, the factor 2(n-1)/n is 0
        assert len(row["rank_time_us"]) == 1 and set(row["node_time_us"]) == {"a"}
        if row["bytes"] <= 1 << 20:  # latency sizes: per-iteration percentiles
            assert LATENCY_KEYS <= set(row) and row["iters"] == 100
            assert 0 < row["p50_us"] <= row["p95_us"] <= row["p99_us"]
        else:
            assert not LATENCY_KEYS & set(row)
    assert res["sizes"][-1]["algbw_gbs"] > 1.0
    assert "# nccl all-reduce, 1 ranks on a" in cp.stdout and "64MiB" in cp.stdout  # rank 0's size table


@two_gpus
def test_nccl_sweep_on_two_gpus_sums_exactly(tmp_path):
    cp = run_pair(tmp_path)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    res = load_group_result(str(tmp_path), "g1", "r0g0000")
    assert res["complete"] and all(r["correct"] for r in res["sizes"])
    assert res["sizes"][-1]["bytes"] == 64 << 20 and res["sizes"][-1]["busbw_gbs"] > 1.0
    assert "p95_us" in res["sizes"][0]
    assert {r.get("gpu") for r in res["ranks"]} != {None}


@two_gpus
def test_a_hung_gpu_rank_is_aborted_and_named(tmp_path):
    cp = run_pair(tmp_path, fault="hang:b:65536", timeout_s=HANGS_S)
    assert cp.returncode != 0
    res = load_group_result(str(tmp_path), "g1", "r0g0000")
    assert res["timeouts"] and res["timeouts"][0]["bytes"] == 65536
    assert res["timeouts"][0]["silent_nodes"] == ["b"], res["timeouts"]
