#!/usr/bin/env bash
# The node around the GPUs on a real GPU node (issue 33), for docs/verification.md. Reads only:
# never changes clocks, power limits, persistence, compute mode or MIG, never resets a GPU,
# starts or stops no service. Under 4 minutes on 1 or 4 GPUs.
#   1. what the host reader finds here (`gpuhc snapshot`'s host section: CPUs, memory, EDAC, the
#      GPUs/NVSwitches/NICs and the bridges above them, the GPU services) and the four host
#      checks' verdicts on this node, with "/" as a site mount and /tmp as scratch, in JSON;
#   2. cost: the passive run (every default check, the four new ones included) against
#      `nvidia-smi -q`, medians of $RUNS (7) alternating runs, target <= 0.6x; beside it the same
#      passive run with the four host checks off (their cost, not a target), and the passive run
#      with mounts and scratch probed (not a target);
#   3. bench/bench_check.py --live with the same number of runs (the issue-10 targets, for the
#      same machine's record).
#   OUT=/tmp/out RUNS=7 bash bench/host_device.sh   (every step has its own timeout: at most ~4 min in all)
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/gpuhc-host}; mkdir -p "$OUT"
RUNS=${RUNS:-7}
PY=${PY:-python3}
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,persistence_mode --format=csv; nproc; $PY -V
  ls /sys/devices/system/edac/mc 2>&1 | head -3; systemctl is-active nvidia-fabricmanager nvidia-persistenced \
  nvidia-dcgm 2>&1; } >"$OUT/host-env.txt" 2>&1

STATE=$(mktemp -d); CFG=$(mktemp -d)
: >"$CFG/empty.yaml"
cat >"$CFG/probes.yaml" <<'EOF'
checks:
  host:
    thresholds: {mounts: ["/"], scratch: /tmp}
EOF
cat >"$CFG/host-off.yaml" <<'EOF'
checks:
  pcie-aer: {enabled: false}
  machine-check: {enabled: false}
  host: {enabled: false}
  services: {enabled: false}
EOF

# 1. what is here, and the verdicts
timeout -k 5 30 $PY -m gpuhc snapshot --node benchnode >"$OUT/host-snapshot.yaml" 2>"$OUT/host-snapshot.err"
timeout -k 5 30 $PY -m gpuhc check --node benchnode --config "$CFG/probes.yaml" --state-dir "$STATE" \
  --only pcie-aer --only machine-check --only host --only services -v --json >"$OUT/host-checks.json" 2>"$OUT/host-checks.err"
echo "host checks exit $?" >>"$OUT/host-env.txt"

# 2. cost, alternating fresh processes, medians
timeout -k 5 80 $PY - "$RUNS" "$CFG" "$STATE" <<'EOF' | tee "$OUT/host-cost.json"
import json, os, shutil, statistics, subprocess, sys, time
runs, cfg, state = int(sys.argv[1]), sys.argv[2], sys.argv[3]
py = sys.executable
if not shutil.which("nvidia-smi"):
    print(json.dumps({"error": "nvidia-smi not found: run this on the GPU machine"}))
    sys.exit(1)
gpuhc = [py, "-m", "gpuhc", "check", "--node", "benchnode", "--state-dir", state]
cmds = {"nvidia-smi -q": [shutil.which("nvidia-smi") or "nvidia-smi", "-q"],
        "passive, defaults": gpuhc + ["--config", f"{cfg}/empty.yaml"],
        "passive, host checks off": gpuhc + ["--config", f"{cfg}/host-off.yaml"],
        "passive, mounts and scratch probed": gpuhc + ["--config", f"{cfg}/probes.yaml"]}
times = {k: [] for k in cmds}
codes = {k: set() for k in cmds}
for i in range(runs + 1):  # the first round warms caches and is dropped
    for name, argv in cmds.items():
        t0 = time.perf_counter()
        rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        if i:
            times[name].append(time.perf_counter() - t0)
            codes[name].add(rc)
med = {k: statistics.median(v) for k, v in times.items()}
base = med["nvidia-smi -q"]
out = {"runs": runs, "median_ms": {k: round(v * 1000, 1) for k, v in med.items()},
       "ratio_to_nvidia_smi": {k: round(v / base, 3) for k, v in med.items() if k != "nvidia-smi -q"},
       "target": "passive, defaults <= 0.6x nvidia-smi -q",
       "met": med["passive, defaults"] / base <= 0.6,
       "exit_codes": {k: sorted(v) for k, v in codes.items()}}
print(json.dumps(out))
EOF

# 3. the issue-10 bench on the same machine, same runs
timeout -k 5 90 $PY bench/bench_check.py --live --runs "$RUNS" --json >"$OUT/host-bench-check.json" 2>&1
echo "bench_check exit $?" >>"$OUT/host-env.txt"
rm -rf "$STATE" "$CFG"
