#!/usr/bin/env bash
# Slurm's GPU numbers on a real GPU machine (issue 31, docs/verification.md): gpuhc's mapping
# of Slurm's indices (gpuhc/node/gpumap.py) against what `nvidia-smi -q` says of each GPU's minor
# number and bus id, for a hand-written gres.conf (File=/dev/nvidia<minor> in minor order) and
# for AutoDetect=nvml; the mapping's cost made fresh and read back from the per-boot cache.
# Read only: never changes MIG, clocks, power, persistence or compute mode; never resets a GPU.
# Under a minute on one to eight GPUs.
#   OUT=/tmp/out bash bench/gpumap_device.sh
set -u
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/gpuhc-gpumap}; mkdir -p "$OUT"
LOG=$OUT/gpumap.log
ST=$(mktemp -d); chmod 700 "$ST"
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
LAST=$((NGPU - 1))
GPUHC=(python3 -m gpuhc)

{ date -u; nvidia-smi -L
  nvidia-smi --query-gpu=index,pci.bus_id,uuid,mig.mode.current --format=csv
  grep -H "Device Minor" /proc/driver/nvidia/gpus/*/information; } 2>&1 | tee "$LOG"
nvidia-smi -q >"$OUT/nvidia-smi-q.txt" 2>&1

# Slurm's files for this node: every /dev/nvidia<minor>, in minor order, as a site writes them.
FILES=$(ls /dev/nvidia[0-9]* 2>/dev/null | grep -E '/nvidia[0-9]+$' | sort -V | paste -sd, -)
printf 'Name=gpu File=%s\n' "$FILES" >"$ST/gres-files.conf"
printf 'AutoDetect=nvml\n' >"$ST/gres-auto.conf"
for kind in files auto; do
  printf 'node:\n  gres_conf: %s\n' "$ST/gres-$kind.conf" >"$ST/$kind.yaml"
  echo "=== gres.conf ($kind): $(cat "$ST/gres-$kind.conf")" | tee -a "$LOG"
  for run in fresh cached; do  # the first run of a boot makes the map, the next reads it
    s=$(date +%s.%N)
    GPUHC_STATE_DIR=$ST/state-$kind timeout -k 5 60 "${GPUHC[@]}" check --config "$ST/$kind.yaml" --stage prolog \
      --only gpu-count --gpus "0-$LAST" -v >"$OUT/map-$kind-$run.txt" 2>&1
    echo "=== $kind $run: rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,3))")s" | tee -a "$LOG"
  done
  cat "$OUT/map-$kind-fresh.txt" | tee -a "$LOG"
done

# Each mapped device against nvidia-smi -q: the minor gpuhc found at that bus id must be the one
# nvidia-smi reports there, and the device file Slurm named must be that minor.
python3 - "$OUT/nvidia-smi-q.txt" "$OUT"/map-files-fresh.txt "$OUT"/map-auto-fresh.txt <<'PY' 2>&1 | tee -a "$LOG"
import re, sys
smi = open(sys.argv[1]).read()
truth = {}
for block in smi.split("\nGPU ")[1:]:
    bus = re.search(r"^\s*Bus Id\s*:\s*(\S+)", block, re.M)
    minor = re.search(r"^\s*Minor Number\s*:\s*(\d+)", block, re.M)
    if bus and minor:
        b = bus.group(1).lower()
        truth[b[-12:]] = int(minor.group(1))  # "0000:18:00.0" whatever the domain's width
bad = 0
for path in sys.argv[2:]:
    rows = re.findall(r"Slurm GPU (\d+) \(([^)]*)\) -> gpu(\d+) \(minor (\d+), ([0-9a-f:.]+)\)", open(path).read())
    print(f"{path.rsplit('/', 1)[-1]}: {len(rows)} devices mapped, nvidia-smi lists {len(truth)} GPUs")
    bad += len(rows) != len(truth)  # a GPU left unmapped (or a run that mapped none) is a failure too
    for idx, files, gpu, minor, pci in rows:
        named = re.search(r"/dev/nvidia(\d+)", files)
        ok = truth.get(pci[-12:]) == int(minor) and named and int(named.group(1)) == int(minor)
        bad += not ok
        print(f"  Slurm {idx:>3} {files:<40} -> NVML gpu{gpu} minor {minor} {pci}  nvidia-smi minor "
              f"{truth.get(pci[-12:])}  {'OK' if ok else 'MISMATCH'}")
print("RESULT", "OK" if bad == 0 else f"{bad} MISMATCH(ES)")
PY
rm -rf "$ST"
