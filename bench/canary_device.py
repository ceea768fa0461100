"""The canary on the lent GPU machine: what docs/verification.md records for it.

    PYTHONPATH=$PWD python3 bench/canary_device.py [--repeats N]   (writes $OUT/canary.json)

On every GPU of the machine, through the production path (``gpuhc.canary.node.run``: the
supervised worker, the CuPy backend, the verdict):

1. two runs of the default cases and the HBM pattern pass: seconds per GPU (wall and busy), TFLOP/s per case against
   the GPU's dense peak from NVIDIA's data sheets, and against torch.matmul on the same shape in
   the same run (a practical ceiling, where torch is installed); every digest of run 1 equal to
   run 2's, bit for bit; the exact case equal to the CPU's exact product;
2. a one-bit flip injected in one output of one run (the test harness's path): caught,
   unconfirmed on the clean retest, and named (the element and the bit that flipped);
3. the same flip made sticky on the exact case: confirmed, named against the CPU product.

An exact case's answer is exact only while its word holds no fp64 output (the flips index 32-bit
words of fp32 outputs); the default cases satisfy that.

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

from gpuhc.canary import node  # noqa: E402
from gpuhc.canary.settings import SCHEMA  # noqa: E402

# Dense peaks, TFLOP/s (NVIDIA H100/H200 data sheets, SXM and PCIe; the sparse figures are twice these).
PEAKS = {
    "H100 PCIe": {"bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51, "fp64": 51},
    "H100": {"bf16": 989, "fp16": 989, "tf32": 495, "fp32": 67, "fp64": 67},
    "H200": {"bf16": 989, "fp16": 989, "tf32": 495, "fp32": 67, "fp64": 67},
}


def peak_of(name: str) -> dict:
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in (name or ""):
            return PEAKS[key]
    return {}


def torch_ceiling(cases: list[str], repeats: int) -> dict:
    """torch.matmul TFLOP/s on GPU 0 for each case's precision and shape (fp32 with TF32 off)."""
    try:
        import torch
    except ImportError:
        return {}
    from gpuhc.canary.cases import parse

    out = {}
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32, "fp64": torch.float64}
    for name in cases:
        c = parse(name)
        torch.backends.cuda.matmul.allow_tf32 = c.precision == "tf32"
        a = torch.rand(c.n, c.n, device="cuda:0").to(dt[c.precision])
        b = torch.rand(c.n, c.n, device="cuda:0").to(dt[c.precision])
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            a @ b
        torch.cuda.synchronize()
        out[name] = round(repeats * c.flops / (time.perf_counter() - t0) / 1e12, 1)
        del a, b
    torch.cuda.empty_cache()
    return out


def result_of(doc: dict, subject: str) -> dict:
    """The run's result for ``subject``, or one that says why there is none (the run's error)."""
    got = [x for x in doc.get("results") or [] if x.get("subject") == subject]
    return got[0] if got else {"status": "missing", "message": f"no result: {doc.get('error')}", "action": None}


