#!/usr/bin/env bash
# The reset plan on a GPU machine with a slurmd-like holder (issue 30, docs/repair.md "Where
# slurmd holds the GPUs"), for docs/verification.md. What it shows:
#   1. the plan with persistence as the machine has it and no holder of ours;
#   2. the plan while a process named "slurmd" holds NVML open, as slurmd with AutoDetect=nvml
#      does from Slurm 23.02 on (it calls nvmlInit and takes every GPU's handle, then keeps them):
#      the plan must name it and say "path: reboot first";
#   3. the bounded runner (gpuhc/slurm/repair/gpureset.py) on a real nvidia-smi call and a bounded NVML
#      read, with their wall times;
#   4. that nothing changed: persistence mode and compute mode before and after, compared.
# Never resets a GPU, never changes persistence, clocks, power, compute mode or MIG: the plan only
# reads (`systemctl show`, /proc, NVML). Needs no Slurm (the plan says Slurm could not be asked:
# one more BLOCKED line, which the lead can ignore). About 30 s; one GPU is enough.
#   OUT=/tmp/out bash bench/reset_plan_device.sh
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpuhc-reset-plan}; mkdir -p "$OUT"
ST=$(mktemp -d); CFG=$ST/gpuhc.yaml; export GPUHC_STATE_DIR=$ST/state
printf 'slurm:\n  syslog: false\n  timeout_s: 3\n' >"$CFG"
LOG=$OUT/reset-plan.log
settings() { nvidia-smi --query-gpu=index,persistence_mode,compute_mode,mig.mode.current --format=csv,noheader; }
timed() { local s; s=$(date +%s.%N); echo "=== $*" >>"$LOG"; timeout -k 5 60 "$@" >>"$LOG" 2>&1; local rc=$?
          echo "=== rc=$rc wall=$(python3 -c "import time;print(round(time.time()-$s,3))")s" >>"$LOG"; }

{ date -u; hostname; id -un; nvidia-smi -L; } >"$OUT/host.txt" 2>&1
settings >"$OUT/settings-before.csv" 2>&1

timed python3 -m gpuhc quarantine reset --plan --gpus 0 --config "$CFG"

# A slurmd-like holder: a process whose name is "slurmd" with NVML initialised and every GPU's
# handle taken, held until killed (what gpu_nvml.c does at detection on 23.02 and later).
python3 - >"$OUT/holder.out" 2>&1 <<'PY' &
import ctypes, time
ctypes.CDLL("libc.so.6").prctl(15, b"slurmd", 0, 0, 0)  # PR_SET_NAME: /proc/<pid>/comm reads slurmd
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
n = ctypes.c_uint()
nvml.nvmlDeviceGetCount_v2(ctypes.byref(n))
handles = [ctypes.c_void_p() for _ in range(n.value)]
for i, h in enumerate(handles):
    nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
print("ready", n.value, flush=True)
time.sleep(150)
PY
HP=$!
i=0; while [ $i -lt 30 ] && ! grep -q ready "$OUT/holder.out"; do sleep 1; i=$((i+1)); done
{ echo "holder pid $HP after ${i}s"; cat /proc/$HP/comm; ls -l /proc/$HP/fd | grep nvidia; } >>"$OUT/holder.out" 2>&1
timed python3 -m gpuhc quarantine reset --plan --gpus 0 --config "$CFG"
python3 -m gpuhc quarantine reset --plan --json --config "$CFG" >"$OUT/plan-with-holder.json" 2>&1
kill "$HP"; wait "$HP" 2>/dev/null

# The bounded runner and the bounded NVML read, on the real tools (read-only calls).
timed python3 - <<'PY'
import time
from gpuhc.slurm.repair.gpureset import call_bounded, run_argv
from gpuhc.sources.nvml import NvmlLive
t = time.monotonic(); r = run_argv(["nvidia-smi", "-L"], 10.0)
print("run_argv nvidia-smi -L:", r.ok, round(time.monotonic() - t, 3), "s")
t = time.monotonic(); r = run_argv(["sleep", "30"], 1.0)
print("run_argv sleep 30 with a 1 s timeout:", r.ok, r.detail, round(time.monotonic() - t, 3), "s")
t = time.monotonic(); reading = call_bounded(NvmlLive().read, 20.0, "NVML read")
print("bounded NVML read:", reading.available, len(reading.gpus), "GPUs", round(time.monotonic() - t, 3), "s")
PY

settings >"$OUT/settings-after.csv" 2>&1
if cmp -s "$OUT/settings-before.csv" "$OUT/settings-after.csv"; then echo "settings unchanged: yes"; else
  echo "settings unchanged: NO"; diff "$OUT/settings-before.csv" "$OUT/settings-after.csv"; fi >>"$LOG"
rm -rf "$ST"
