#!/usr/bin/env bash
# The job checks' device proof, issue 32 (issue 24's first version is in git history). For a
# machine with 4 GPUs. Two parts, each its own call or both in one:
#
#   bash bench/jobs_device.sh cases    # ~4.7 min: one 4-rank job through every case, in phases
#   bash bench/jobs_device.sh stalls   # ~4 min: two 2-rank jobs, 5 random stalls each
#   STALL_JOBS=1 STALLS=10 MON_S=480 bash bench/jobs_device.sh stalls   # one job, 10 stalls (~8.5 min)
#
# The stalls part takes STALL_JOBS (2-rank jobs at once, default 2; a machine with fewer GPUs
# than 2 per job gets as many as fit: one on 2 GPUs), STALLS (stalls per job, default 5) and
# MON_S (seconds the health check records beside it, default 240; give ~40 s per stall).
#   bash bench/jobs_device.sh long     # ~11.5 min: 11 min of training with rank 0's 60 s checkpoint
#                                      # every 3.3 min and evaluation pauses; the watcher's CPU over it
#   bash bench/jobs_device.sh          # cases and stalls (~8 min)
#
# CASES_SCHED replaces the cases part's schedule (phase:seconds,...; bench/jobs_workload.py).
# A device call is at most 10 min, so `long` is started in the background (setsid, OUT naming a
# directory outside $OUT, which is emptied per call) and collected by the next call.
#
# cases: bench/jobs_workload.py's `phases` job (4 ranks, bf16 8192^2 matmuls + a 64 MiB
# all-reduce a step) goes through: training (the health check's cost is measured here,
# bench/bench_jobs.py, jobs check off vs on), rank 2 doing 1.5x then 2x the work, a second
# process on GPU 3, rank 0 writing a real 60 s checkpoint, evaluation pauses, a 4-stage
# pipeline, rank 2 stuck in a GPU kernel, rank 2 stalled, mismatched collectives.
# `gpuhc check --only jobs` (bench/jobs_monitor.py) runs 16 s after each phase starts (then
# every 12 s while it lasts), and the node watcher
# (`gpuhc watch --interval 10`) runs throughout; bench/jobs_analyze.py gives each phase's
# verdicts, the watcher's time to the culprit and its CPU cost, and the recording in the test
# fixtures' format (tests/fixtures/jobs/). Everything lands under $OUT.
#
# Never touches clocks, power limits, persistence, compute mode or MIG; never resets a GPU;
# NVLS off. No Slurm here: the ranks carry SLURM_JOB_ID, SLURM_JOB_NUM_NODES=1 and
# SLURM_JOB_NAME as srun would set them, and gpuhc finds their job through that environment.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/gpuhc-out}"; mkdir -p "$OUT"
W=bench/jobs_workload.py; M=bench/jobs_monitor.py
part="${1:-all}"
{ date -u +%FT%TZ; nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
  python3 -c "import pynvml; print('pynvml', getattr(pynvml, '__version__', '?'))"; nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# gpuhc's own files (config, state, decision log) in a private directory of root's, as gpuhc
# wants them (gpuhc/files/fsutil.py); the log is copied to $OUT at the end. No Slurm on this machine:
# the watcher's Slurm writes fail, and its log says so.
WS=$(mktemp -d /tmp/gpuhc-jobs32.XXXXXX)
cfg="$WS/gpuhc.yaml"
# No Slurm cgroups here either: the ranks' SLURM_JOB_ID is the only thing that names their job,
# so the environment fallback (off by default since issue 29, docs/security.md) is turned on.
cat > "$cfg" <<EOF
slurm: {log_file: $WS/decisions.log, syslog: false, scontrol: /nonexistent/scontrol}
checks: {jobs: {thresholds: {environ_fallback: true}}}
EOF

start_watcher() {
    setsid python3 -m gpuhc watch --interval 10 --config "$cfg" --state-dir "$WS/state-$1" --node dev \
        > "$OUT/watch-$1.out" 2>&1 &
    WATCH=$!
    sleep 1
    echo "{\"part\": \"$1\", \"pid\": $WATCH, \"t\": $(date +%s.%N), \"stat\": \"$(cat /proc/$WATCH/stat)\"}" >> "$OUT/watch-cpu.jsonl"
}
stop_watcher() {
    echo "{\"part\": \"$1\", \"pid\": $WATCH, \"t\": $(date +%s.%N), \"stat\": \"$(cat /proc/$WATCH/stat)\"}" >> "$OUT/watch-cpu.jsonl"
    kill "$WATCH"; wait "$WATCH" 2>/dev/null
}
wait_phase() {  # wait until the phases job has printed phase $1 (at most $2 s)
    for _ in $(seq "$2"); do grep -q "\"phase\": \"$1\"" "$OUT/phases.txt" 2>/dev/null && return 0; sleep 1; done; return 1
}

if [ "$part" = cases ] || [ "$part" = all ]; then
    echo "=== cases: one 4-rank job, phase after phase"
    start_watcher cases
    # stall lasts 28 s like kernel: a hang is called 12 s in and the watcher looks every 10 s, so
    # only a phase of 12 + 10 s or more is sure to meet a watcher round while it lasts (the
    # 2026-11-28 run's 18 s stall met none: docs/verification.md, "Job checks, round two")
    # spin: rank 2 in a kernel on every SM (kernel's single block is the documented limit)
    SCHED="${CASES_SCHED:-train:20,work1.5:18,work2:18,load:18,ckpt:60,train:8,eval:6,train:8,eval:6,pipe:18,kernel:28,spin:28,stall:28,mismatch:18}"
    SLURM_JOB_ID=3201 SLURM_JOB_NUM_NODES=1 SLURM_JOB_NAME=llm-phases setsid python3 $W phases --schedule "$SCHED" \
        --odd-rank 2 --gpu 3 --port 29521 --ckpt-dir "${TMPDIR:-/tmp}/gpuhc-ckpt" > "$OUT/phases.txt" 2> "$OUT/phases.err" &
    JOB=$!
    wait_phase train 90 || { echo "the job did not start"; tail -20 "$OUT/phases.err"; }
    timeout 330 python3 $M --config "$cfg" --phases "$OUT/phases.txt" --seconds 300 --log "$OUT/monitor-cases.jsonl" \
        > "$OUT/monitor-cases.txt" 2>&1 &
    MON=$!
    sleep 3
    timeout 60 python3 bench/bench_jobs.py --runs 4 --json "$OUT/bench-cost.json" > "$OUT/bench-cost.txt" 2>&1
    echo "bench rc=$?"; cat "$OUT/bench-cost.txt"
    wait_phase ckpt 200
    # the watcher holds no GPU context: it must not be among the GPUs' compute processes
    { echo "watcher pid $WATCH"; nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader; } \
        > "$OUT/compute-apps.txt" 2>&1
    wait_phase mismatch 330; sleep 18
    kill -- -"$JOB" 2>/dev/null; kill "$MON" 2>/dev/null; wait "$MON" 2>/dev/null
    stop_watcher cases
    rm -rf "${TMPDIR:-/tmp}/gpuhc-ckpt"
    tail -3 "$OUT/monitor-cases.txt"
fi

if [ "$part" = stalls ] || [ "$part" = all ]; then
    STALLS="${STALLS:-5}"; MON_S="${MON_S:-240}"; STALL_JOBS="${STALL_JOBS:-2}"
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    [ "$STALL_JOBS" -gt $((ngpu / 2)) ] && STALL_JOBS=$((ngpu / 2))
    [ "$STALL_JOBS" -ge 1 ] || { echo "stalls: needs at least 2 GPUs (found $ngpu)"; exit 2; }
    echo "=== stalls: $STALL_JOBS 2-rank job(s), $STALLS stalls of 28 s each at random moments (3-8 s apart), $MON_S s"
    start_watcher stalls
    rm -f "$OUT/stalls.jsonl"
    PIDS=()
    for j in $(seq 0 $((STALL_JOBS - 1))); do
        SLURM_JOB_ID=$((3300 + j)) SLURM_JOB_NUM_NODES=1 SLURM_JOB_NAME=llm-stalls setsid python3 $W stalls --gpus 2 \
            --gpu-base $((2 * j)) --stalls "$STALLS" --stall-s 28 --marks "$OUT/stalls.jsonl" --port $((29530 + j)) \
            > "$OUT/stalls-$j.txt" 2>&1 &
        PIDS+=("$!")
    done
    # the health check every 8 s too: the stalls, and each job's start and finish, recorded
    timeout $((MON_S + 20)) python3 $M --config "$cfg" --interval 8 --seconds "$MON_S" --log "$OUT/monitor-stalls.jsonl" > "$OUT/monitor-stalls.txt" 2>&1 &
    MON=$!
    for _ in $(seq "$MON_S"); do
        alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 1 ] || break; sleep 1
    done
    sleep 8  # one more check after the jobs finished
    for p in "${PIDS[@]}"; do kill -- -"$p" 2>/dev/null; done
    kill "$MON" 2>/dev/null; wait "$MON" 2>/dev/null
    stop_watcher stalls
