#!/usr/bin/env bash
# Speed on a real GPU node (issues 10 and 47), for docs/verification.md: one JSON document per line.
#   1. live: `gpuhc check` passive vs `nvidia-smi -q` (target <= 0.5x), prolog of one GPU vs
#      bench/nvml_floor.py reading the same fields (target <= 1.3x), with an empty config and
#      with the shipped etc/gpuhc.yaml (event log and textfile on), medians of $RUNS alternating
#      runs, each gpuhc run split into phases; plus the passive run with the early NVML read off.
#      Both stages and the floor read the NVLink DL counters of a third of the links per run (the
#      nvlink check's default dl_rotation: 3); the same passive and prolog runs with the shipped
#      config set to dl_rotation: 1 (every link, every run), and the floor reading every link,
#      are timed in the same alternation and reported beside them (not targets);
#   2. replay of the healthy 8-GPU node vs `python -c "import pynvml"` on the same machine
#      (target <= 1.8x; the CPU machine's number is the one the issue asks for);
#   3. each check's and each source's cost (bench/check_costs.py), live and replay: docs/checks.md's GPU column;
#   4. where the start and the live prolog go: `python3 -X importtime -c pass` (an image's .pth
#      hooks run in every Python process: on the H100 machine numba-cuda's took 44 ms) and
#      bench/profile_check.py over the live prolog of one GPU with the shipped config (its
#      imports-and-config phase was 126 ms against the passive run's 96, docs/verification.md).
# Reads only: never changes clocks, power limits, persistence or compute mode.
#   OUT=/tmp/out RUNS=9 bash bench/speed_device.sh
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpuhc-speed}; mkdir -p "$OUT"
RUNS=${RUNS:-9}
GPU=${GPU:-0}
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,persistence_mode --format=csv; nproc; python3 -V; } \
  >"$OUT/speed-env.txt" 2>&1
python3 -c "import json,subprocess; print(json.dumps({'machine': subprocess.run(['nvidia-smi','-L'],capture_output=True,text=True).stdout.strip().splitlines()}))" \
  | tee "$OUT/speed.jsonl"
timeout -k 5 400 python3 bench/bench_check.py --live --gpu "$GPU" --runs "$RUNS" --json | tee -a "$OUT/speed.jsonl"
timeout -k 5 150 python3 bench/bench_check.py --runs "$RUNS" --json | tee -a "$OUT/speed.jsonl"
# 3. each check's import and judge cost and each source's read, live, shipped config (the GPU
#    column of docs/checks.md, "What a check costs"), and the same of the replay for comparison.
timeout -k 5 300 python3 bench/check_costs.py --runs "$RUNS" | tee "$OUT/check-costs-live.md"
timeout -k 5 300 python3 bench/check_costs.py --replay --runs "$RUNS" | tee "$OUT/check-costs-replay.md"
# 4. the interpreter's own start, then the live prolog's imports and functions
python3 -X importtime -c pass 2> "$OUT/importtime-pass.txt"; sort -t'|' -k2 -n "$OUT/importtime-pass.txt" | tail -6
SHIPPED_CFG=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import bench_check as b, tempfile; print(b.shipped_config(tempfile.mkdtemp()))")
timeout -k 5 200 python3 bench/profile_check.py --runs 5 --top 30 -- check --stage prolog --gpus "$GPU" --node benchnode \
    --config "$SHIPPED_CFG" > "$OUT/profile-prolog.txt" 2>&1; tail -40 "$OUT/profile-prolog.txt"
