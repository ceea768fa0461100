#!/usr/bin/env python3
"""Each check's and each source's typical cost, for the table in docs/checks.md ("What a check costs").

Runs `gpuhc check --timings --json` ``--runs`` times in fresh processes (the first, untimed, fills
the parse memo, as a node's first run does) and prints the median of each number as a Markdown
table: a check's own judging, the time it waited for its sources, and each source's read in its
own thread. As many fresh processes again give the CPU time of importing each check's module,
in the run's order after what the command imports first (the modules a check is the first to
import are counted with it; one module may declare two checks, both shown with it). On a GPU node, without ``--replay``, it times this node's live passive stage as the
shipped config runs it; with ``--replay`` (any machine), the healthy 8-GPU recording.

    python3 bench/check_costs.py --replay [--runs 9] [--config etc/gpuhc.yaml]   # a CPU machine
    python3 bench/check_costs.py [--runs 9] [--config etc/gpuhc.yaml]            # a GPU node, as root

Each number is wall-clock: a source's read includes the time its thread waited for Python's
lock while another ran, so on a loaded machine sources read at once look dearer than they are.
A diagnostic, no target; bench/bench_check.py holds the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEALTHY = os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml")
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)), ROOT]
from bench_check import SHIPPED, shipped_config  # noqa: E402  (the same config, moved into a scratch directory)


# Imports each check module in the run's order after what the command imports before it, and
# prints the CPU ms each took. (`python -X importtime` does not see modules imported through
# importlib.import_module, as the check registry imports them.)
IMPORTS = """
import importlib, json, time
import gpuhc.cli.check_cmd, gpuhc.run.runner, gpuhc.checks
out = {}
for name in gpuhc.checks.MODULES:
    t = time.thread_time()
    importlib.import_module("gpuhc.checks." + name)
    out[name] = (time.thread_time() - t) * 1000
print(json.dumps(out))
"""


def import_costs(env: dict[str, str], runs: int) -> dict[str, float | None]:
    """check id -> median CPU ms of importing its module in a fresh process, in the run's order
    (the modules a check is the first to import are counted with it)."""
    import importlib

    from gpuhc.checks import MODULES

    owner = {c.id: name for name in MODULES for c in importlib.import_module(f"gpuhc.checks.{name}").CHECKS}
    per_module: dict[str, list[float]] = {name: [] for name in MODULES}
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", IMPORTS], env=env, capture_output=True, text=True,
                              timeout=120, cwd=ROOT, check=True)
        for name, ms in json.loads(proc.stdout).items():
            per_module[name].append(ms)
    return {cid: median(per_module[module]) for cid, module in owner.items()}


def median(values: list) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 2) if got else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--replay", action="store_true", help="time the healthy 8-GPU recording, not this node")
    ap.add_argument("--config", default=SHIPPED)
    ap.add_argument("--stage", default="passive")
    ap.add_argument("--json", action="store_true", help="the medians as one JSON document")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpuhc-costs-")
    env = dict(os.environ, GPUHC_STATE_DIR=os.path.join(tmp, "state"), GPUHC_CACHE_DIR=os.path.join(tmp, "cache"))
    os.makedirs(env["GPUHC_CACHE_DIR"], mode=0o700)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [sys.executable, "-m", "gpuhc", "check", "--stage", args.stage, "--config", shipped_config(tmp, args.config),
            "--timings", "--json"] + (["--nvml-scenario", HEALTHY] if args.replay else [])
    docs = []
    for i in range(args.runs + 1):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        if proc.returncode not in (0, 1, 3):
            sys.stderr.write(proc.stderr[-2000:])
            return 2
        if i:  # the first run fills the parse memo
            docs.append(json.loads(proc.stdout)["timings"])
    checks = {cid: {"judge_ms": median([d["checks"].get(cid, {}).get("judge_ms") for d in docs]),
                    "wait_ms": median([d["checks"].get(cid, {}).get("wait_ms") for d in docs]),
                    "sources": docs[-1]["checks"][cid]["sources"]} for cid in docs[-1]["checks"]}
    imports = import_costs(dict(env, PYTHONPATH=ROOT), args.runs)
    for cid, c in checks.items():
        c["import_ms"] = imports.get(cid)
    sources = {name: median([d["sources"].get(name, {}).get("wall_ms") for d in docs]) for name in docs[-1]["sources"]}
    phases = {name: median([d["phases"].get(name) for d in docs]) for name in docs[-1]["phases"]}
    out = {"machine": platform.node(), "cpus": os.cpu_count(), "replay": args.replay, "runs": args.runs,
           "stage": args.stage, "config": args.config, "phases_ms": phases, "sources_ms": sources, "checks": checks}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"machine {out['machine']} ({out['cpus']} CPUs), {'replay of healthy-8xh100' if args.replay else 'live'}, "
          f"stage {args.stage}, medians of {args.runs} runs, ms")
    print("\n| check | import | judge | waited for sources | sources |\n|---|---|---|---|---|")
    for cid, c in sorted(checks.items(), key=lambda kv: -((kv[1]["import_ms"] or 0) + (kv[1]["judge_ms"] or 0))):
        print(f"| `{cid}` | {c['import_ms']} | {c['judge_ms']} | {c['wait_ms']} | {', '.join(c['sources'])} |")
    print("\n| source | read |\n|---|---|")
    for name, ms in sorted(sources.items(), key=lambda kv: -(kv[1] or 0)):
        print(f"| `{name}` | {ms} |")
    print("\n| phase | ms |\n|---|---|")
    for name, ms in phases.items():
        print(f"| {name[:-3]} | {ms} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
