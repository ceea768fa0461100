#!/usr/bin/env python3
"""A training-like job on the node's GPUs for the job checks' device proof (issue 24).

One rank per GPU (torch.distributed, NCCL; NVLS off): each step runs bf16 matmuls and an
all-reduce of 256 MiB, as the issue's measurement did. Modes:

- ``train``: steps until ``--seconds``;
- ``hang``: rank ``--stall-rank`` stops at ``--stall-at`` s (sleeps) while the others enter the
  next all-reduce and spin there; the stall's wall time is written to ``--mark``;
- ``pause``: every ``--pause-every`` s all ranks stop for ``--pause-s`` s together (a
  data-loading pause: every GPU idle, which must not read as a hang);
- ``load``: not a rank: a second process running matmuls on one GPU (the straggler's cause).

Rank 0 prints steps per second every 5 s. The ranks inherit SLURM_JOB_ID from the caller,
which is how gpuhc finds their job on a node without Slurm's cgroups.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def rank_main(rank: int, world: int, args) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{args.port}")
    x = torch.ones(64 << 20, device="cuda")  # 256 MiB of fp32
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    start = time.time()
    last, steps, next_pause = start, 0, start + args.pause_every
    while time.time() - start < args.seconds:
        if args.mode == "hang" and rank == args.stall_rank and time.time() - start >= args.stall_at:
            with open(args.mark, "w") as f:
                f.write(f"{time.time():.3f}\n")
            print(f"rank {rank} stalls at {time.time():.3f}", flush=True)
            time.sleep(args.seconds)
            break
        if args.mode == "pause" and time.time() >= next_pause:
            print(f"all ranks pause {args.pause_s:.0f} s at {time.time():.3f} (data loading)", flush=True) if rank == 0 else None
            time.sleep(args.pause_s)
            next_pause = time.time() + args.pause_every
        for _ in range(4):
            a = (a @ a) * 1e-4
        dist.all_reduce(x)
        torch.cuda.synchronize()
        steps += 1
        if rank == 0 and time.time() - last >= 5:
            print(f"t={time.time() - start:.0f}s steps/s={steps / (time.time() - last):.1f}", flush=True)
            last, steps = time.time(), 0
    os._exit(0)  # a stalled peer would keep destroy_process_group waiting


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
    ap.add_argument("mode", choices=("train", "hang", "pause", "load"))
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--gpu", type=int, default=2, help="load: the GPU to load")
    ap.add_argument("--stall-rank", type=int, default=3)
    ap.add_argument("--stall-at", type=float, default=30)
    ap.add_argument("--mark", default="/tmp/jobs-stall-mark")
    ap.add_argument("--pause-every", type=float, default=90)
    ap.add_argument("--pause-s", type=float, default=30)
    ap.add_argument("--port", type=int, default=29512)
    args = ap.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if args.mode == "load":
        load_main(args)
        return
    import torch
    import torch.multiprocessing as mp

    world = args.gpus or torch.cuda.device_count()
    mp.spawn(rank_main, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    sys.exit(main())
