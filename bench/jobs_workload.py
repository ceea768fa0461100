#!/usr/bin/env python3
"""Training-like jobs on the node's GPUs for the job checks' device proof (issues 24 and 32).

One rank per GPU (torch.distributed, NCCL; NVLS off). A training step is four bf16 8192x8192
matmuls and an all-reduce of 64 MiB (fp32), as issue 32's measurement. Modes:

- ``phases``: one job that goes through a schedule of phases (``--schedule``, "name:seconds,...");
  every step, the ranks agree on the phase with a one-integer all-reduce (MAX), so a phase
  change never leaves two ranks in different collectives. Phases:
    ``train``; ``work1.5`` / ``work2`` (rank ``--odd-rank`` does 1.5x / 2x the matmuls);
    ``load`` (train, while a second process, outside the job, runs matmuls on GPU ``--gpu``);
    ``ckpt`` (rank 0 writes real bytes, torch.save of a 1 GiB tensor over and over into
    ``--ckpt-dir``, for the phase's length, while the others wait in the next all-reduce);
    ``eval`` (every rank runs forward-only matmuls without collectives, then a barrier);
    ``pipe`` (a 4-stage pipeline: each step 8 micro-batches go rank 0 -> 1 -> 2 -> 3 through
    send/recv, each stage 2 matmuls a micro-batch, the last stage 3: its LM head and loss);
    ``kernel`` (rank ``--odd-rank`` spins in ``torch.cuda._sleep`` kernels, one block on the
    GPU, for the phase's length, while the others wait in the all-reduce);
    ``spin`` (the same rank in a kernel that spins on every SM, as a deadlocked kernel waiting
    for a flag does: two blocks per SM, ~0.5 s each, back to back; CuPy compiles it);
    ``stall`` (rank ``--odd-rank`` sleeps on the host for the phase's length);
    ``mismatch`` (the first half of the ranks all-reduce, the others broadcast: never ends).
- ``stalls``: train, and ``--stalls`` times: after a random 3-8 s, a random rank sleeps
  ``--stall-s`` seconds (a recoverable stall), each written to ``--marks`` as a JSON line.
- ``load``: not a rank: a second process running matmuls on GPU ``--gpu``.

Each phase's start is printed by rank 0 as a JSON line ({"phase", "time"}) on stdout. The ranks
inherit SLURM_JOB_ID (and SLURM_JOB_NUM_NODES, SLURM_JOB_NAME) from the caller: on a node
without Slurm's cgroups, that is how gpuhc finds their job.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

PHASES = ("train", "work1.5", "work2", "load", "ckpt", "eval", "pipe", "kernel", "spin", "stall", "mismatch")


def schedule(text: str) -> list[tuple[str, float]]:
    out = []
    for part in text.split(","):
        name, _, secs = part.partition(":")
        if name not in PHASES:
            raise SystemExit(f"unknown phase {name!r} (known: {', '.join(PHASES)})")
        out.append((name, float(secs)))
    return out


def rank_main(rank: int, world: int, args) -> None:
    import torch
    import torch.distributed as dist

    dev = args.gpu_base + rank
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{args.port}")
    x = torch.ones(16 << 20, device="cuda")  # 64 MiB of fp32
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    flag = torch.zeros(1, device="cuda", dtype=torch.int32)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if args.mode == "stalls":
        stalls(rank, world, args, a, x)
    else:
        phases(rank, world, args, a, x, flag)
    os._exit(0)  # a peer left in a collective would keep destroy_process_group waiting


def step(a, x, n: int = 4):
    import torch.distributed as dist

    for _ in range(n):
        a = (a @ a) * 1e-4
    dist.all_reduce(x)
    return a


def phases(rank: int, world: int, args, a, x, flag) -> None:
    import torch
    import torch.distributed as dist

    plan = schedule(args.schedule)
    ends, t = [], 0.0
    for _, secs in plan:
        t += secs
        ends.append(t)
    t0 = time.time()
    current = -1
    while True:
        mine = next((i for i, e in enumerate(ends) if time.time() - t0 < e), len(plan))
        flag.fill_(mine)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        idx = int(flag.item())
        if idx >= len(plan):
            break
        name, secs = plan[idx]
        if idx != current:
            current = idx
            if rank == 0:
                print(json.dumps({"phase": name, "time": round(time.time(), 3), "seconds": secs}), flush=True)
            a = enter(name, secs, rank, world, args, a, x)
            if name == "mismatch":
                break
            continue
        n = 4
        if name.startswith("work") and rank == args.odd_rank:
            n = int(4 * float(name[4:]))
        if name == "pipe":
            a = pipe_step(rank, world, a)
        else:
            a = step(a, x, n)
        torch.cuda.synchronize()
    if rank == 0:
        print(json.dumps({"phase": "end", "time": round(time.time(), 3)}), flush=True)


def enter(name: str, secs: float, rank: int, world: int, args, a, x):
    """What a phase does once, on entering it (the one-off pauses and faults)."""
    import torch
    import torch.distributed as dist

    end = time.time() + secs
    if name == "load" and rank == 0:
        import subprocess

        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # not the job's
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "load", "--gpu", str(args.gpu), "--seconds", str(secs)],
                         env=env, start_new_session=True)
    elif name == "ckpt" and rank == 0:
        big = torch.randn(256 << 20, device="cuda")  # 1 GiB of fp32
        os.makedirs(args.ckpt_dir, exist_ok=True)
        path = os.path.join(args.ckpt_dir, "ckpt.pt")
        written = 0
        while time.time() < end:
            torch.save(big.cpu(), path)
            os.sync()
            written += 1 << 30
        os.remove(path)
        print(json.dumps({"ckpt_bytes": written, "time": round(time.time(), 3)}), flush=True)
    elif name == "eval":
        while time.time() < end:
            for _ in range(4):
                a = (a @ a) * 1e-4
            torch.cuda.synchronize()
        dist.barrier()
    elif name == "kernel" and rank == args.odd_rank:
        queued = []
        while time.time() < end:  # ~0.25 s kernels of one spinning block, two in flight: no gap between them
            torch.cuda._sleep(500_000_000)
            queued.append(torch.cuda.Event())
            queued[-1].record()
            if len(queued) >= 2:
                queued.pop(0).synchronize()
        torch.cuda.synchronize()
    elif name == "spin" and rank == args.odd_rank:
        spin_everywhere(end)
    elif name == "stall" and rank == args.odd_rank:
        time.sleep(secs)
    elif name == "mismatch":
        if rank < world // 2:
            dist.all_reduce(x)
        else:
            dist.broadcast(x, src=world // 2)
        torch.cuda.synchronize()  # never returns: the collectives do not match
    return a


_SPIN = r"""extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}"""


def spin_everywhere(end: float) -> None:
    """Kernels that keep every SM busy doing nothing until ``end``: what a kernel that never
    ends looks like from outside (unlike ``torch.cuda._sleep``'s single block)."""
    import cupy as cp
    import torch

    torch.cuda.synchronize()
    with cp.cuda.Device(torch.cuda.current_device()):
        kern = cp.RawKernel(_SPIN, "spin")
        sms = cp.cuda.runtime.getDeviceProperties(torch.cuda.current_device())["multiProcessorCount"]
        while time.time() < end:
            kern((2 * sms,), (128,), (cp.int64(1_000_000_000),))
            cp.cuda.Device().synchronize()


def pipe_step(rank: int, world: int, a, micro: int = 8):
    import torch
    import torch.distributed as dist

    buf = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(micro):
        if rank > 0:
            dist.recv(buf, src=rank - 1)
        for _ in range(3 if rank == world - 1 else 2):
            a = (a @ a) * 1e-4
        if rank < world - 1:
            dist.send(a, dst=rank + 1)
    return a


def stalls(rank: int, world: int, args, a, x) -> None:
    import torch
    import torch.distributed as dist

    plan = torch.zeros(2, device="cuda", dtype=torch.float64)  # (when, who), rank 0 draws, all agree
    due = torch.zeros(1, device="cuda", dtype=torch.int32)
    for k in range(args.stalls):
        if rank == 0:
            plan[0], plan[1] = time.time() + random.uniform(3, 8), random.randrange(world)
        dist.broadcast(plan, src=0)
        when, who = float(plan[0].item()), int(plan[1].item())
        while True:  # the ranks leave the training loop together (MAX of "is it time"), never a step apart
            due.fill_(int(time.time() >= when))
            dist.all_reduce(due, op=dist.ReduceOp.MAX)
            if int(due.item()):
                break
            a = step(a, x)
            torch.cuda.synchronize()
        if rank == who:
            mark = {"job": os.environ.get("SLURM_JOB_ID"), "rank": who, "gpu": args.gpu_base + who,
                    "start": round(time.time(), 3), "seconds": args.stall_s, "n": k}
            with open(args.marks, "a") as f:
                f.write(json.dumps(mark) + "\n")
            time.sleep(args.stall_s)
        a = step(a, x)
        torch.cuda.synchronize()


def load_main(args) -> None:
    import torch

    torch.cuda.set_device(args.gpu)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + args.seconds
    while time.time() < end:
        for _ in range(8):
            a = (a @ a) * 1e-4
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("phases", "stalls", "load"))
    ap.add_argument("--schedule", default="train:30")
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--gpu-base", type=int, default=0, help="rank r runs on GPU gpu_base + r")
    ap.add_argument("--odd-rank", type=int, default=2)
    ap.add_argument("--ckpt-dir", default="/tmp/gpuhc-ckpt")
    ap.add_argument("--stalls", type=int, default=5)
    ap.add_argument("--stall-s", type=float, default=28)
    ap.add_argument("--marks", default="/tmp/gpuhc-stalls.jsonl")
    ap.add_argument("--gpu", type=int, default=3, help="load: the GPU to load")
    ap.add_argument("--seconds", type=float, default=20, help="load: how long")
    ap.add_argument("--port", type=int, default=29512)
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if args.mode == "load":
        load_main(args)
        return
    schedule(args.schedule)  # a typo fails here, before any GPU work
    import torch
    import torch.multiprocessing as mp

    world = args.gpus or torch.cuda.device_count()
    mp.spawn(rank_main, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    sys.exit(main())
