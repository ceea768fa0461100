#!/usr/bin/env bash
# The job checks' device proof, second call: the straggler, and what the background run has logged.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 SLURM_JOB_ID=4243
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/gpuhc-out}"; R=/tmp/jobs-r2; rm -rf $R; mkdir -p $R
W=bench/jobs_workload.py; M=bench/jobs_monitor.py
echo "=== long run so far"; ls /tmp/jobs-long 2>&1; cp /tmp/jobs-long/*.txt /tmp/jobs-long/*.jsonl $R/ 2>/dev/null
ps -eo pid,etimes,args | grep -c "[j]obs_workload.py pause"
echo "=== straggler: a second process loads GPU 2 from the 15th second"
setsid python3 $W train --seconds 80 --port 29516 > $R/straggler.txt 2>&1 & WP=$!
(sleep 15; SLURM_JOB_ID= exec setsid python3 $W load --gpu 2 --seconds 65) & LP=$!
timeout 75 python3 $M --interval 15 --seconds 30 --first 32 --log $R/straggler.jsonl | tee $R/straggler-monitor.txt
kill -- -$WP; kill $LP; sleep 2
tail -12 $R/straggler.txt
tar czf "$OUT/r2.tgz" -C $R .
