#!/usr/bin/env python3
"""What bench/jobs_device.sh measured (issue 32), from the files it left in ``--out``:

- per phase of the ``cases`` job: what it should be called, what `gpuhc check --only jobs` said
  at its fixed times, and the node watcher's first finding in it (seconds after the phase began);
- per stall of the ``stalls`` jobs: seconds from the stall to the watcher naming the stalled
  GPU (its decision-log lines carry the second), then p50 and p90, and the stalls never named;
- the watcher's CPU cost: its CPU seconds (``/proc/<pid>/stat``, at its start and end) over the
  wall time, as a percentage of one core;
- the cases recording in the test fixtures' format (tests/fixtures/jobs/README.md): one JSON line
  per check, its phase as ``run``, ready to copy next to the other recordings.

    python3 bench/jobs_analyze.py --out DIR      # writes DIR/summary.json and DIR/recording.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpuhc.checks.jobs_judge import DEFAULTS  # noqa: E402 (the repository on the path first)

# What each phase must be called (docs/checks.md, "jobs"); None: anything but a hang or a straggler.
EXPECT = {
    "train": None, "eval": None, "ckpt": None,
    "pipe": "no hang",  # its last stage may read as a straggler: the documented limit (straggler_skip_names)
    "work1.5": ("straggler", ["gpu2"]), "work2": ("straggler", ["gpu2"]), "load": ("straggler", ["gpu3"]),
    "kernel": ("hang", None),  # gpu2 where GPM tells it apart, else "every rank waits"
    "spin": ("hang", ["gpu2"]),  # a kernel on every SM: GPM tells it apart
    "stall": ("hang", ["gpu2"]), "mismatch": ("hang", []),
}
WINDOW_S = float(DEFAULTS["window_s"])  # the seconds of samples one check (or watcher round) judges
_LOG = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) gpuhc watch \S+: watch: job (\d+) (looks hung|slowed by a straggler)(.*)$")
_CULPRIT = re.compile(r"culprit: (gpu\d+(?:, gpu\d+)*)|each step for (gpu\d+)")


def jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def watcher_lines(out: str) -> list[dict]:
    lines = []
    path = os.path.join(out, "decisions.log")
    for line in open(path) if os.path.exists(path) else []:
        m = _LOG.match(line.rstrip("\n"))
        if not m:
            continue
        c = _CULPRIT.search(m.group(4))
        culprits = (c.group(1) or c.group(2)).split(", ") if c else []
        lines.append({"t": time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")), "job": m.group(2),
                      "kind": "hang" if m.group(3) == "looks hung" else "straggler", "culprits": culprits,
                      "text": line.strip()[:300]})
    return lines


PARTS = {"cases": ("phases.txt", "3201"), "long": ("phases-long.txt", "3202")}  # phases file, job id


def cases(out: str, watched: list[dict], part: str = "cases") -> list[dict]:
    phases_file, job = PARTS[part]
    phases = [p for p in jsonl(os.path.join(out, phases_file)) if "phase" in p and "seconds" in p]
    ticks = jsonl(os.path.join(out, f"monitor-{part}.jsonl"))
    rows = []
    for i, p in enumerate(phases):
        start, end = p["time"], p["time"] + p["seconds"]
        hc = [{"after_s": round(t["time"] - start, 1), "status": r["status"], "signature": (r.get("value") or {}).get("signature"),
               "culprits": (r.get("value") or {}).get("culprits"), "message": r["message"][:240]}
              for t in ticks if start <= t["time"] < end for r in t["results"] if "status" in r]
        # A watcher round judges the last WINDOW_S of samples: it belongs to the phase that holds
        # most of that window, not to the phase it happened to be written in (a round 1 s into
        # a phase still judges the phase before it). The log's time has second resolution.
        w = [x for x in watched if x["job"] == job
             and min(x["t"] + 1, end) - max(x["t"] + 1 - WINDOW_S, start) > WINDOW_S / 2]
        expect = EXPECT.get(p["phase"])
        ok = _meets(expect, [(h["status"], h["signature"], h["culprits"]) for h in hc])
        rows.append({"n": i, "phase": p["phase"], "seconds": p["seconds"], "expect": expect, "health_check": hc,
                     "health_check_ok": ok, "watcher_first": ({"after_s": round(w[0]["t"] - start), "kind": w[0]["kind"],
                                                               "culprits": w[0]["culprits"]} if w else None)})
    return rows


def _meets(expect, said: list[tuple]) -> bool | None:
    if not said:
        return None
    warned = [(sig, cul) for status, sig, cul in said if status == "warn"]
    if expect is None:
        return not warned
    if expect == "no hang":
        return all(sig != "hang" for sig, _ in warned)
    sig, cul = expect
    return bool(warned) and all(s == sig and (cul is None or c == cul) for s, c in warned)


def opted_out(out: str) -> list[dict]:
    """The pipeline phase's recorded checks judged again as a site that opted its job out
    (``straggler_skip_names`` matching the job's name): the same judge, offline."""
    from gpuhc.checks import jobs, jobs_judge as jj
    from gpuhc.checks.base import Context
    from gpuhc.model.snapshot import Snapshot
    from gpuhc.sources.activity_io import activity_from_dict

    said, prev = [], {}
    for t in jsonl(os.path.join(out, "monitor-cases.jsonl")):
        if t.get("run") != "pipe":
            continue
        act = activity_from_dict(t["activity"])
        names = sorted(set(act.job_names.values()))
        res = jobs.judge(Snapshot("dev", t["time"], activity=act),
                         Context(thresholds={**jj.DEFAULTS, "straggler_skip_names": names}, prev=prev))
        prev = res.state or {}
        said += [{"status": r.status.value, "message": r.message[:240]} for r in res.results]
    return said


def stalls(out: str, watched: list[dict]) -> dict:
    marks = jsonl(os.path.join(out, "stalls.jsonl"))
    delays, missed = [], []
    for m in marks:
        named = [x for x in watched if x["job"] == m["job"] and x["kind"] == "hang" and f"gpu{m['gpu']}" in x["culprits"]
                 and m["start"] - 1 <= x["t"] <= m["start"] + m["seconds"] + 15]
        if named:
            delays.append(round(named[0]["t"] - m["start"], 1))
        else:
            missed.append(m)
    delays.sort()

    def pct(q: float) -> float | None:
        if not delays:
            return None
        k = min(len(delays) - 1, max(0, int(round(q * (len(delays) - 1)))))
        return delays[k]
    wrong = [x for x in watched if x["job"] in {m["job"] for m in marks} and x["kind"] == "hang"
             and not any(m["job"] == x["job"] and m["start"] - 1 <= x["t"] <= m["start"] + m["seconds"] + 15 for m in marks)]
    return {"stalls": len(marks), "named": len(delays), "delays_s": delays, "p50_s": pct(0.5), "p90_s": pct(0.9),
            "missed": missed, "findings_outside_a_stall": [w["text"] for w in wrong]}


def cpu(out: str) -> dict:
    tick = os.sysconf("SC_CLK_TCK")
    per: dict[str, list] = {}
    for rec in jsonl(os.path.join(out, "watch-cpu.jsonl")):
        fields = rec["stat"][rec["stat"].rfind(")") + 2:].split()
        per.setdefault(rec["part"], []).append((rec["t"], (int(fields[11]) + int(fields[12])) / tick))
    res = {}
    for part, pts in per.items():
        if len(pts) >= 2:
            wall, used = pts[-1][0] - pts[0][0], pts[-1][1] - pts[0][1]
            res[part] = {"wall_s": round(wall, 1), "cpu_s": round(used, 2), "percent_of_one_core": round(100 * used / wall, 3)}
    return res


def recording(out: str, device: str) -> int:
    """Both parts' checks, oldest first: the cases under their phase's name, the stalls as
    "stalls" (their jobs' start and finish included)."""
    n = 0
    with open(os.path.join(out, "recording.jsonl"), "w") as f:
        for part in ("cases", "stalls", "long"):
            for t in jsonl(os.path.join(out, f"monitor-{part}.jsonl")):
                said = [f"{r['status']}: {r['message']}" for r in t["results"] if "status" in r]
                f.write(json.dumps({"run": t.get("run") or part, "time": t["time"], "said": said, "activity": t["activity"],
                                    "device": device}, separators=(",", ":")) + "\n")
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    env = open(os.path.join(args.out, "env.txt")).read() if os.path.exists(os.path.join(args.out, "env.txt")) else ""
    device = next((ln for ln in env.splitlines() if ln.startswith("GPU 0:")), "unknown")
    watched = watcher_lines(args.out)
    summary = {"device": device, "cases": cases(args.out, watched), "long": cases(args.out, watched, "long"), "stalls": stalls(args.out, watched), "watcher_cpu": cpu(args.out),
               "recorded_ticks": recording(args.out, device), "pipe_opted_out": opted_out(args.out)}
    summary["long_checkpoints_bytes"] = [p["ckpt_bytes"] for p in jsonl(os.path.join(args.out, "phases-long.txt")) if "ckpt_bytes" in p]
    summary["long_watcher_findings"] = [x["text"] for x in watched if x["job"] == PARTS["long"][1]]
    apps = os.path.join(args.out, "compute-apps.txt")
    if os.path.exists(apps):
        lines = open(apps).read().splitlines()
        pid = lines[0].split()[-1] if lines and lines[0].startswith("watcher pid") else None
        summary["watcher_on_a_gpu"] = any(ln.split(",")[0].strip() == pid for ln in lines[1:]) if pid else None
    cost = os.path.join(args.out, "bench-cost.json")
    if os.path.exists(cost):
        summary["health_check_cost"] = json.load(open(cost))
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for row in summary["cases"] + summary["long"]:
        first = row["watcher_first"]
        print(f"{row['phase']:>9} {row['seconds']:>3.0f}s expect={row['expect']} health_check_ok={row['health_check_ok']} "
              f"watcher={first}")
        for h in row["health_check"]:
            print(f"          +{h['after_s']}s {h['status']} {h['message'][:150]}")
    s = summary["stalls"]
    print(f"stalls: {s['named']}/{s['stalls']} named by the watcher, p50 {s['p50_s']} s, p90 {s['p90_s']} s, delays {s['delays_s']}")
    print(f"pipe, opted out by name: {[x['status'] for x in summary['pipe_opted_out']]}")
    print(f"watcher CPU: {summary['watcher_cpu']}; among the GPUs' compute processes: {summary.get('watcher_on_a_gpu')}")
    print(f"health check cost: {summary.get('health_check_cost')}")
    print(f"long: checkpoints {summary['long_checkpoints_bytes']}, watcher findings {summary['long_watcher_findings']}")


if __name__ == "__main__":
    main()
