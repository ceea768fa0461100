#!/usr/bin/env python3
"""Where a whole `gpuhc check` process spends its time: imports and Python work, by module.

Two views of one command (default: the passive replay of the 8-GPU healthy node,
examples/scenarios/healthy-8xh100.yaml, with an empty config and a fresh state directory):

- imports: ``python -X importtime`` over ``--runs`` fresh processes, each module's own import
  time (its "self" column) as the median over the runs, so one noisy run on a shared machine
  does not name the wrong culprit; listed by cost, with the total per package (click, gpuhc's
  subpackages, the standard library). importtime does not see a module imported through
  ``importlib.import_module`` (the CLI's commands, the check registry's modules): those modules'
  own imports show at the top level, and bench/check_costs.py times each check module itself;
- functions: one run under cProfile in this process (``os._exit`` at the end replaced by an
  exception, so the profile is kept), the functions with the most cumulative time that are not
  the import machinery. Source reads run in threads that cProfile does not follow: their wall
  time is in ``gpuhc check --timings``.

    python3 bench/profile_check.py [--runs 9] [--top 40] [-- gpuhc check arguments]

A diagnostic, not a bench: it has no target; bench/bench_check.py holds the ratios.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import runpy
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(ROOT, "examples", "scenarios", "healthy-8xh100.yaml")


def default_args(tmp: str) -> list[str]:
    empty = os.path.join(tmp, "empty.yaml")
    open(empty, "w").close()
    return ["check", "--stage", "passive", "--config", empty, "--nvml-scenario", SCENARIO]


def import_times(argv: list[str], runs: int, env: dict[str, str]) -> dict[str, list[int]]:
    """module -> its own import time (µs) in each run."""
    selfs: dict[str, list[int]] = collections.defaultdict(list)
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpuhc", *argv], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
        for line in proc.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            own, _cumulative, name = line[len("import time:"):].split("|", 2)
            selfs[name.strip()].append(int(own))
    return selfs


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "gpuhc":
        return ".".join(parts[:2]) if len(parts) > 2 else "gpuhc (top level)"
    return parts[0] if parts[0] in ("click", "yaml", "rich", "pynvml", "numpy") else "stdlib and others"


def profile_once(argv: list[str]) -> str:
    """cProfile of one run in this process; the report's text."""

    class Exit(Exception):
        pass

    def no_exit(code: int) -> None:
        raise Exit(code)

    real_exit, real_argv, real_stdout = os._exit, sys.argv, sys.stdout
    os._exit, sys.argv, sys.stdout = no_exit, ["gpuhc", *argv], io.StringIO()  # type: ignore[assignment]
    prof = cProfile.Profile()
    prof.enable()
    try:
        runpy.run_module("gpuhc", run_name="__main__")
    except (Exit, SystemExit):
        pass
    finally:
        prof.disable()
        os._exit, sys.argv, sys.stdout = real_exit, real_argv, real_stdout
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(r"gpuhc/(?!.*__init__).*\.py", 40)
    return out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("gpuhc_args", nargs="*", help="after --: the gpuhc arguments (default: the passive replay)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpuhc-profile-")
    argv = args.gpuhc_args or default_args(tmp)
    env = dict(os.environ, GPUHC_STATE_DIR=os.path.join(tmp, "state"))
    os.environ["GPUHC_STATE_DIR"] = env["GPUHC_STATE_DIR"]
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "gpuhc")], check=False)
    subprocess.run([sys.executable, "-m", "gpuhc", *argv], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)  # fills the parse memo, as a node's first run does

    selfs = import_times(argv, args.runs, env)
    med = {name: statistics.median(v) for name, v in selfs.items()}
    total = sum(med.values())
    print(f"gpuhc {' '.join(argv)}")
    print(f"imports: {len(med)} modules, {total / 1000:.1f} ms (sum of medians of own time, {args.runs} runs)")
    by_pkg: dict[str, float] = collections.defaultdict(float)
    for name, us in med.items():
        by_pkg[package_of(name)] += us
    for pkg, us in sorted(by_pkg.items(), key=lambda kv: -kv[1]):
        print(f"  {us / 1000:7.2f} ms  {pkg}")
    print(f"the {args.top} dearest modules:")
    for name, us in sorted(med.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {us / 1000:7.2f} ms  {name}")
    print("\nfunctions (one run, cProfile, main thread):")
    print(profile_once(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
