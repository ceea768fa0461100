"""Benchmarks of the active checks against the frameworks' own plain workloads, same GPUs, same run.

Subcommands (each prints a table and, with --json, writes its numbers):

  compare   gpuhc's burn-in GEMM vs torch.matmul (same shape and dtype), gpuhc's HBM copy vs
            torch's copy_, gpuhc's local NCCL all-reduce vs a torch.distributed all-reduce loop
            (one process per GPU, NCCL backend). Ratios of medians; pass marks at 95 % / 95 % / 3 %.
  suite     run_active() for a stage, with the wall time against the stage budget.

Timing: CUDA events around each iteration, warm-up first, medians over the repeats; the two
sides of a comparison alternate (A, B, A, B) so that clock drift and heat hit both.
Run on a GPU machine only: `python bench/bench_active.py compare --json out.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _devices() -> list[dict]:
    from gpuhc.active.worker import hello

    return hello()["devices"]


# ------------------------------------------------------------------------------- matmul


def _gpuhc_gemm_tflops(n: int, dtype: str, iters: int) -> list[float]:
    from gpuhc.active import gpu
    from gpuhc.active.burnin import Gemm

    cp = gpu.cupy()
    with cp.cuda.Device(0):
        stream = gpu.stream()
        g = Gemm(n, dtype, 1234, stream)
        t = gpu.DeviceTimer(stream, 0)
        for _ in range(5):
            g.run()
        for _ in range(iters):
            ev = t.start()
            g.run()
            t.stop(ev)
        out = [g.flops() / s / 1e12 for s in t.seconds()]
        del g
    gpu.release()
    return out


def _torch_matmul_tflops(n: int, dtype: str, iters: int) -> list[float]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype]
    gen = torch.Generator(device="cuda:0").manual_seed(1234)
    a = (torch.rand(n, n, device="cuda:0", generator=gen) * 2 - 1).to(dt)
    b = (torch.rand(n, n, device="cuda:0", generator=gen) * 2 - 1).to(dt)
    for _ in range(5):
        c = torch.matmul(a, b)
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        c = torch.matmul(a, b)
        e.record()
        times.append((s, e))
    torch.cuda.synchronize()
    out = [2 * n**3 / (s.elapsed_time(e) / 1e3) / 1e12 for s, e in times]
    del a, b, c
    torch.cuda.empty_cache()
    return out


def _burnin_reported(n: int, dtype: str, seconds: float, devices: list[dict]) -> float:
    from gpuhc.active import burnin

    data = burnin.measure({"n": n, "dtypes": [dtype], "seconds": seconds, "seed": 7, "hash_every": 8}, devices[:1])
    return next(iter(data["dtypes"][dtype]["gpus"].values()))["tflops"]


# ------------------------------------------------------------------------------- HBM


def _gpuhc_copy(mib: int, devices: list[dict]) -> float:
    from gpuhc.active import gpu, hbm

    data = hbm.measure({"mib": mib, "repeats": 30, "seed": 3}, devices[:1])
    gpu.release()
    return next(iter(data["gpus"].values()))["gbps"]


def _torch_copy(mib: int) -> float:
    import torch

    n = (mib << 20) // 4
    src = torch.rand(n, device="cuda:0")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        times.append((s, e))
    torch.cuda.synchronize()
    out = statistics.median(2 * (mib << 20) / (s.elapsed_time(e) / 1e3) / 1e9 for s, e in times)
    del src, dst
    torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------------------- NCCL


def _gpuhc_allreduce(mib: int, iters: int, devices: list[dict]) -> float:
    from gpuhc.active import gpu, nccl_local

    data = nccl_local.measure({"mib": mib, "iters": iters, "warmup": 5}, devices)
    gpu.release()
    assert not any(g["bad"] for g in data["gpus"].values()), data
    return data["busbw_gbps"]


def _torch_rank(rank: int, world: int, mibs: list[int], iters: int, port: int, q) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    for mib in mibs:
        x = torch.ones((mib << 20) // 4, device=f"cuda:{rank}")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            dist.all_reduce(x)
        e.record()
        torch.cuda.synchronize()
        t = torch.tensor([s.elapsed_time(e) / 1e3 / iters], device=f"cuda:{rank}")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            q.put((mib, (mib << 20) / t.item() / 1e9 * 2 * (world - 1) / world))
        del x
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch_allreduce(mibs: list[int], iters: int, world: int) -> dict[int, float]:
    """One torch.distributed session (one process per GPU, NCCL backend) over all sizes."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_torch_rank, args=(r, world, mibs, iters, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    out = dict(q.get(timeout=120) for _ in mibs)
    for p in procs:
        p.join(timeout=30)
    return out


# ------------------------------------------------------------------------------- commands


def _row(name: str, o: float, t: float, target: str) -> None:
    print(f"{name:42} {o:9.1f} {t:10.1f} {o / t:7.3f}  {target}", flush=True)


