#!/usr/bin/env bash
# GPU occupancy on a real GPU node (issue 14), for docs/verification.md. One JSON line per step
# on stdout (and in $OUT/occupancy.jsonl); the raw outputs go to $OUT/occupancy.log.
#
#  1. idle node: passive, prolog and epilog (occupancy only) pass; passive wall time measured;
#  2. a second process holds ~20 GiB and runs a matmul loop on GPU $G (1 where there are two
#     GPUs, else 0): prolog and epilog fail on that GPU with a reason naming its pid, process
#     name and GiB; the other GPUs pass; the passive stage still passes, in the same time; the
#     full epilog (with the active checks) reports the busy GPU as the occupancy FAIL; the Slurm
#     entry `gpuhc prolog` with SLURM_JOB_GPUS=$G fails the job (a stub scontrol stands in for
#     Slurm, so the drain itself is refused and logged);
#  3. a process that exits 3 s into the epilog's wait: the epilog waits for it and passes;
#  4. after the holder is killed everything passes again.
# Never changes clocks, power limits, persistence or compute mode; never resets a GPU.
#   OUT=/tmp/out bash bench/occupancy_device.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID  # CUDA index == NVML index
OUT=${OUT:-/tmp/gpuhc-occupancy}; mkdir -p "$OUT"
LOG=$OUT/occupancy.log; JSONL=$OUT/occupancy.jsonl; : >"$JSONL"
ST=$(mktemp -d); CFG=$ST/gpuhc.yaml; export GPUHC_STATE_DIR=$ST/state
NGPU=$(nvidia-smi -L | wc -l)
G=$(( NGPU > 1 ? 1 : 0 )); OTHER=$(( G == 1 ? 0 : -1 ))
GIB=${GIB:-20}
python3 -m compileall -q gpuhc >/dev/null

# A stub scontrol: the Slurm flow runs for real up to the drain, which this machine cannot do.
cat >"$ST/scontrol" <<'SH'
#!/bin/sh
echo "scontrol: error: no Slurm on this machine (gpuhc occupancy bench stub)" >&2
exit 1
SH
chmod +x "$ST/scontrol"
cat >"$CFG" <<YAML
slurm:
  scontrol: $ST/scontrol
  syslog: false
  log_file: $OUT/slurm.log
YAML

