#!/usr/bin/env python3
"""Wall time of `gpuhc check --stage passive` against the floor any Python NVML tool pays.

The floor is `python -c "import pynvml"`: a fresh interpreter plus the NVML bindings. The
health check runs as a fresh process every few minutes on every node, so process start and
imports are most of its cost; this benchmark keeps them honest. Runs alternate between the
baseline and gpuhc so that machine noise hits both alike; we report medians and their ratio.

    python3 bench/bench_check.py                  # replay: the 8-GPU healthy scenario
    python3 bench/bench_check.py --live           # on a GPU node: real NVML, sysfs, kernel log
    python3 bench/bench_check.py --runs 30 --json

Target (issue 2): ratio <= 2.5 in replay; on a real GPU node, a passive run under 300 ms.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--live", action="store_true", help="read this node instead of the replay scenario")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    state = tempfile.mkdtemp(prefix="gpuhc-bench-")
    env = dict(os.environ, GPUHC_STATE_DIR=state)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # An installed gpuhc has its bytecode compiled by pip; a checkout must not be timed while
    # Python compiles ~60 modules from source on every run (seen on the GPU machines, whose
    # environment sets PYTHONDONTWRITEBYTECODE): compile once, up front.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "gpuhc")], check=False)
    config = os.path.join(state, "gpuhc.yaml")  # empty: built-in defaults, whatever /etc holds
    open(config, "w").close()
    baseline = [sys.executable, "-c", "import pynvml"]
    gpuhc = [sys.executable, "-m", "gpuhc", "check", "--stage", "passive", "--config", config]
    if not args.live:
        gpuhc += ["--nvml-scenario", SCENARIO]

    # Warm the page cache and byte-compile once, so the first sample is not an outlier.
    timed(baseline, env)
    _, rc = timed(gpuhc, env)
    if rc not in (0, 1):
        print(f"gpuhc check failed with exit code {rc}", file=sys.stderr)
        return 1

    base_t, gpuhc_t = [], []
    for _ in range(args.runs):
        base_t.append(timed(baseline, env)[0])
        gpuhc_t.append(timed(gpuhc, env)[0])
    b, g = statistics.median(base_t), statistics.median(gpuhc_t)
    out = {
        "mode": "live" if args.live else "replay healthy-8xh100",
        "runs": args.runs,
        "import_pynvml_median_s": round(b, 4),
        "gpuhc_passive_median_s": round(g, 4),
        "ratio": round(g / b, 3),
        "target_ratio": 2.5,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['mode']}: python -c 'import pynvml' median {b*1000:.0f} ms; "
              f"gpuhc check --stage passive median {g*1000:.0f} ms; ratio {g/b:.2f} (target <= 2.5)")
    # The ratio target is the replay's (issue 2); live runs report the absolute time (target
    # under 300 ms), which depends on the GPU count, so only the replay run can miss.
    return 1 if not args.live and g / b > out["target_ratio"] else 0


if __name__ == "__main__":
    sys.exit(main())
