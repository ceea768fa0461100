#!/usr/bin/env python3
"""What the job checks add to the health check's wall time, per GPU (issue 24: at most 5 ms).

Alternates fresh ``gpuhc check`` processes (the passive stage, as slurmd starts it) with the jobs
check disabled (the baseline) and enabled (defaults; then GPM on, ``gpm_window_s: 0.02``), while
a job holds the GPUs, so the activity reader has every GPU to read. Medians, their difference
divided by the GPUs read, and the ratio. Runs alternate so machine noise hits all alike.

    python3 bench/bench_jobs.py [--runs 11] [--json FILE]

Exit status 1 when the added median exceeds 5 ms per GPU with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_MS_PER_GPU = 5.0
CONFIGS = {
    "baseline (jobs off)": "checks:\n  jobs:\n    enabled: false\n",
    "jobs (defaults)": "{}\n",
    "jobs + GPM 20 ms": "checks:\n  jobs:\n    thresholds:\n      gpm_window_s: 0.02\n",
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpuhc-bench-jobs-")
    argvs = {}
    for i, (name, text) in enumerate(CONFIGS.items()):
        cfg = os.path.join(tmp, f"c{i}.yaml")
        with open(cfg, "w") as f:
            f.write(text)
        state = os.path.join(tmp, f"s{i}")
        argvs[name] = [sys.executable, "-m", "gpuhc", "check", "--config", cfg, "--state-dir", state]
    times: dict[str, list[float]] = {n: [] for n in argvs}
    for name, argv in argvs.items():  # untimed first runs: caches, state
        subprocess.run(argv, capture_output=True)
    for _ in range(args.runs):
        for name, argv in argvs.items():
            t0 = time.perf_counter()
            subprocess.run(argv, capture_output=True)
            times[name].append((time.perf_counter() - t0) * 1000)
    from gpuhc.sources.job_activity import ActivityLive

    gpus = len(ActivityLive().read().gpus)
    base = statistics.median(times["baseline (jobs off)"])
    out = {"gpus_read": gpus, "runs": args.runs, "median_ms": {n: round(statistics.median(t), 1) for n, t in times.items()}}
    for name in list(argvs)[1:]:
        med = statistics.median(times[name])
        out[f"{name}: added ms per GPU"] = round((med - base) / max(gpus, 1), 2)
        out[f"{name}: ratio"] = round(med / base, 3)
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)
    return 1 if out["jobs (defaults): added ms per GPU"] > TARGET_MS_PER_GPU else 0


if __name__ == "__main__":
    sys.exit(main())
