#!/bin/sh
# The reset procedure's read-only half on a GPU node (docs/verification.md). Run from a folder
# holding gpuhc/ (and deps/ for click, yaml, hostlist where the node lacks them). Never resets a
# GPU, never changes persistence. Results under $OUT.
cd "$(dirname "$0")"
export PYTHONPATH="$PWD:$PWD/deps" GPUHC_STATE_DIR=/tmp/gpuhc-reset-state GPUHC_CACHE_DIR=
: "${OUT:=/tmp/reset-out}"; mkdir -p "$OUT"
{ date -u; hostname; id; python3 -V; nvidia-smi -L; } > "$OUT/host.txt" 2>&1
nvidia-smi --query-gpu=index,name,pci.bus_id,persistence_mode,fabric.state,fabric.status --format=csv > "$OUT/query.csv" 2>&1
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
ls -l /dev/nvidia* > "$OUT/dev.txt" 2>&1
for f in /proc/driver/nvidia/gpus/*/information; do echo "== $f"; cat "$f"; done > "$OUT/information.txt" 2>&1
nvidia-smi -h 2>&1 | grep -n -B2 -A16 -- "--gpu-reset" > "$OUT/smi-help-reset.txt"
{ zcat /usr/share/man/man1/nvidia-smi.1.gz 2>/dev/null || cat /usr/share/man/man1/nvidia-smi.1 2>/dev/null; } | grep -n -A45 "gpu-reset" > "$OUT/man-reset.txt"
{ systemctl --version; systemctl show --property=Id,LoadState,ActiveState -- nvidia-persistenced nvidia-fabricmanager nvidia-imex nvidia-dcgm nv-hostengine dcgm-exporter nvsm; echo "rc=$?"; } > "$OUT/systemctl.txt" 2>&1
ps -eo pid,comm,args | grep -i -E "nvidia|dcgm|fabric|imex|nvsm" | grep -v grep > "$OUT/ps.txt" 2>&1
# A real process holding GPU 1: CUDA context through torch.
CUDA_VISIBLE_DEVICES=1 python3 -c "import torch,time; x=torch.ones(1,device='cuda'); print('ready', flush=True); time.sleep(120)" > "$OUT/holder.out" 2>&1 &
HP=$!
i=0; while [ $i -lt 60 ] && ! grep -q ready "$OUT/holder.out"; do sleep 1; i=$((i+1)); done
echo "holder pid $HP ready after ${i}s" >> "$OUT/holder.out"
cat /proc/$HP/cgroup > "$OUT/holder-cgroup.txt" 2>&1
ls -l /proc/$HP/fd 2>&1 | grep nvidia > "$OUT/holder-fds.txt"
python3 reset_device.py 1 > "$OUT/probe.json" 2> "$OUT/probe.err"; echo "rc=$?" >> "$OUT/probe.err"
python3 -m gpuhc quarantine reset --plan --gpus 1 > "$OUT/plan-gpu1.txt" 2>&1; echo "rc=$?" >> "$OUT/plan-gpu1.txt"
python3 -m gpuhc quarantine reset --plan --gpus 0 > "$OUT/plan-gpu0.txt" 2>&1; echo "rc=$?" >> "$OUT/plan-gpu0.txt"
python3 -m gpuhc quarantine reset --plan --json > "$OUT/plan-all.json" 2>&1; echo "rc=$?" >> "$OUT/plan-all.json"
kill $HP; wait $HP 2>/dev/null
python3 -m gpuhc quarantine reset --plan --gpus 1 > "$OUT/plan-gpu1-after.txt" 2>&1; echo "rc=$?" >> "$OUT/plan-gpu1-after.txt"
# nvidia-bug-report.sh: is it there, and how long does it take (the retire bundle bounds it)
if command -v nvidia-bug-report.sh >/dev/null; then
  s=$(date +%s.%N)
  timeout 60 nvidia-bug-report.sh --output-file /tmp/nbr.log > "$OUT/bug-report.out" 2>&1; rc=$?
  e=$(date +%s.%N)
  { echo "rc=$rc seconds=$(echo "$e - $s" | bc)"; ls -l /tmp/nbr.log*; } >> "$OUT/bug-report.out" 2>&1
else
  echo "nvidia-bug-report.sh not installed" > "$OUT/bug-report.out"
fi
nvidia-smi --query-gpu=index,persistence_mode --format=csv > "$OUT/query-after.csv" 2>&1
