"""Benchmarks of the active checks against the frameworks' own plain workloads, same GPUs, same run.

Subcommands (each prints a table and, with --json, appends its numbers to a JSON-lines file):

  compare   Four comparisons, each a ratio of medians with a pass mark; exits 1 when any mark
            is missed (0 when all are met):
            - burn-in vs torch, *sustained*: gpuhc's burn-in (burnin.measure, every GPU at once,
              hashing and all) for S seconds per dtype, its REPORTED TFLOP/s per GPU, against
              torch.matmul on every GPU at once for the same S seconds, same shape and dtype,
              continuously queued (no gaps). The two alternate A B B A, so heat and the power
              cap hit both sides alike. Mark: >= 0.95. This is the issue's burn-in target.
            - the burn-in's GEMM call alone vs torch.matmul in 30-iteration bursts on GPU 0
              (parity of the kernel itself, before the GPU reaches its power cap). Mark: >= 0.95.
            - gpuhc's HBM copy vs torch's copy_. Mark: >= 0.95.
            - gpuhc's local NCCL all-reduce vs a torch.distributed all-reduce loop (one process
              per GPU, NCCL backend), 2+ GPUs. Mark: within 3 % (0.97..1.03).
  suite     run_active() for a stage, with the wall time against the stage budget; exits 1
            when a check fails or errors, or the stage overruns its budget.

Timing: CUDA events, warm-up first, medians over the repeats; the two sides of a comparison
alternate so that clock drift and heat hit both. Sustained rates are total GEMM work over the
device time between the first and last event of the run, per GPU.
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


def _burnin_sustained(n: int, dtype: str, seconds: float, devices: list[dict]) -> dict[int, float]:
    """The burn-in exactly as a stage runs it (every GPU at once, hashes, NVML sampling), for
    ``seconds`` of one dtype: its reported TFLOP/s by CUDA ordinal."""
    from gpuhc.active import burnin, gpu

    data = burnin.measure({"n": n, "dtypes": [dtype], "seconds": seconds, "seed": 7, "hash_every": 8}, devices)
    gpu.release()
    by_subject = data["dtypes"][dtype]["gpus"]
    bad = {s: g for s, g in by_subject.items() if g["hash_changes"]}
    if bad:
        print(f"WARNING: burn-in result changed during the bench on {sorted(bad)}", flush=True)
    return {d["cuda"]: by_subject[d["subject"]]["tflops"] for d in devices}


def _torch_sustained(n: int, dtype: str, seconds: float, ordinals: list[int]) -> dict[int, float]:
    """torch.matmul on every GPU at once for ``seconds``, continuously: matmuls stay queued on
    every GPU (the host waits only on an event several matmuls back), so no GPU idles until the
    end. TFLOP/s per GPU = matmuls x 2n^3 / device time between its first and last event."""
    from collections import deque

    import torch

    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[dtype]
    side: dict[int, dict] = {}
    for i in ordinals:
        dev = f"cuda:{i}"
        gen = torch.Generator(device=dev).manual_seed(1234)
        s = side[i] = {"a": (torch.rand(n, n, device=dev, generator=gen) * 2 - 1).to(dt),
                       "b": (torch.rand(n, n, device=dev, generator=gen) * 2 - 1).to(dt),
                       "c": torch.empty(n, n, device=dev, dtype=dt), "count": 0, "marks": deque()}
        with torch.cuda.device(i):
            for _ in range(5):  # warm-up: cuBLAS picks its kernel
                torch.matmul(s["a"], s["b"], out=s["c"])
    for i in ordinals:
        torch.cuda.synchronize(i)
    for i in ordinals:
        with torch.cuda.device(i):
            side[i]["start"] = torch.cuda.Event(enable_timing=True)
            side[i]["start"].record()
    every, depth = 4, 4  # keep up to depth x every matmuls queued per GPU
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        for i in ordinals:
            s = side[i]
            with torch.cuda.device(i):
                for _ in range(every):
                    torch.matmul(s["a"], s["b"], out=s["c"])
                s["count"] += every
                ev = torch.cuda.Event()
                ev.record()
                s["marks"].append(ev)
                if len(s["marks"]) > depth:
                    s["marks"].popleft().synchronize()
    out = {}
    for i in ordinals:
        s = side[i]
        with torch.cuda.device(i):
            s["stop"] = torch.cuda.Event(enable_timing=True)
            s["stop"].record()
    for i in ordinals:
        s = side[i]
        s["stop"].synchronize()
        out[i] = s["count"] * 2 * n**3 / (s["start"].elapsed_time(s["stop"]) / 1e3) / 1e12
    del side, s
    torch.cuda.empty_cache()
    return out


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
    print(f"{name:46} {o:9.1f} {t:10.1f} {o / t:7.3f}  {target}", flush=True)


class Marks:
    """The pass marks of one compare run: printed as they come, summed up at the end."""

    def __init__(self) -> None:
        self.missed: list[str] = []
        self.met: list[str] = []

    def check(self, name: str, ratio: float, lo: float, hi: float | None = None) -> bool:
        ok = ratio >= lo and (hi is None or ratio <= hi)
        (self.met if ok else self.missed).append(f"{name} {ratio:.3f}")
        return ok


def compare(args) -> dict:
    devices = _devices()
    marks = Marks()
    ordinals = [d["cuda"] for d in devices]
    out: dict = {"gpus": len(devices), "name": devices[0].get("name") if devices else None}
    print(f"{len(devices)} x {out['name']}; sustained runs: {args.sustain_s:g}s per dtype and side, "
          f"{args.rounds} rounds (A B B A)", flush=True)
    print(f"{'workload':46} {'gpuhc':>9} {'framework':>10} {'ratio':>7}  target", flush=True)
    for dtype in args.dtypes:
        ours: list[float] = []
        theirs: list[float] = []
        per_gpu: dict[int, dict[str, list[float]]] = {i: {"burnin": [], "torch": []} for i in ordinals}
        for rnd in range(args.rounds):  # A B, B A, A B, ...: each side runs first as often
            sides = ("burnin", "torch") if rnd % 2 == 0 else ("torch", "burnin")
            for side in sides:
                got = (_burnin_sustained(args.n, dtype, args.sustain_s, devices) if side == "burnin"
                       else _torch_sustained(args.n, dtype, args.sustain_s, ordinals))
                for i, v in got.items():
                    per_gpu[i][side].append(round(v, 1))
                (ours if side == "burnin" else theirs).extend(got.values())
        o, t = statistics.median(ours), statistics.median(theirs)
        name = f"burn-in {dtype} {args.n}^3 sustained x{len(devices)} (TFLOP/s)"
        marks.check(name, o / t, 0.95)
        _row(name, o, t, ">= 0.95")
        out[f"burnin_{dtype}"] = {"burnin_reported_tflops": round(o, 1), "torch_sustained_tflops": round(t, 1),
                                  "ratio": round(o / t, 4), "seconds": args.sustain_s, "rounds": args.rounds,
                                  "per_gpu": per_gpu}
        ours, theirs = [], []
        for _ in range(2):  # A B A B
            ours += _gpuhc_gemm_tflops(args.n, dtype, args.iters)
            theirs += _torch_matmul_tflops(args.n, dtype, args.iters)
        o, t = statistics.median(ours), statistics.median(theirs)
        name = f"GEMM call {dtype} {args.n}^3 bursts, gpu0 (TFLOP/s)"
        marks.check(name, o / t, 0.95)
        _row(name, o, t, ">= 0.95")
        out[f"matmul_{dtype}"] = {"gpuhc_tflops": round(o, 1), "torch_tflops": round(t, 1), "ratio": round(o / t, 4)}
    ours, theirs = [], []
    for _ in range(3):
        ours.append(_gpuhc_copy(args.hbm_mib, devices))
        theirs.append(_torch_copy(args.hbm_mib))
    o, t = statistics.median(ours), statistics.median(theirs)
    out["hbm"] = {"gpuhc_gbps": round(o, 1), "torch_gbps": round(t, 1), "ratio": round(o / t, 4)}
    name = f"HBM copy {args.hbm_mib} MiB, gpu0 (GB/s r+w)"
    marks.check(name, o / t, 0.95)
    _row(name, o, t, ">= 0.95")
    if len(devices) >= 2:
        ours_by = {m: [_gpuhc_allreduce(m, args.nccl_iters, devices)] for m in args.nccl_mib}
        theirs_by = _torch_allreduce(args.nccl_mib, args.nccl_iters, len(devices))
        for m in args.nccl_mib:  # A B A
            ours_by[m].append(_gpuhc_allreduce(m, args.nccl_iters, devices))
            o, t = statistics.median(ours_by[m]), theirs_by[m]
            out[f"nccl_{m}"] = {"gpuhc_busbw": round(o, 1), "torch_busbw": round(t, 1), "ratio": round(o / t, 4),
                                "gpuhc_all": ours_by[m]}
            name = f"all-reduce {m} MiB x{len(devices)} (busbw GB/s)"
            marks.check(name, o / t, 0.97, 1.03)
            _row(name, o, t, "0.97..1.03")
    else:
        print("all-reduce: skipped, one GPU (bus bandwidth is zero by definition)", flush=True)
    out["targets_missed"] = marks.missed
    if marks.missed:
        print(f"TARGETS MISSED ({len(marks.missed)} of {len(marks.missed) + len(marks.met)}): "
              + "; ".join(marks.missed), flush=True)
    else:
        print(f"all {len(marks.met)} targets met", flush=True)
    return out


def suite(args) -> dict:
    from gpuhc.active import run_active
    from gpuhc.active.context import ActiveContext
    from gpuhc.config.profiles import select_profile

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
    missed = [f"{r.check} {r.subject}: {r.status.value}" for r in res if r.status.value in ("fail", "error")]
    if wall > args.budget:
        missed.append(f"wall time {wall:.1f}s over the {args.budget:.0f}s budget")
    if missed:
        print("TARGETS MISSED: " + "; ".join(missed))
    return {"stage": args.stage, "gpus": len(devices), "profile": profile, "wall_s": round(wall, 2),
            "budget_s": args.budget, "results": [r.to_dict() for r in res], "targets_missed": missed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--n", type=int, default=8192)
    c.add_argument("--dtypes", nargs="+", default=["bf16", "tf32"])
    c.add_argument("--iters", type=int, default=30, help="GEMM bursts: timed iterations per side")
    c.add_argument("--sustain-s", type=float, default=5.0,
                   help="seconds of each sustained run, per dtype and side (the bootstrap burn-in gives each "
                        "dtype 30 s, the epilog 2 s)")
    c.add_argument("--rounds", type=int, default=2, help="sustained rounds; every second round runs torch first (A B B A)")
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
    return 1 if out.get("targets_missed") else 0


if __name__ == "__main__":
    sys.exit(main())
