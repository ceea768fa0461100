"""The nccl backend on real GPUs (marker gpu: skipped only where no GPU is present): one rank
per GPU over NCCL, exact sums, and a hung rank bounded by polling + ncclCommAbort."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhc.sweep.store import load_group_result

REPO = Path(__file__).resolve().parent.parent


def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


# Two ranks on one GPU is not a valid NCCL communicator: these need a second GPU. (No GPU at all
# is skipped by conftest for every `gpu` test.)
pytestmark = [pytest.mark.gpu, pytest.mark.mpi,
              pytest.mark.skipif(0 < _gpu_count() < 2, reason="needs two GPUs: one rank per GPU")]


def mpi_launcher() -> list[str]:
    for name in ("mpirun", "mpiexec"):
        local = Path(sys.executable).parent / name
        found = str(local) if local.exists() else shutil.which(name)
        if found:
            return [found]
    pytest.fail("no mpirun/mpiexec on PATH")


def rank_cmd(tmp_path, node, fault="", max_bytes=64 << 20, timeout_s=5.0) -> list[str]:
    # `env` sets per-rank variables portably (Open MPI and MPICH alike).
    return ["env", f"SLURMD_NODENAME={node}", f"GPUHC_SWEEP_FAULT={fault}", sys.executable, "-m", "gpuhc", "sweep",
            "run", "--backend", "nccl", "--sweep-id", "g1", "--group-id", "r0g0000", "--nodes", "a,b",
            "--results-dir", str(tmp_path), "--max-bytes", str(max_bytes), "--timeout-s", str(timeout_s)]


def run_pair(tmp_path, fault=""):
    env = {**os.environ, "PYTHONPATH": str(REPO), "NCCL_NVLS_ENABLE": "0",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    argv = mpi_launcher() + ["-np", "1", *rank_cmd(tmp_path, "a", fault), ":", "-np", "1", *rank_cmd(tmp_path, "b", fault)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env)


def test_nccl_sweep_on_two_gpus_sums_exactly(tmp_path):
    cp = run_pair(tmp_path)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    res = load_group_result(str(tmp_path), "g1", "r0g0000")
    assert res["complete"] and all(r["correct"] for r in res["sizes"])
    assert res["sizes"][-1]["bytes"] == 64 << 20 and res["sizes"][-1]["busbw_gbs"] > 1.0
    assert "p95_us" in res["sizes"][0]
    assert {r.get("gpu") for r in res["ranks"]} != {None}


def test_a_hung_gpu_rank_is_aborted_and_named(tmp_path):
    cp = run_pair(tmp_path, fault="hang:b:65536")
    assert cp.returncode != 0
    res = load_group_result(str(tmp_path), "g1", "r0g0000")
    assert res["timeouts"] and res["timeouts"][0]["bytes"] == 65536
    assert res["timeouts"][0]["silent_nodes"] == ["b"], res["timeouts"]
