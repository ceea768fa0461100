#!/usr/bin/env bash
# The GPU proofs that wait for a lent machine, in one call (docs/verification.md records them):
# the watcher's yield and the monitors against the reset plan (bench/watch_yield_probe.py), the
# canary on every GPU (bench/canary_device.py), the burn-in in every precision
# (bench/burnin_device.py, $OUT/burnin-precisions.json), the speed run (bench/speed_device.sh; SPEED=0
# skips it, CANARY=0 the canary). Reads only: never changes clocks, power limits, persistence, compute or MIG mode,
# never resets a GPU. The machine lacks two of gpuhc's wheels (python-hostlist, orjson): put them
# in .whl/ (git-ignored) and carry it. Results under /tmp/res; $OUT gets all.tgz and the key
# files (the device returns at most 8).
#   SPEED=0 [CANARY=0] bash bench/device_batch.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
R=/tmp/res; rm -rf $R; mkdir -p $R/watch-yield $R/speed
date -u; nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,compute_mode,mig.mode.current --format=csv
echo "== 45 watch yield"; timeout -k 5 90 python3 bench/watch_yield_probe.py --out $R/watch-yield 2>&1 | tee $R/watch-yield/log.txt; echo "rc=${PIPESTATUS[0]}" | tee -a $R/rcs.txt
echo "== 45 diag: what tells an NVML monitor from a CUDA program (maps, NVML's process lists)"
{ python3 -c 'import time,pynvml;pynvml.nvmlInit();h=pynvml.nvmlDeviceGetHandleByIndex(0)
while True: pynvml.nvmlDeviceGetUtilizationRates(h); time.sleep(0.5)' & P1=$!
python3 -c 'import time,torch;x=torch.zeros(1,device="cuda");time.sleep(40)' & P2=$!
nvidia-smi -l 1 >/dev/null & P3=$!; sleep 8
for P in $P1 $P2 $P3; do echo "pid $P $(cat /proc/$P/comm): maps $(wc -l < /proc/$P/maps) lines; dev-mapped: $(grep -c ' /dev/nvidia' /proc/$P/maps) ($(grep -o ' /dev/nvidia[^ ]*' /proc/$P/maps | sort | uniq -c | tr '\n' ' ')); libs: $(grep -oE '/[^ ]*lib(cuda|nvidia-ml)\.so[^ ]*' /proc/$P/maps | sort -u | tr '\n' ' ')"; done
python3 -c "import pynvml;pynvml.nvmlInit();h=pynvml.nvmlDeviceGetHandleByIndex(0)
print('compute', [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]); print('graphics', [p.pid for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)])"
kill $P1 $P2 $P3; wait 2>/dev/null; } 2>&1 | tee $R/diag.txt
if [ "${CANARY:-1}" = 1 ]; then echo "== 48 canary"; cat > /tmp/canary_wrap.py <<'PY'
import json, os, sys
sys.argv = ["canary_device.py"]; sys.path.insert(0, "bench")
import canary_device as c
orig, docs = c.run, []
def wrapped(p, l):
    d = orig(p, l); docs.append({"params": p, "doc": d})
    with open(os.path.join(os.environ["OUT"], "canary-runs.json"), "w") as f: json.dump(docs, f, indent=1, default=str)
    return d
c.run = wrapped
sys.exit(c.main())
PY
OUT=$R timeout -k 5 150 python3 /tmp/canary_wrap.py 2>&1 | tee $R/canary-log.txt; echo "rc=${PIPESTATUS[0]}" | tee -a $R/rcs.txt; fi
echo "== burn-in in every precision (bench/burnin_device.py: the shipped burn-in twice on every GPU, once without its pass)"
timeout -k 5 150 python3 bench/burnin_device.py --out $R 2>&1 | tee $R/burnin-log.txt; echo "rc=${PIPESTATUS[0]}" | tee -a $R/rcs.txt
[ "${SPEED:-1}" = 1 ] && { echo "== 47 speed"; OUT=$R/speed RUNS=${RUNS:-9} timeout -k 5 300 bash bench/speed_device.sh > $R/speed/log.txt 2>&1; echo "rc=$?" | tee -a $R/rcs.txt; tail -c 1500 $R/speed/log.txt; }
nvidia-smi --query-gpu=index,persistence_mode,compute_mode,mig.mode.current --format=csv
date -u
tar -C $R -czf $OUT/all.tgz .
for f in watch-yield/summary.json canary.json canary-runs.json burnin-precisions.json speed/speed.jsonl diag.txt rcs.txt; do [ -f $R/$f ] && cp $R/$f $OUT/; done
ls -la $OUT
