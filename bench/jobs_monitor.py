#!/usr/bin/env python3
"""Run the health check's job check every ``--interval`` seconds and log what it says (issues 24, 32).

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
    ap.add_argument("--config", help="gpuhc.yaml for the checks (default: the shipped defaults)")
    ap.add_argument("--phases", help="the workload's phase lines: tick at fixed times after each phase starts")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="gpuhc-jobs-state-")
    cfg = os.path.join(state, "gpuhc.yaml")
    with open(cfg, "w") as f:
        f.write(open(args.config).read() if args.config else "{}\n")
    time.sleep(args.first)
    end = time.time() + args.seconds
    due = Due(args.phases, args.interval)
    while time.time() < end:
        label = due.wait(end)
        if label is None:
            break
        tick(cfg, state, args.log, label)


def tick(cfg: str, state: str, log: str, label: str | None) -> None:
    from gpuhc.sources.job_activity import ActivityLive

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
    if label:
        line["run"] = label
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")
    for r in results:
        print(f"{time.strftime('%H:%M:%S')} {label or ''} {r.get('status')} {r.get('message', r.get('error'))}", flush=True)


class Due:
    """When the next tick is due: every ``interval`` seconds, or, with a phases file (the
    workload's JSON lines {"phase", "time", "seconds"}), at fixed times after each phase starts:
    +16 s (the window then holds the phase alone; a shorter phase: its last second), then every
    12 s while the phase lasts."""

    def __init__(self, phases: str | None, interval: float):
        self.phases, self.interval, self.next = phases, interval, time.time()
        self.queue: list[tuple[float, str]] = []
        self.seen = 0

    def wait(self, end: float) -> str | None:
        if self.phases is None:
            time.sleep(max(0.0, self.next - time.time()))
            self.next = max(self.next + self.interval, time.time())
            return None if time.time() >= end else ""
        while time.time() < end:
            self._read()
            if self.queue and self.queue[0][0] <= time.time():
                return self.queue.pop(0)[1]
            time.sleep(0.2)
        return None

    def _read(self) -> None:
        try:
            lines = open(self.phases).read().splitlines()
        except OSError:
            return
        for line in lines[self.seen:]:
            self.seen += 1
            try:
                ph = json.loads(line)
            except ValueError:
                continue
            if "phase" not in ph or "seconds" not in ph:
                continue
            t, start, secs = ph["time"] + min(16.0, ph["seconds"] - 1), ph["time"], ph["seconds"]
            while t < start + secs:
                self.queue.append((t, ph["phase"]))
                t += 12.0
        self.queue.sort()

if __name__ == "__main__":
    main()
