#!/usr/bin/env python3
"""Run the health check's job check every ``--interval`` seconds and log what it says (issue 24).

Each tick runs ``gpuhc check --only jobs --json`` as a fresh process with one state directory
(the health check as slurmd runs it: state carried from run to run) and appends one JSON line:
the tick's time, the jobs check's results and, read in this process with the same reader, the
activity samples the check judged (kept for replay fixtures). Stops after ``--seconds``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=30)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--log", required=True)
    ap.add_argument("--first", type=float, default=0, help="seconds before the first tick")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="gpuhc-jobs-state-")
    cfg = os.path.join(state, "gpuhc.yaml")
    with open(cfg, "w") as f:
        f.write("{}\n")
    from gpuhc.sources.job_activity import ActivityLive

    time.sleep(args.first)
    end = time.time() + args.seconds
    while True:
        t0 = time.time()
        raw = ActivityLive(window_s=15.0).read()
        p = subprocess.run([sys.executable, "-m", "gpuhc", "check", "--only", "jobs", "--json", "--verbose",
                            "--config", cfg, "--state-dir", state], capture_output=True, text=True, timeout=60)
        try:
            results = [r for r in json.loads(p.stdout)["results"] if r["check"] == "jobs"]
        except (ValueError, KeyError):
            results = [{"error": (p.stdout + p.stderr)[-800:]}]
        line = {"time": round(t0, 3), "check_s": round(time.time() - t0, 3), "rc": p.returncode, "results": results,
                "activity": dataclasses.asdict(raw)}
        with open(args.log, "a") as f:
            f.write(json.dumps(line) + "\n")
        for r in results:
            print(f"{time.strftime('%H:%M:%S')} {r.get('status')} {r.get('message', r.get('error'))}", flush=True)
        if time.time() >= end:
            break
        time.sleep(max(0.0, args.interval - (time.time() - t0)))


if __name__ == "__main__":
    main()
