"""Bench: `gpuhc sweep run --backend nccl` against a plain torch.distributed all-reduce loop.

Two modes, run on the same GPUs in the same session (bench/sweep_device.sh does both):

``torchrun --nproc_per_node=N bench/bench_sweep.py torch --out T.json``
    the baseline: torch.distributed (NCCL) all-reduce, float32, the same size ladder, timed the
    same way as gpuhc (CUDA events per iteration for latency sizes, one event pair around the
    loop for bandwidth sizes; the slowest rank's time), written in gpuhc's results format.

``python3 bench/bench_sweep.py compare --gpuhc G.json --torch T.json [--gpuhc-wall S]``
    the verdict: busbw at 256 MiB..2 GiB within 2 % of the baseline (ratio >= 0.98), small-size
    p50 latency no worse than the baseline's (median ratio over 8 B..64 KiB), and the whole
    8 B -> 2 GiB gpuhc sweep under 60 s of wall time. Ratios, not absolute numbers: the card and
    the link decide the absolute ones.
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


def compare(args: argparse.Namespace) -> int:
    ours = {r["bytes"]: r for r in json.load(open(args.gpuhc))["sizes"]}
    base = {r["bytes"]: r for r in json.load(open(args.torch))["sizes"]}
    out: dict = {"busbw": [], "small_p50": [], "checks": {}}
    print(f"{'size':>12} {'gpuhc busbw':>12} {'torch busbw':>12} {'ratio':>7}")
    for s in BW_SIZES:
        # One rank has no bus (busbw 0): there is nothing to compare.
        if s in ours and s in base and base[s]["busbw_gbs"] > 0:
            ratio = ours[s]["busbw_gbs"] / base[s]["busbw_gbs"]
            out["busbw"].append({"bytes": s, "gpuhc": ours[s]["busbw_gbs"], "torch": base[s]["busbw_gbs"], "ratio": ratio})
            print(f"{s:>12} {ours[s]['busbw_gbs']:>12.2f} {base[s]['busbw_gbs']:>12.2f} {ratio:>7.3f}")
    print(f"{'size':>12} {'gpuhc p50us':>12} {'torch p50us':>12} {'ratio':>7}")
    for s in sorted(ours):
        if s <= SMALL_MAX and s in base and "p50_us" in ours[s] and "p50_us" in base[s]:
            ratio = ours[s]["p50_us"] / base[s]["p50_us"]
            out["small_p50"].append({"bytes": s, "gpuhc": ours[s]["p50_us"], "torch": base[s]["p50_us"], "ratio": ratio})
            print(f"{s:>12} {ours[s]['p50_us']:>12.2f} {base[s]['p50_us']:>12.2f} {ratio:>7.3f}")
    bw_ok = bool(out["busbw"]) and all(r["ratio"] >= 0.98 for r in out["busbw"])
    lat_ratio = median([r["ratio"] for r in out["small_p50"]]) if out["small_p50"] else float("nan")
    out["checks"] = {
        "busbw_within_2pct": bw_ok,
        "small_p50_median_ratio": lat_ratio,
        "small_p50_no_worse": lat_ratio <= 1.0,
    }
    if args.gpuhc_wall is not None:
        out["checks"]["full_sweep_wall_s"] = args.gpuhc_wall
        out["checks"]["full_sweep_under_60s"] = args.gpuhc_wall < 60.0
    print(json.dumps(out["checks"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(v for k, v in out["checks"].items() if isinstance(v, bool)) else 1


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
