#!/usr/bin/env bash
# The job checks' device proof (issue 24), first call: cost, then a hang and a straggler on a real
# 4-rank NCCL job, then a 10-minute run with data-loading pauses left running in the background
# (collect it with `bash bench/jobs_device.sh collect` in a later call). Never touches clocks,
# power limits, persistence or compute mode; never resets a GPU; NVLS off.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 SLURM_JOB_ID=4242
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/gpuhc-out}"; mkdir -p "$OUT"
LONG=/tmp/jobs-long
if [ "${1:-}" = collect ]; then cp -r $LONG "$OUT/" 2>/dev/null; ls -la $LONG; tail -30 $LONG/monitor.txt; exit 0; fi
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv
  for m in yaml click torch pynvml; do python3 -c "import $m" 2>/dev/null && echo "have $m" || echo "MISSING $m"; done; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
W=bench/jobs_workload.py; M=bench/jobs_monitor.py
echo "=== probe + bench: training on 4 GPUs"
setsid python3 $W train --seconds 120 > "$OUT/train.txt" 2>&1 & WP=$!
sleep 25
python3 - > "$OUT/probe.txt" 2>&1 <<'PY'
import pynvml as nv, time
nv.nvmlInit()
for i in range(nv.nvmlDeviceGetCount()):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    for name, k in (("gpu", nv.NVML_GPU_UTILIZATION_SAMPLES), ("mem", nv.NVML_MEMORY_UTILIZATION_SAMPLES), ("power", nv.NVML_TOTAL_POWER_SAMPLES)):
        try:
            t, s = nv.nvmlDeviceGetSamples(h, k, 0)
            ts = [x.timeStamp for x in s]
            print(i, name, "n", len(s), "span_s", (max(ts) - min(ts)) / 1e6, "age_s", time.time() - max(ts) / 1e6)
        except nv.NVMLError as e:
            print(i, name, "error", e)
    try:
        print(i, "gpm", nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    except nv.NVMLError as e:
        print(i, "gpm error", e)
PY
cat "$OUT/probe.txt"
timeout 150 python3 bench/bench_jobs.py --runs 9 --json "$OUT/bench.json"; echo "bench rc=$?"
timeout 40 python3 $M --interval 10 --seconds 20 --log "$OUT/train.jsonl" | tee "$OUT/train-monitor.txt"
kill -- -$WP; sleep 3
echo "=== hang: rank 3 stalls at 30 s; health check every 30 s"
rm -f /tmp/jobs-stall-mark
setsid python3 $W hang --seconds 200 --stall-at 30 --port 29513 > "$OUT/hang.txt" 2>&1 & WP=$!
date +%s.%N > "$OUT/hang-start.txt"
timeout 150 python3 $M --interval 30 --seconds 95 --first 5 --log "$OUT/hang.jsonl" | tee "$OUT/hang-monitor.txt"
cat /tmp/jobs-stall-mark > "$OUT/hang-stall.txt"
kill -- -$WP; sleep 3
echo "=== straggler: a second process loads GPU 2 from the 15th second"
setsid python3 $W train --seconds 130 --port 29514 > "$OUT/straggler.txt" 2>&1 & WP=$!
(sleep 15; SLURM_JOB_ID= exec setsid python3 $W load --gpu 2 --seconds 110) & LP=$!
timeout 140 python3 $M --interval 30 --seconds 95 --first 20 --log "$OUT/straggler.jsonl" | tee "$OUT/straggler-monitor.txt"
kill -- -$WP; kill $LP; sleep 3
echo "=== long run (10 min, a 30 s data-loading pause every 90 s) started in the background"
rm -rf $LONG; mkdir -p $LONG; cp -r gpuhc bench $LONG/
(cd $LONG && PYTHONPATH=$LONG setsid nohup python3 bench/jobs_workload.py pause --seconds 600 --port 29515 > $LONG/workload.txt 2>&1 &)
(cd $LONG && PYTHONPATH=$LONG setsid nohup python3 bench/jobs_monitor.py --interval 30 --seconds 600 --first 20 --log $LONG/monitor.jsonl > $LONG/monitor.txt 2>&1 &)
sleep 2; ls $LONG
