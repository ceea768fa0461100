"""The burn-in in every precision on the lent GPU machine: what docs/verification.md records for it.

    PYTHONPATH=$PWD python3 bench/burnin_device.py --out DIR   (writes DIR/burnin-precisions.json)

On every GPU of the machine at once, through the production path (the epilog's burn-in task with
the shipped settings, run by the supervised worker as ``gpuhc epilog`` runs it), three runs:

1. two runs with the shipped settings (bf16 and tf32 timed, the correctness pass in fp16, fp32
   and fp64): every precision's hash equal on every GPU across the two runs, and across GPUs of
   one model and SM count; each precision's TFLOP/s per GPU, against the data sheet's dense peak;
   each precision's float64 reference error (the healthy values tests/helpers/active_results.py
   holds); the burn-in's verdict PASS on every GPU, and gpu-speed's values the timed precisions only;
2. one run with the pass off (``check_dtypes: []``): the seconds the pass adds, as the task's wall
   time against the second run's (both warm), and as the worker's own phases of each pass precision.

Exit 1 when any of these fails; the last line says which. Never touches clocks, power limits or
resets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from canary_device import peak_of  # noqa: E402  (bench/ is this script's directory)

from gpuhc.active import burnin, plan, speed  # noqa: E402
from gpuhc.active.registry import CHECK, correctness_pass  # noqa: E402


def run(params: dict, timeout_s: float) -> tuple[dict, float]:
    """One burn-in task on every GPU in a fresh worker: (its data, wall seconds of the task)."""
    from gpuhc.active.plan import Task
    from gpuhc.active.supervise import Worker, default_argv, run_tasks, worker_env

    every = lambda h: [d["cuda"] for d in h.get("devices") or []]  # noqa: E731
    t0 = time.monotonic()
    sess = run_tasks([Task("burnin", params, ["burn-in", "gpu-speed"])], lambda: Worker(default_argv(), worker_env()),
                     time.monotonic() + timeout_s, 60.0, lambda h: (every(h), every(h)), lambda t, n: timeout_s)
    wall = time.monotonic() - t0
    o = (sess.outcomes or {}).get("burnin")
    if o is None or o.status != "done":
        raise SystemExit(f"burn-in task did not deliver: {sess.start_error or (o.message if o else 'no outcome')}")
    return o.data, wall


def sections(data: dict) -> dict[str, dict]:
    return {**data.get("dtypes", {}), **data.get("checked", {})}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per run (a node's first compiles kernels)")
    a = p.parse_args()
    shipped = next(t for t in plan.build("epilog", {}).tasks if t.name == "burnin").params
    off = dict(shipped, check_dtypes=[])
    bad: list[str] = []
    one, wall1 = run(shipped, a.timeout)
    two, wall2 = run(shipped, a.timeout)
    none, wall0 = run(off, a.timeout)
    pass_dts = correctness_pass(shipped)
    if list(one.get("checked") or {}) != pass_dts:
        bad.append(f"the pass computed {list(one.get('checked') or {})}, not {pass_dts}")
    report: dict = {"params": shipped, "precisions": {}, "wall_s": {"shipped": [round(wall1, 3), round(wall2, 3)],
                                                                    "pass_off": round(wall0, 3)}}
    for dt, dd in sections(one).items():
        g1, g2 = dd["gpus"], sections(two).get(dt, {}).get("gpus", {})
        models: dict[tuple, set] = {}
        for s, g in g1.items():
            models.setdefault((g.get("name"), g.get("sm_count")), set()).add(g.get("hash"))
        across_runs = all(g.get("hash") is not None and g2.get(s, {}).get("hash") == g["hash"] for s, g in g1.items())
        across_gpus = all(len(h) == 1 for h in models.values())
        if not across_runs:
            bad.append(f"{dt}: a GPU's hash differs between the two runs")
        if not across_gpus:
            bad.append(f"{dt}: identical GPUs gave different hashes")
        report["precisions"][dt] = {
            "pass": "check" if dt in pass_dts else "timed",
            "n": one.get("check_n") if dt in pass_dts else one.get("n"),
            "hash_equal_across_runs": across_runs, "hash_equal_across_gpus": across_gpus,
            "gpus": {s: {"hash": [g.get("hash"), g2.get(s, {}).get("hash")],
                         "tflops": [g.get("tflops"), g2.get(s, {}).get("tflops")],
                         "peak_tflops": peak_of(g.get("name") or "").get(dt),
                         "ref_rel_err": [g.get("ref_rel_err"), g2.get(s, {}).get("ref_rel_err")],
                         "hashes": g.get("hashes"), "iters": dd.get("iters")} for s, g in g1.items()},
            "phases_s": [dd.get("phases_s"), sections(two).get(dt, {}).get("phases_s")],
        }
    # what the pass costs: the worker's own phases of its precisions (all GPUs at once), and the
    # task's wall time against the same task without it (both runs warm)
    phases = [round(sum(sum((sections(d).get(dt, {}).get("phases_s") or {}).values()) for dt in pass_dts), 3)
              for d in (one, two)]
    report["added_s"] = {"pass_phases_per_run": phases, "wall_vs_pass_off": round(wall2 - wall0, 3),
                         "estimate": round(plan.Task("burnin", shipped, []).estimate_s(1)
                                           - plan.Task("burnin", off, []).estimate_s(1), 3)}
    for label, data in (("run 1", one), ("run 2", two)):
        verdict = burnin.judge(data, CHECK["burn-in"].defaults)
        report.setdefault("burn_in", []).append([f"{r.status.value} {r.message}" for r in verdict])
        if any(r.status.value != "pass" for r in verdict):
            bad.append(f"{label}: the burn-in did not pass every GPU")
        rates = speed.judge(data, CHECK["gpu-speed"].defaults)
        if any(set(r.value) - {"nvml", *data["dtypes"]} for r in rates):
            bad.append(f"{label}: gpu-speed read a precision it does not time")
    report["ok"] = not bad
    report["problems"] = bad
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "burnin-precisions.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    for dt, d in report["precisions"].items():
        rates = [g["tflops"][0] for g in d["gpus"].values()]
        print(f"{dt:5} {d['pass']:5} n={d['n']} runs-equal={d['hash_equal_across_runs']} "
              f"gpus-equal={d['hash_equal_across_gpus']} TFLOP/s {min(rates)}-{max(rates)}")
    print("added seconds:", report["added_s"])
    print("ok" if not bad else "FAILED: " + "; ".join(bad))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
