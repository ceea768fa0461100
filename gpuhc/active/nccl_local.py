"""Local NCCL: an all-reduce over every GPU of the node, checked exactly and timed.

One process drives all GPUs through ``NcclCommunicator.initAll`` inside NCCL group calls: no
MPI, no rendezvous, nothing to leak if the worker is killed. Each GPU r contributes
x[i] = (i mod 251) + r, so every element of the sum is a known integer below 2^24, exact in
float32 whatever order NCCL adds in; a kernel counts elements that differ. Timing follows
nccl-tests: back-to-back collectives between CUDA events, bus bandwidth =
bytes / time x 2(n-1)/n (decimal GB/s).

With one GPU the all-reduce is still run (it proves NCCL loads and the GPU computes the sum);
its bus bandwidth is zero by definition and is not judged.

Wrong sums -> drain + hardware ticket; bandwidth below the profile -> drain + hardware ticket
(intra-node all-reduce is NVLink or PCIe bound: a slow one means a degraded link).
"""

from __future__ import annotations

from typing import Any

from gpuhc.model.result import Action, Result, Status

CHECK = "nccl-local"


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    import numpy as np

    from gpuhc.active import gpu

    cp = gpu.cupy()
    try:
        from cupy.cuda import nccl
    except ImportError as e:
        raise ImportError(f"NCCL for CuPy is missing: {e}") from None
    if not getattr(nccl, "available", False):
        raise ImportError("NCCL for CuPy is missing (install the nvidia-nccl wheel matching CuPy's CUDA)")
    nbytes = int(params["mib"]) << 20
    count = nbytes // 4
    iters, warmup = int(params.get("iters", 20)), int(params.get("warmup", 5))
    ranks = len(devices)
    comms = nccl.NcclCommunicator.initAll([d["cuda"] for d in devices])
    try:
        bufs = []
        for r, d in enumerate(devices):
            with cp.cuda.Device(d["cuda"]):
                gpu.module()
                send = cp.empty(count, dtype=cp.float32)
                recv = cp.full(count, np.nan, dtype=cp.float32)
                stream = gpu.stream()
                gpu.launch("fill_rank", count, (send, gpu.u64(count), np.float32(r)), stream)
                bufs.append({"send": send, "recv": recv, "stream": stream, "timer": gpu.DeviceTimer(stream, d["cuda"])})

        def once() -> None:
            nccl.groupStart()
            for comm, d, b in zip(comms, devices, bufs):
                with cp.cuda.Device(d["cuda"]):
                    comm.allReduce(b["send"].data.ptr, b["recv"].data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                                   b["stream"].ptr)
            nccl.groupEnd()

        for _ in range(warmup):
            once()
        for b in bufs:
            b["stream"].synchronize()
        starts = [b["timer"].start() for b in bufs]
        for _ in range(iters):
            once()
        for b, ev in zip(bufs, starts):
            b["timer"].stop(ev)
        elapsed = max(b["timer"].seconds()[0] for b in bufs)
        per_iter = elapsed / iters
        algbw = nbytes / per_iter / 1e9
        busbw = algbw * 2 * (ranks - 1) / ranks
        gpus = {}
        for d, b in zip(devices, bufs):
            with cp.cuda.Device(d["cuda"]):
                stats = cp.asarray(np.array([0, 2**64 - 1], dtype=np.uint64))
                gpu.launch("check_sum", count, (b["recv"], gpu.u64(count), np.float32(ranks),
                                                np.float32(ranks * (ranks - 1) / 2), stats), b["stream"])
                b["stream"].synchronize()
                bad, first = (int(x) for x in stats.get())
            gpus[d["subject"]] = {"bad": bad, "first_bad": first if bad else None}
        return {"ranks": ranks, "bytes": nbytes, "iters": iters, "time_us": round(per_iter * 1e6, 1),
                "algbw_gbps": round(algbw, 1), "busbw_gbps": round(busbw, 1), "gpus": gpus,
                "nccl_version": nccl.get_version()}
    finally:
        for c in comms:
            c.destroy()


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    ranks = int(data.get("ranks") or 0)
    size = f"{(data.get('bytes') or 0) / (1 << 30):.2g} GiB"
    wrong = {s: g for s, g in (data.get("gpus") or {}).items() if g.get("bad")}
    if wrong:
        text = "; ".join(f"{s}: {g['bad']} wrong elements (first at {g['first_bad']})" for s, g in sorted(wrong.items()))
        return [Result(CHECK, Status.FAIL, f"all-reduce over {ranks} GPUs gave wrong sums: {text}", "node", data,
                       None, Action.DRAIN_TICKET)]
    if ranks < 2:
        return [Result(CHECK, Status.PASS, f"one GPU: NCCL all-reduce of {size} exact; bus bandwidth not judged",
                       "node", data)]
    busbw = float(data.get("busbw_gbps") or 0.0)
    expected = thr.get("busbw_gbps")
    base = f"all-reduce {size} over {ranks} GPUs: busbw {busbw:.0f} GB/s, exact"
    if expected:
        frac = busbw / float(expected)
        threshold = {"busbw_gbps": expected, "min_fraction": thr.get("min_fraction")}
        if frac < float(thr.get("min_fraction", 0.8)):
            return [Result(CHECK, Status.FAIL, f"{base}; {frac:.0%} of the expected {expected:.0f} GB/s "
                           f"(fails below {float(thr.get('min_fraction', 0.8)):.0%})", "node", busbw, threshold,
                           Action.DRAIN_TICKET)]
        if frac < float(thr.get("warn_fraction", 0.9)):
            return [Result(CHECK, Status.WARN, f"{base}; {frac:.0%} of the expected {expected:.0f} GB/s", "node",
                           busbw, threshold)]
    return [Result(CHECK, Status.PASS, base, "node", busbw, expected)]