def compare(args) -> dict:
    devices = _devices()
    out: dict = {"gpus": len(devices), "name": devices[0].get("name") if devices else None}
    print(f"{'workload':42} {'gpuhc':>9} {'framework':>10} {'ratio':>7}  target", flush=True)
    for dtype in args.dtypes:
        ours, theirs = [], []
        for _ in range(2):  # A B A B
            ours += _gpuhc_gemm_tflops(args.n, dtype, args.iters)
            theirs += _torch_matmul_tflops(args.n, dtype, args.iters)
        o, t = statistics.median(ours), statistics.median(theirs)
        burn = _burnin_reported(args.n, dtype, 3.0, devices)
        out[f"matmul_{dtype}"] = {"gpuhc_tflops": round(o, 1), "torch_tflops": round(t, 1), "ratio": round(o / t, 4),
                                  "burnin_reported_tflops": burn, "burnin_ratio": round(burn / t, 4)}
        _row(f"matmul {dtype} {args.n}^3 (TFLOP/s)", o, t, ">= 0.95")
        _row(f"burn-in reported {dtype} (TFLOP/s)", burn, t, ">= 0.95")
    ours, theirs = [], []
    for _ in range(3):
        ours.append(_gpuhc_copy(args.hbm_mib, devices))
        theirs.append(_torch_copy(args.hbm_mib))
    o, t = statistics.median(ours), statistics.median(theirs)
    out["hbm"] = {"gpuhc_gbps": round(o, 1), "torch_gbps": round(t, 1), "ratio": round(o / t, 4)}
    _row(f"HBM copy {args.hbm_mib} MiB (GB/s r+w)", o, t, ">= 0.95")
    if len(devices) >= 2:
        ours_by = {m: [_gpuhc_allreduce(m, args.nccl_iters, devices)] for m in args.nccl_mib}
        theirs_by = _torch_allreduce(args.nccl_mib, args.nccl_iters, len(devices))
        for m in args.nccl_mib:  # A B A
            ours_by[m].append(_gpuhc_allreduce(m, args.nccl_iters, devices))
            o, t = statistics.median(ours_by[m]), theirs_by[m]
            out[f"nccl_{m}"] = {"gpuhc_busbw": round(o, 1), "torch_busbw": round(t, 1), "ratio": round(o / t, 4),
                                "gpuhc_all": ours_by[m]}
            _row(f"all-reduce {m} MiB x{len(devices)} (busbw GB/s)", o, t, "0.97..1.03")
    return out


def suite(args) -> dict:
    from gpuhc.active import run_active
    from gpuhc.active.context import ActiveContext
    from gpuhc.profiles import select_profile

    import pynvml  # not CuPy: this process must not hold a CUDA context the worker would see

    pynvml.nvmlInit()
    names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
    devices = [{"name": n.decode() if isinstance(n, bytes) else n} for n in names]
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        devices = devices[: len(os.environ["CUDA_VISIBLE_DEVICES"].split(","))]
    profile = select_profile(devices[0].get("name") if devices else None).name
    cfg: dict = {}
    if args.burnin_s is not None:
        cfg = {args.stage: {"burnin_s": args.burnin_s}}
    if args.dtypes:
        cfg["dtypes"] = args.dtypes
    t0 = time.monotonic()
    res = run_active(args.stage, ActiveContext(profile_name=profile, config=cfg, budget_s=args.budget,
                                               progress=True))
    wall = time.monotonic() - t0
    for r in res:
        print(f"{r.status.value:5} {r.check:10} {r.subject:12} {r.message}")
    print(f"{args.stage} on {len(devices)} GPUs ({profile}): {wall:.1f}s wall of a {args.budget:.0f}s budget")
    return {"stage": args.stage, "gpus": len(devices), "profile": profile, "wall_s": round(wall, 2),
            "budget_s": args.budget, "results": [r.to_dict() for r in res]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--n", type=int, default=8192)
    c.add_argument("--dtypes", nargs="+", default=["bf16", "tf32"])
    c.add_argument("--iters", type=int, default=30)
    c.add_argument("--hbm-mib", type=int, default=2048)
    c.add_argument("--nccl-mib", type=int, nargs="+", default=[1024, 2048])
    c.add_argument("--nccl-iters", type=int, default=20)
    s = sub.add_parser("suite")
    s.add_argument("--stage", default="epilog")
    s.add_argument("--budget", type=float, default=30.0)
    s.add_argument("--burnin-s", type=float, default=None)
    s.add_argument("--dtypes", nargs="+", default=None)
    for p in (c, s):
        p.add_argument("--json", default=None, help="append this run's numbers to this JSON-lines file")
    args = ap.parse_args()
    out = compare(args) if args.cmd == "compare" else suite(args)
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            f.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