fi

if [ "$part" = long ]; then
    # 11 min of training, the job's own pauses only: rank 0 writes a 60 s checkpoint (real bytes)
    # every 200 s, every rank evaluates for 20 s between them. Nothing may be called hung or slow.
    echo "=== long: one 4-rank job, 11 min, checkpoints and evaluation"
    start_watcher long
    SCHED="train:60,ckpt:60,train:60,eval:20,train:60,ckpt:60,train:60,eval:20,train:60,ckpt:60,train:60,eval:20,train:40"
    SLURM_JOB_ID=3202 SLURM_JOB_NUM_NODES=1 SLURM_JOB_NAME=llm-long setsid python3 $W phases --schedule "$SCHED" \
        --port 29541 --ckpt-dir "${TMPDIR:-/tmp}/gpuhc-ckpt" > "$OUT/phases-long.txt" 2> "$OUT/phases-long.err" &
    JOB=$!
    wait_long() { for _ in $(seq "$2"); do grep -q "\"phase\": \"$1\"" "$OUT/phases-long.txt" 2>/dev/null && return 0; sleep 1; done; return 1; }
    wait_long train 90 || { echo "the job did not start"; tail -20 "$OUT/phases-long.err"; }
    timeout 720 python3 $M --config "$cfg" --phases "$OUT/phases-long.txt" --seconds 680 --log "$OUT/monitor-long.jsonl" \
        > "$OUT/monitor-long.txt" 2>&1 &
    MON=$!
    wait_long end 720
    kill -- -"$JOB" 2>/dev/null; kill "$MON" 2>/dev/null; wait "$MON" 2>/dev/null
    stop_watcher long
    rm -rf "${TMPDIR:-/tmp}/gpuhc-ckpt"
fi

cp "$WS/decisions.log" "$OUT/" 2>/dev/null
python3 bench/jobs_analyze.py --out "$OUT" | tee "$OUT/summary.txt"
