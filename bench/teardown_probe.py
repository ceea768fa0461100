"""How long does a GPU stay held after its process is told to go? (docs/campaign.md, "Noise":
the teardown lag the campaign model draws at a job's end, and the occupancy check's epilog wait.)

Run on a GPU machine: ``python3 bench/teardown_probe.py [--gpu 0] [--repeat 3] [--json FILE]``.
Each case starts a child that takes GPU memory (and, for some, pinned host memory or a kernel
still running), then ends it the way Slurm ends a job's processes (SIGKILL, or SIGTERM that the
child answers by exiting), and polls as fast as it can:

- NVML's compute processes on the GPU: when the child's pid leaves the list;
- the GPU's memory in use: when it is back to what it was before the child;
- ``/proc/<pid>/stat``: the child's state letters and whether the kernel has marked it exiting
  (PF_EXITING, 0x4 in the flags field), and when it became a zombie and was reaped.

Times are from the signal, in milliseconds; one JSON line per run, then each case's median.
Nothing on the GPU is changed but the child's own allocations (no clocks, limits, modes, resets).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

PF_EXITING = 0x4
CHILD = r"""
import signal, sys, time, torch
gib, pinned, kernel = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
torch.cuda.set_device(0)
x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1)
h = torch.empty(int(pinned * 2**30), dtype=torch.uint8, pin_memory=True) if pinned else None
if h is not None:
    h.fill_(1)
torch.cuda.synchronize()
if kernel:
    torch.cuda._sleep(int(60 * 1.98e9))  # ~60 s of one spinning block, still running at the signal
print("ready", flush=True)
time.sleep(3600)
"""
CASES = (  # name, GiB on the GPU, GiB pinned on the host, a kernel in flight, signal
    ("1.6GiB-kill", 1.6, 0, False, signal.SIGKILL),
    ("120GiB-kill", 120, 0, False, signal.SIGKILL),
    ("120GiB-term", 120, 0, False, signal.SIGTERM),
    ("120GiB+48GiB-pinned-kill", 120, 48, False, signal.SIGKILL),
    ("120GiB-kernel-running-kill", 120, 0, True, signal.SIGKILL),
)


def stat(pid: int) -> tuple[str, int] | None:
    """(state letter, flags) from /proc/<pid>/stat; None once the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096).decode("ascii", "replace")
    except OSError:
        return None
    rest = raw[raw.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return rest[0], int(rest[6])


def one(nv, handle, name: str, gib: float, pinned: float, kernel: bool, sig: int, gpu: int) -> dict:
    base = nv.nvmlDeviceGetMemoryInfo(handle).used
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(gib), str(pinned), "1" if kernel else "0"],
                         stdout=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "ready", "the child did not start"
    held = nv.nvmlDeviceGetMemoryInfo(handle).used - base
    listed = any(q.pid == p.pid for q in nv.nvmlDeviceGetComputeRunningProcesses(handle))
    out = {"case": name, "held_mib": held >> 20, "listed_before": listed, "states": []}
    t0 = time.perf_counter()
    os.kill(p.pid, sig)
    ms = lambda: round((time.perf_counter() - t0) * 1000.0, 1)  # noqa: E731
    seen_exiting = nvml_gone = mem_free = zombie = reaped = None
    listed_while_zombie = False
    while time.perf_counter() - t0 < 120.0:
        st = stat(p.pid) if reaped is None else None
        if st is not None:
            if not out["states"] or out["states"][-1][0] != st[0]:
                out["states"].append((st[0], ms()))
            if seen_exiting is None and st[1] & PF_EXITING:
                seen_exiting = ms()
            if st[0] == "Z" and zombie is None:
                zombie = ms()
        listed = any(q.pid == p.pid for q in nv.nvmlDeviceGetComputeRunningProcesses(handle))
        if listed and zombie is not None:
            listed_while_zombie = True
        if not listed and nvml_gone is None:
            nvml_gone = ms()
        if mem_free is None and nv.nvmlDeviceGetMemoryInfo(handle).used - base < 512 << 20:
            mem_free = ms()
        # reaped only once the GPU is free: a zombie that NVML still lists would show here
        if reaped is None and (st is None or st[0] == "Z" or (nvml_gone and mem_free)) and (
                (nvml_gone is not None and mem_free is not None) or time.perf_counter() - t0 > 60.0):
            if p.poll() is not None:
                reaped = ms()
        if nvml_gone is not None and mem_free is not None and reaped is not None:
            break
    if reaped is None:
        p.kill()
        p.wait()
    out.update(pf_exiting_ms=seen_exiting, zombie_ms=zombie, nvml_gone_ms=nvml_gone, memory_free_ms=mem_free,
               reaped_ms=reaped, listed_while_zombie=listed_while_zombie)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write every run here, one JSON line each")
    a = ap.parse_args()
    import pynvml as nv

    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(a.gpu)
    runs = []
    for case in CASES:
        for _ in range(a.repeat):
            r = one(nv, handle, *case, a.gpu)
            runs.append(r)
            print(json.dumps(r), flush=True)
    nv.nvmlShutdown()
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in runs)
    for name, *_ in CASES:
        rs = [r for r in runs if r["case"] == name]
        med = {k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs) else None
               for k in ("pf_exiting_ms", "zombie_ms", "nvml_gone_ms", "memory_free_ms", "reaped_ms")}
        print(name, "median ms:", med, "max nvml_gone_ms:", max((r["nvml_gone_ms"] or 0) for r in rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
