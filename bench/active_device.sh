#!/usr/bin/env bash
# The one script gpuhc's active checks run on the lent GPU machine (see docs/verification-active.md).
# It never touches clocks, power limits, persistence or compute mode, and never resets a GPU.
# Usage: bash bench/active_device.sh [full|quick]   (writes logs under $OUT)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/gpuhc-out}"; mkdir -p "$OUT"
MODE="${1:-full}"
LOG="$OUT/log.txt"
run() { local t=$1; shift; echo "=== $* (limit ${t}s)" | tee -a "$LOG"; local s=$SECONDS
        timeout -k 5 "$t" "$@" 2>&1 | tee -a "$LOG"; echo "=== rc=${PIPESTATUS[0]} in $((SECONDS - s))s" | tee -a "$LOG"; }

{
  nvidia-smi -L; nvidia-smi topo -m
  nvidia-smi --query-gpu=index,name,pci.bus_id,clocks.sm,clocks.max.sm,power.limit,temperature.gpu,pcie.link.gen.max,pcie.link.width.max --format=csv
  python3 -c "import sys, cupy, pynvml; from cupy.cuda import nccl; print(sys.version.split()[0], 'cupy', cupy.__version__, 'nccl', nccl.available and nccl.get_version())"
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.device_count())"
  for m in yaml click rich hostlist prometheus_client; do python3 -c "import $m" 2>/dev/null && echo "have $m" || echo "MISSING $m"; done
} > "$OUT/env.txt" 2>&1

# Limits sum to under 10 minutes (one device call); a healthy run takes about 4.
run 170 python3 -m pytest -q -m gpu tests/active/test_gpu.py -s -p no:cacheprovider
run 50 env CUDA_VISIBLE_DEVICES=0 python3 bench/bench_active.py suite --stage epilog --budget 30 --json "$OUT/suite.jsonl"
if [ "$MODE" = full ]; then
  run 50 python3 bench/bench_active.py suite --stage epilog --budget 30 --json "$OUT/suite.jsonl"
  run 100 python3 bench/bench_active.py suite --stage bootstrap --budget 600 --burnin-s 16 --json "$OUT/suite.jsonl"
fi
# Exits 1 when a pass mark is missed (burn-in >= 0.95 of sustained torch.matmul, GEMM call and HBM
# copy >= 0.95, all-reduce busbw within 3 % of torch.distributed); the last line says which.
run 220 python3 bench/bench_active.py compare --json "$OUT/bench.jsonl"