cat >"$ST/holder.py" <<'PY'
"""Hold GIB of GPU memory and keep the SMs busy until killed (or for SECONDS, then exit)."""
import os, sys, time
gpu, gib, ready, seconds = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
try:
    import torch
    torch.cuda.set_device(gpu)
    hold = torch.ones(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    step = lambda a: (a @ a).clamp_(-1, 1)
    sync = torch.cuda.synchronize
except ImportError:
    import cupy
    cupy.cuda.Device(gpu).use()
    hold = cupy.ones(int(gib * (1 << 30)), dtype=cupy.uint8)
    a = cupy.random.randn(4096, 4096, dtype=cupy.float32)
    step = lambda a: cupy.clip(a @ a, -1, 1)
    sync = cupy.cuda.Device(gpu).synchronize
a = step(a); sync()
with open(ready, "w") as f:
    f.write(str(os.getpid()))
end = time.monotonic() + seconds if seconds > 0 else float("inf")
while time.monotonic() < end:
    a = step(a); sync()
PY

# run NAME PHASE TIMEOUT CMD...: one JSON line with rc, wall time and the occupancy results
run() {
  local name=$1 phase=$2 t=$3; shift 3
  local s; s=$(date +%s.%N)
  timeout -k 5 "$t" "$@" >"$ST/out.txt" 2>"$ST/err.txt"; local rc=$?
  local e; e=$(date +%s.%N)
  { echo "=== [$phase] $name: $*"; cat "$ST/out.txt" "$ST/err.txt"; echo "=== rc=$rc"; } >>"$LOG"
  python3 - "$name" "$phase" "$rc" "$s" "$e" "$ST/out.txt" "$ST/err.txt" "${HOLDER_PID:-0}" <<'PY' | tee -a "$JSONL"
import json, sys
name, phase, rc, s, e, out, err, pid = sys.argv[1:]
doc = {"step": name, "phase": phase, "rc": int(rc), "wall_s": round(float(e) - float(s), 3)}
text = open(out).read()
try:
    rep = json.loads(text)
    doc["status"] = rep["status"]
    doc["duration_s"] = rep.get("duration_s")
    doc["occupancy"] = [f"{r['status']} {r['subject']}: {r['message']}" for r in rep["results"] if r["check"] == "occupancy"]
    doc["not_pass"] = [f"{r['status']} {r['check']} {r['subject']}" for r in rep["results"]
                       if r["status"] not in ("pass", "n/a") and r["check"] != "occupancy"]
except ValueError:
    doc["log"] = [l for l in open(err).read().splitlines() if "gpuhc" in l][-4:]
if pid != "0":
    doc["names_holder_pid"] = f"pid {pid} " in (text + open(err).read())
print(json.dumps(doc))
PY
}

start_holder() {  # GPU GIB SECONDS
  rm -f "$ST/ready"
  python3 "$ST/holder.py" "$1" "$2" "$ST/ready" "$3" >>"$LOG" 2>&1 &
  HOLDER_PID=$!
  for _ in $(seq 1 120); do [ -s "$ST/ready" ] && return 0; sleep 0.5; done
  echo "{\"step\": \"holder\", \"error\": \"the holder did not start on GPU $1 (see $LOG)\"}" | tee -a "$JSONL"
  return 1
}

passive_median() {  # PHASE: median wall time of 5 passive runs
  local ts=()
  for _ in 1 2 3 4 5; do
    local s; s=$(date +%s.%N); python3 -m gpuhc check --config "$CFG" >/dev/null 2>&1; local e; e=$(date +%s.%N)
    ts+=("$(python3 -c "print($e - $s)")")
  done
  python3 -c "import json,statistics,sys; v=[float(x) for x in sys.argv[2:]]; print(json.dumps({'step': 'passive wall time', 'phase': sys.argv[1], 'median_s': round(statistics.median(v), 3), 'runs_s': [round(x, 3) for x in v]}))" "$1" "${ts[@]}" | tee -a "$JSONL"
}

stages() {  # PHASE
  local p=$1
  run passive "$p" 60 python3 -m gpuhc check --config "$CFG" --json
  passive_median "$p"
  run "prolog gpu$G" "$p" 60 python3 -m gpuhc check --config "$CFG" --stage prolog --gpus "$G" --json
  [ "$OTHER" -ge 0 ] && run "prolog gpu$OTHER" "$p" 60 python3 -m gpuhc check --config "$CFG" --stage prolog --gpus "$OTHER" --json
  run "prolog all GPUs" "$p" 60 python3 -m gpuhc check --config "$CFG" --stage prolog --json
  run "epilog gpu$G (occupancy, 5 s wait)" "$p" 60 python3 -m gpuhc check --config "$CFG" --stage epilog --only occupancy --gpus "$G" --json
  run "slurm prolog SLURM_JOB_GPUS=$G" "$p" 60 env SLURM_JOB_GPUS="$G" SLURM_JOB_ID=4242 python3 -m gpuhc prolog --config "$CFG" --json
  run "slurm prolog CUDA_VISIBLE_DEVICES=$G" "$p" 60 env CUDA_VISIBLE_DEVICES="$G" SLURM_JOB_ID=4243 python3 -m gpuhc prolog --config "$CFG" --json
}

{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv; } >>"$LOG" 2>&1
stages idle
if start_holder "$G" "$GIB" 0; then
  nvidia-smi >>"$LOG" 2>&1
  stages busy
  run "epilog all GPUs, with the active checks" busy 150 python3 -m gpuhc check --config "$CFG" --stage epilog --json
  kill "$HOLDER_PID"; wait "$HOLDER_PID" 2>/dev/null; HOLDER_PID=0
  sleep 2
fi
if start_holder "$G" 2 3; then
  run "epilog gpu$G, process exits 3 s in" leaving 60 python3 -m gpuhc check --config "$CFG" --stage epilog --only occupancy --gpus "$G" --json
  wait "$HOLDER_PID" 2>/dev/null; HOLDER_PID=0
fi
stages after