def run(params: dict, limit: float) -> dict:
    t0 = time.monotonic()
    r = node.run(params, limit)
    doc = r.record()
    doc["wall_s"] = round(time.monotonic() - t0, 2)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=SCHEMA["repeats"].default)
    ap.add_argument("--cases", help="comma-separated (default: canary.cases' default); the flips go into the first "
                    "exact and the first bf16 random case")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpuhc-out"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    cases = a.cases.split(",") if a.cases else list(SCHEMA["cases"].default)
    exact = next(c for c in cases if "-exact-" in c)
    rand = next(c for c in cases if c.startswith("bf16-random-"))
    params = {"cases": cases, "seed": SCHEMA["seed"].default, "repeats": a.repeats, "known": {},
              "memtest": {"fraction": SCHEMA["memtest_fraction"].default, "max_gib": SCHEMA["memtest_max_gib"].default,
                          "seed": SCHEMA["seed"].default}}
    report: dict = {"cases": cases, "repeats": a.repeats, "checks": {}}
    bad: list[str] = []

    one, two = run(params, 600), run(params, 600)
    report["runs"] = [one, two]
    if one["error"] or two["error"]:
        bad.append(f"not run: {one['error'] or two['error']}")
    per_gpu = {}
    for s, g in (one.get("data") or {}).get("gpus", {}).items():
        peak = peak_of(g.get("name"))
        rows = {}
        for name, c in g["cases"].items():
            other = two["data"]["gpus"][s]["cases"][name]
            rows[name] = {"tflops": c["tflops"], "peak": peak.get(c["precision"]),
                          "of_peak": round(c["tflops"] / peak[c["precision"]], 3) if peak.get(c["precision"]) else None,
                          "seconds": c["seconds"], "digest": c["digest"], "equal_in_run_2": c["digest"] == other["digest"],
                          "stable": c["stable"] and other["stable"], "ref_from": c["ref_from"], "match": c["match"]}
            if not rows[name]["equal_in_run_2"] or not rows[name]["stable"]:
                bad.append(f"{s} {name}: not bit-for-bit reproducible")
            if c["ref_from"] == "exact" and not c["match"]:
                bad.append(f"{s} {name}: not the CPU's exact product")
        hbm = ((one["data"].get("memtest") or {}).get("gpus") or {}).get(s) or {}
        per_gpu[s] = {"name": g.get("name"), "busy_s": round(sum(r["seconds"] for r in rows.values()), 3), "cases": rows,
                      "hbm": {k: hbm.get(k) for k in ("bytes", "seconds", "gbps", "bad_words")}}
    report["gpus"] = per_gpu
    report["wall_s"] = [one["wall_s"], two["wall_s"]]
    statuses = [x["status"] for x in one["results"] + two["results"]]
    if any(st != "pass" for st in statuses):
        bad.append(f"healthy runs not all pass: {statuses}")

    with open(os.path.join(a.out, "canary.json"), "w") as f:  # the healthy part, should a flip run fail
        json.dump(report, f, indent=1, default=str)
    # 2. one flipped bit, once, on a random case, judged against run 1's answers as the fleet's
    key = one["data"]["gpus"]["gpu0"]["key"]
    known = {key: {n: c["digest"] for n, c in one["data"]["gpus"]["gpu0"]["cases"].items()}}
    n = int(rand.rsplit("-", 1)[1])
    word, bit = (n * n) // 3 + 4321 % n, 17
    inj = {"subject": "gpu0", "case": rand, "word": word, "bit": bit}
    once = run({**params, "cases": [rand], "known": known, "inject": inj, "memtest": None}, 300)
    r0 = result_of(once, "gpu0")
    m = ((((once.get("data") or {}).get("gpus") or {}).get("gpu0") or {}).get("cases") or {}).get(rand, {}).get(
        "mismatch") or {}
    el = (m.get("bits") or {}).get("elements") or [{}]
    named = (el[0].get("row"), el[0].get("col"), el[0].get("bits")) == (word // n, word % n, [bit])
    report["checks"]["flip_once"] = {"status": r0["status"], "message": r0["message"], "named": named}
    if r0["status"] != "warn" or m.get("confirmed") or not named:
        bad.append(f"the one-off flip was not caught and named: {r0['message']}")

    # 3. the same flip sticky, on the exact case: confirmed, named against the CPU product
    n2 = int(exact.rsplit("-", 1)[1])
    row = n2 * 3 // 8
    inj = {"subject": "gpu0", "case": exact, "word": row * n2 + 5, "bit": 30, "sticky": True}
    sticky = run({**params, "cases": [exact], "inject": inj, "memtest": None}, 300)
    r1 = result_of(sticky, "gpu0")
    m = ((((sticky.get("data") or {}).get("gpus") or {}).get("gpu0") or {}).get("cases") or {}).get(exact, {}).get(
        "mismatch") or {}
    el = (m.get("bits") or {}).get("elements") or [{}]
    named = (el[0].get("row"), el[0].get("col"), el[0].get("bits")) == (row, 5, [30])
    report["checks"]["flip_sticky"] = {"status": r1["status"], "message": r1["message"], "named": named,
                                       "against": m.get("bits_against")}
    if r1["status"] != "fail" or not m.get("confirmed") or not named or r1["action"] != "none":
        bad.append(f"the sticky flip was not confirmed and named: {r1['message']}")

    # torch last: its CUDA context stays in this process, and the canary leaves a GPU that a
    # process holds alone (the flips above would find gpu0 busy)
    report["torch_tflops_gpu0"] = torch_ceiling(cases, a.repeats)
    report["ok"] = not bad
    with open(os.path.join(a.out, "canary.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    for s, g in per_gpu.items():
        print(f"{s} {g['name']}: products busy {g['busy_s']} s per run, wall {report['wall_s']} s; HBM pattern pass "
              f"{(g['hbm']['bytes'] or 0) / 2**30:.1f} GiB in {g['hbm']['seconds']} s ({g['hbm']['gbps']} GB/s), "
              f"{g['hbm']['bad_words']} wrong words")
        for name, r in g["cases"].items():
            print(f"  {name:18} {r['tflops']:8.1f} TFLOP/s  peak {r['peak']}  ({r['of_peak']})  "
                  f"torch {report['torch_tflops_gpu0'].get(name)}  {r['seconds']:.3f} s  digest {r['digest']}  "
                  f"run2 equal {r['equal_in_run_2']}  ref {r['ref_from']} match {r['match']}")
    for k, v in report["checks"].items():
        print(f"{k}: {v['status']} named={v['named']}: {v['message']}")
    print("OK" if not bad else "FAILED: " + "; ".join(bad))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
