#!/usr/bin/env bash
# One call on a lent GPU machine that verifies everything in gpuhc that touches a GPU, for
# docs/verification.md: the passive suite live (wall time, snapshot, replay of the snapshot),
# the prolog and epilog stages (the epilog runs the short active suite on every GPU), the
# bootstrap stage shortened to fit the call (every active check, all GPUs), the NCCL sweep with
# one rank per GPU against a torch.distributed loop, and the gpu-marked tests.
# Never changes clocks, power limits, persistence or compute mode; never resets a GPU.
#   OUT=/tmp/out bash bench/verify_device.sh
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpuhc-verify}; mkdir -p "$OUT"
LOG=$OUT/verify.log
ST=$(mktemp -d); CFG=$ST/gpuhc.yaml; : >"$CFG"; export GPUHC_STATE_DIR=$ST/state
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
GPUHC=(python3 -m gpuhc)

step() { local t=$1; shift; echo "=== $* (limit ${t}s)" | tee -a "$LOG"; local s=$(date +%s.%N)
         timeout -k 5 "$t" "$@" 2>&1 | tee -a "$LOG"; local rc=${PIPESTATUS[0]}
         echo "=== rc=$rc wall=$(python3 -c "import time;print(round(time.time()-$s,3))")s" | tee -a "$LOG"; }

{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max,power.limit --format=csv
  python3 -c "import cupy, torch; from cupy.cuda import nccl; print('cupy', cupy.__version__, 'nccl', nccl.get_version(), 'torch', torch.__version__)"; } 2>&1 | tee -a "$LOG"

step 60 "${GPUHC[@]}" check --config "$CFG" --stage passive -v
"${GPUHC[@]}" check --config "$CFG" --stage passive --json >"$OUT/passive.json" 2>>"$LOG"
step 60 "${GPUHC[@]}" snapshot --config "$CFG" -o "$OUT/snapshot.yaml"
step 60 "${GPUHC[@]}" check --config "$CFG" --nvml-scenario "$OUT/snapshot.yaml" --state-dir "$ST/replay"
step 120 python3 bench/bench_check.py --live --runs 9
step 60 env SLURM_JOB_GPUS=0 "${GPUHC[@]}" check --config "$CFG" --stage prolog --gpus 0
echo "=== epilog stage (passive + short active suite on $NGPU GPUs)" | tee -a "$LOG"
timeout -k 5 120 "${GPUHC[@]}" check --config "$CFG" --stage epilog --json >"$OUT/epilog.json" 2>>"$LOG"
echo "=== rc=$?" | tee -a "$LOG"
python3 - "$OUT/epilog.json" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"epilog: {doc['status']} in {doc['duration_s']:.1f}s, profile {doc['profile']}")
for r in doc["results"]:
    if r["check"] in ("burn-in", "gpu-speed", "hbm", "memtest", "p2p", "host-link", "nccl-local", "dcgm", "topology", "active") or r["status"] not in ("pass", "n/a"):
        print(f"  {r['status']:5} {r['check']:10} {r['subject']:6} {r['message']}")
PY

# Bootstrap stage (passive + the full active suite), shortened to fit one device call: its
# defaults run 60 s of burn-in over 85 % of free HBM and DCGM level 2. DCGM level 1 here: n/a
# where there is no dcgmi (as on the lent machines), the short diag where there is.
BOOT=$ST/bootstrap.yaml
cat >"$BOOT" <<'YAML'
budget_s:
  bootstrap: 240
active:
  bootstrap:
    burnin_s: 20
    memtest_fraction: 0.3
    dcgm_level: 1
YAML
echo "=== bootstrap stage, shortened (20 s burn-in, 30 % of free HBM, DCGM level 1) on $NGPU GPUs" | tee -a "$LOG"
timeout -k 5 300 "${GPUHC[@]}" check --config "$BOOT" --stage bootstrap --json >"$OUT/bootstrap.json" 2>>"$LOG"
echo "=== rc=$?" | tee -a "$LOG"
python3 - "$OUT/bootstrap.json" "$NGPU" <<'PY' 2>&1 | tee -a "$LOG"
import json, sys
doc = json.load(open(sys.argv[1]))
ngpu = int(sys.argv[2])
active = ("burn-in", "gpu-speed", "hbm", "memtest", "p2p", "host-link", "nccl-local", "dcgm", "topology", "active")
print(f"bootstrap: {doc['status']} in {doc['duration_s']:.1f}s, profile {doc['profile']}")
for r in doc["results"]:
    if r["check"] in active or r["status"] not in ("pass", "n/a"):
        print(f"  {r['status']:5} {r['check']:10} {r['subject']:6} {r['message']}")
# what may be n/a on a healthy node: P2P with one GPU, DCGM without dcgmi
may_na = {"dcgm"} | ({"p2p"} if ngpu < 2 else set())
bad = [r for r in doc["results"] if r["check"] in active
       and not (r["status"] == "pass" or (r["status"] == "n/a" and r["check"] in may_na))]
seen = {r["check"] for r in doc["results"]}
missing = [c for c in active[:-1] if c not in seen]
print("bootstrap active checks: " + ("ALL PASS" if not bad and not missing else
      f"NOT ALL PASS: {len(bad)} bad, missing {missing}"))
PY

echo "=== sweep: $NGPU ranks, 8 B -> 2 GiB" | tee -a "$LOG"
step 150 mpirun --oversubscribe -np "$NGPU" python3 -m gpuhc sweep run --backend nccl --out "$OUT/sweep.json"
step 150 torchrun --standalone --nproc_per_node="$NGPU" bench/bench_sweep.py torch --out "$ST/torch_loop.json"
step 60 python3 bench/bench_sweep.py compare --gpuhc "$OUT/sweep.json" --torch "$ST/torch_loop.json"

step 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/active/test_gpu.py tests/sweep/test_backends_gpu.py tests/sources/test_nvml.py
