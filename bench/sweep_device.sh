#!/usr/bin/env bash
# GPU-machine run for the fabric sweep: gpu tests, a full 8 B -> 2 GiB `gpuhc sweep run
# --backend nccl` under mpirun (one rank per GPU), the torch.distributed baseline loop, and the
# comparison. Takes the GPU count from the environment (NGPU, else nvidia-smi), so the same
# script serves 2- and 4-GPU machines. Logs and JSON go to $OUT (default ./sweep-device-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/sweep-device-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# Shared-host GPUs: NVLink multicast stays off (see the device notes); never touch clocks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
MPIRUN=(mpirun --oversubscribe -np "$NGPU")

{
  nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
  python3 -c 'import cupy, torch, mpi4py; from cupy.cuda import nccl; from mpi4py import MPI
print("cupy", cupy.__version__, "nccl", nccl.get_version(), "torch", torch.__version__, "mpi4py", mpi4py.__version__)
print(MPI.Get_library_version().splitlines()[0])'
} 2>&1 | tee "$OUT/env.txt"

echo "== gpu tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/sweep/test_backends_gpu.py 2>&1 | tee "$OUT/pytest_gpu.txt"

echo "== gpuhc sweep run --backend nccl, $NGPU ranks, 8 B -> 2 GiB"
t0=$(date +%s.%N)
timeout 120 "${MPIRUN[@]}" python3 -m gpuhc sweep run --backend nccl --out "$OUT/sweep_nccl.json" 2>&1 | tee "$OUT/sweep_nccl.txt"
t1=$(date +%s.%N)
WALL=$(python3 -c "print(round($t1 - $t0, 2))")
echo "full sweep wall time (mpirun start to exit): ${WALL}s" | tee -a "$OUT/sweep_nccl.txt"

echo "== torch.distributed baseline loop"
timeout 120 torchrun --standalone --nproc_per_node="$NGPU" bench/bench_sweep.py torch --out "$OUT/torch_loop.json" 2>&1 | tail -3

echo "== gpuhc again (after the baseline, to see run-to-run spread)"
timeout 120 "${MPIRUN[@]}" python3 -m gpuhc sweep run --backend nccl --out "$OUT/sweep_nccl_2.json" --no-table 2>&1 | tail -3

echo "== compare (first gpuhc run)"
python3 bench/bench_sweep.py compare --gpuhc "$OUT/sweep_nccl.json" --torch "$OUT/torch_loop.json" --gpuhc-wall "$WALL" --out "$OUT/compare_1.json" 2>&1 | tee "$OUT/compare.txt"
echo "== compare (second gpuhc run)"
python3 bench/bench_sweep.py compare --gpuhc "$OUT/sweep_nccl_2.json" --torch "$OUT/torch_loop.json" 2>&1 | tee -a "$OUT/compare.txt"
