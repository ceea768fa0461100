#!/usr/bin/env bash
# The node watcher's CPU cost over a long run (issue 32: "its CPU cost over 10 minutes", goal
# <= 0.5 % of one core). For any machine with GPUs; one device call:
#
#   WATCH_S=540 bash bench/watch_cost_device.sh      # ~9.5 min (a device call is at most 10)
#
# One training-like load per GPU (bench/jobs_workload.py `load`: bf16 8192^2 matmuls), each
# carrying its own job id as srun would set it, and `gpuhc watch --interval 10` beside them for
# WATCH_S seconds. The watcher's CPU time (its own and its waited children's, /proc/<pid>/stat)
# at its start and end gives the cost; a `gpuhc check --only jobs --json` half-way shows that
# the watcher had every job to look at. No Slurm here: the jobs are found through their
# environment, which the config allows for this run (docs/security.md: off by default).
# Never touches clocks, power limits, persistence, compute mode or MIG; never resets a GPU.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/gpuhc-out}"; mkdir -p "$OUT"
WATCH_S="${WATCH_S:-540}"
{ date -u +%FT%TZ; nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version --format=csv; nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
WS=$(mktemp -d /tmp/gpuhc-watchcost.XXXXXX)
cfg="$WS/gpuhc.yaml"
cat > "$cfg" <<EOF
slurm: {log_file: $WS/decisions.log, syslog: false, scontrol: /nonexistent/scontrol}
checks: {jobs: {thresholds: {environ_fallback: true}}}
EOF
PIDS=()
for g in $(seq 0 $((ngpu - 1))); do
    SLURM_JOB_ID=$((3400 + g)) SLURM_JOB_NUM_NODES=1 SLURM_JOB_NAME=watch-cost setsid python3 bench/jobs_workload.py load \
        --gpu "$g" --seconds $((WATCH_S + 40)) > "$OUT/load-$g.txt" 2>&1 &
    PIDS+=("$!")
done
sleep 15  # the loads have their contexts
setsid python3 -m gpuhc watch --interval 10 --config "$cfg" --state-dir "$WS/state" --node dev > "$OUT/watch.out" 2>&1 &
W=$!
sleep 1
cat /proc/$W/stat > "$OUT/stat-start"; date +%s.%N > "$OUT/t-start"
sleep $((WATCH_S / 2))
python3 -m gpuhc check --only jobs --json --config "$cfg" --state-dir "$WS/check" > "$OUT/check-mid.json" 2> "$OUT/check-mid.err"
sleep $((WATCH_S - WATCH_S / 2))
cat /proc/$W/stat > "$OUT/stat-end"; date +%s.%N > "$OUT/t-end"
kill "$W"; wait "$W" 2>/dev/null
for p in "${PIDS[@]}"; do kill -- -"$p" 2>/dev/null; done
cp "$WS/decisions.log" "$OUT/" 2>/dev/null
python3 - "$OUT" "$ngpu" <<'PY' | tee "$OUT/summary.json"
import json, os, sys
out, ngpu = sys.argv[1], int(sys.argv[2])
tick = os.sysconf("SC_CLK_TCK")
def cpu(name):  # utime, stime, cutime, cstime: fields 14-17 of /proc/<pid>/stat
    s = open(os.path.join(out, name)).read()
    f = s[s.rfind(")") + 2:].split()
    return sum(int(x) for x in f[11:15]) / tick
t0, t1 = (float(open(os.path.join(out, n)).read()) for n in ("t-start", "t-end"))
used = cpu("stat-end") - cpu("stat-start")
check = json.load(open(os.path.join(out, "check-mid.json")))
print(json.dumps({"gpus": ngpu, "wall_s": round(t1 - t0, 1), "cpu_s": round(used, 2),
                  "percent_of_one_core": round(100 * used / (t1 - t0), 3),
                  "jobs_check_mid_run": [(r.get("status"), r.get("subject"), r.get("message")) for r in check.get("results", [])]}))
PY
