"""Bench: `gpuhc sweep run --backend nccl` against a plain torch.distributed all-reduce loop.

Two modes, run on the same GPUs in the same session (bench/sweep_device.sh does both):

``torchrun --nproc_per_node=N bench/bench_sweep.py torch --out T.json``
    the baseline: torch.distributed (NCCL) all-reduce, float32, the same size ladder, timed the
    same way as gpuhc (CUDA events per iteration for latency sizes, one event pair around the
    loop for bandwidth sizes; the slowest rank's time), written in gpuhc's results format.

``python3 bench/bench_sweep.py compare --gpuhc G.json --torch T.json [--gpuhc-wall S]``
    the verdict: busbw within 2 % of the baseline (ratio >= 0.98) at each of 256 MiB, 512 MiB,
    1 GiB and 2 GiB; p50 latency no worse than the baseline's (ratio <= 1) at each size from 8 B
    to 64 KiB; and the whole 8 B -> 2 GiB gpuhc sweep under 60 s of wall time. Every size is
    checked and the worst one is reported; exit 1 when any target is missed (or nothing could be
    compared). Ratios, not absolute numbers: the card and the link decide the absolute ones. With
    one rank (busbw is 0) the bandwidth check compares algbw.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpuhc.sweep.stats import median, size_ladder, summarize_size  # noqa: E402

BW_SIZES = [256 << 20, 512 << 20, 1 << 30, 2 << 30]
SMALL_MAX = 64 << 10


def torch_loop(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    sizes = size_ladder(args.min_bytes, args.max_bytes)
    buf = torch.zeros(sizes[-1] // 4, dtype=torch.float32, device="cuda")
    events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * args.latency_iters)]
    rows = []
    for nbytes in sizes:
        x = buf[: nbytes // 4]
        per_iter = nbytes <= args.latency_max_bytes
        for _ in range(args.warmup):
            dist.all_reduce(x)
        if per_iter:
            for i in range(args.latency_iters):
                events[2 * i].record()
                dist.all_reduce(x)
                events[2 * i + 1].record()
            events[2 * args.latency_iters - 1].synchronize()
            times = [events[2 * i].elapsed_time(events[2 * i + 1]) / 1e3 for i in range(args.latency_iters)]
            mean = sum(times) / len(times)
        else:
            events[0].record()
            for _ in range(args.iters):
                dist.all_reduce(x)
            events[1].record()
            events[1].synchronize()
            times, mean = None, events[0].elapsed_time(events[1]) / 1e3 / args.iters
        gathered: list = [None] * n
        dist.all_gather_object(gathered, (mean, times))
        if rank == 0:
            means = [g[0] for g in gathered]
            iters = [g[1] for g in gathered] if per_iter else None
            rows.append({**summarize_size(nbytes, n, means, iters), "correct": True})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"backend": "torch.distributed", "nranks": n, "nodes": ["localhost"], "sizes": rows}, f, indent=1)
    dist.destroy_process_group()


BW_TARGET = 0.98  # gpuhc busbw / baseline busbw, at each of BW_SIZES
P50_TARGET = 1.0  # gpuhc p50 / baseline p50, at each size up to SMALL_MAX
WALL_TARGET_S = 60.0


def verdict(ours_rows: list[dict], base_rows: list[dict], wall_s: float | None = None) -> dict:
    """Per-size ratios and the checks, each judged at every size (the worst size decides).

    With one rank busbw is 0 (the factor 2(n-1)/n is 0: no bus), so the bandwidth check then
    compares algbw and says so. A check with nothing to compare (a size missing from either
    run) fails: a bench that measured nothing must not pass."""
    ours = {r["bytes"]: r for r in ours_rows}
    base = {r["bytes"]: r for r in base_rows}
    one_rank = all(not ours[s].get("busbw_gbs") and not base[s].get("busbw_gbs") for s in BW_SIZES
                   if s in ours and s in base)
    metric = "algbw_gbs" if one_rank else "busbw_gbs"
    bw, missing_bw = [], []
    for s in BW_SIZES:
        if s in ours and s in base and base[s].get(metric):
            bw.append({"bytes": s, "gpuhc": ours[s][metric], "torch": base[s][metric],
                       "ratio": ours[s][metric] / base[s][metric]})
        else:
            missing_bw.append(s)
    small = [{"bytes": s, "gpuhc": ours[s]["p50_us"], "torch": base[s]["p50_us"],
              "ratio": ours[s]["p50_us"] / base[s]["p50_us"]}
             for s in sorted(ours) if s <= SMALL_MAX and s in base and ours[s].get("p50_us") and base[s].get("p50_us")]
    worst_bw = min(bw, key=lambda r: r["ratio"]) if bw else None
    worst_p50 = max(small, key=lambda r: r["ratio"]) if small else None
    checks: dict = {
        "bandwidth_metric": metric.replace("_gbs", ""),
        "busbw_worst_ratio": worst_bw["ratio"] if worst_bw else None,
        "busbw_worst_bytes": worst_bw["bytes"] if worst_bw else None,
        "busbw_missing_sizes": missing_bw,
        "busbw_within_2pct": bool(bw) and not missing_bw and worst_bw["ratio"] >= BW_TARGET,
        "small_p50_worst_ratio": worst_p50["ratio"] if worst_p50 else None,
        "small_p50_worst_bytes": worst_p50["bytes"] if worst_p50 else None,
        "small_p50_median_ratio": median([r["ratio"] for r in small]) if small else None,
        "small_p50_sizes_worse": [r["bytes"] for r in small if r["ratio"] > P50_TARGET],
        "small_p50_no_worse": bool(small) and worst_p50["ratio"] <= P50_TARGET,
    }
    if wall_s is not None:
        checks["full_sweep_wall_s"] = wall_s
        checks["full_sweep_under_60s"] = wall_s < WALL_TARGET_S
    return {"busbw": bw, "small_p50": small, "checks": checks,
            "ok": all(v for v in checks.values() if isinstance(v, bool))}


def compare(args: argparse.Namespace) -> int:
    out = verdict(_rows(args.gpuhc), _rows(args.torch), args.gpuhc_wall)
    c = out["checks"]
    name = c["bandwidth_metric"]
    print(f"{'size':>12} {'gpuhc ' + name:>12} {'torch ' + name:>12} {'ratio':>7}")
    for r in out["busbw"]:
        print(f"{r['bytes']:>12} {r['gpuhc']:>12.2f} {r['torch']:>12.2f} {r['ratio']:>7.3f}"
              f"{'  MISSED' if r['ratio'] < BW_TARGET else ''}")
    print(f"{'size':>12} {'gpuhc p50us':>12} {'torch p50us':>12} {'ratio':>7}")
    for r in out["small_p50"]:
        print(f"{r['bytes']:>12} {r['gpuhc']:>12.2f} {r['torch']:>12.2f} {r['ratio']:>7.3f}"
              f"{'  MISSED' if r['ratio'] > P50_TARGET else ''}")
    print(json.dumps(c, indent=1))
    if c["busbw_worst_ratio"] is not None:
        print(f"{name} 256 MiB..2 GiB: worst ratio {c['busbw_worst_ratio']:.3f} at {c['busbw_worst_bytes']} B "
              f"(target >= {BW_TARGET}): {'met' if c['busbw_within_2pct'] else 'MISSED'}")
    if c["busbw_missing_sizes"]:
        print(f"{name}: no comparison at {c['busbw_missing_sizes']} B: MISSED")
    if c["small_p50_worst_ratio"] is not None:
        print(f"p50 8 B..64 KiB: worst ratio {c['small_p50_worst_ratio']:.3f} at {c['small_p50_worst_bytes']} B "
              f"(target <= {P50_TARGET}): {'met' if c['small_p50_no_worse'] else 'MISSED'}")
    else:
        print("p50 8 B..64 KiB: nothing to compare: MISSED")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if out["ok"] else 1


def _rows(path: str) -> list[dict]:
    try:
        with open(path) as f:
            rows = json.load(f)["sizes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"bench_sweep: cannot read sizes from {path}: {e}")
    return [r for r in rows if isinstance(r, dict) and isinstance(r.get("bytes"), int)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--out", required=True)
    t.add_argument("--min-bytes", type=int, default=8)
    t.add_argument("--max-bytes", type=int, default=2 << 30)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--iters", type=int, default=20)
    t.add_argument("--latency-iters", type=int, default=100)
    t.add_argument("--latency-max-bytes", type=int, default=1 << 20)
    c = sub.add_parser("compare")
    c.add_argument("--gpuhc", required=True)
    c.add_argument("--torch", required=True)
    c.add_argument("--gpuhc-wall", type=float)
    c.add_argument("--out")
    args = p.parse_args()
    if args.mode == "torch":
        t0 = time.time()
        torch_loop(args)
        print(f"torch loop done in {time.time() - t0:.1f}s", file=sys.stderr)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
