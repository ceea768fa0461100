"""HBM bandwidth: a device-to-device copy per GPU, bytes read plus bytes written per second.

A copy through the copy engines (``cudaMemcpyAsync`` device to device, what every framework's
own copy does) is the plainest bandwidth workload there is, so a GPU whose copy is slow has
slow memory or a memory clock problem, not a slow kernel. All GPUs copy at once (their HBM is
independent) and each copy is timed with CUDA events; the median of the repeats is judged.
The copy is also verified (hash of source and destination), so a corrupting copy path fails
rather than merely being fast.

Slow HBM with nothing else wrong -> drain + reboot (a reset restores memory clocks); a copy
that corrupts data -> drain + hardware ticket.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.rates import Finding, judge_rates, rate_results
from gpuhc.model.result import Action, Result, Status

CHECK = "hbm"
MEMCPY_D2D = 3  # cudaMemcpyDeviceToDevice


def measure(params: dict, devices: list[dict]) -> dict[str, Any]:
    from gpuhc.active import gpu

    cp = gpu.cupy()
    nbytes = int(params["mib"]) << 20
    repeats = int(params.get("repeats", 20))
    runs = []
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            stream = gpu.stream()
            src = cp.empty(nbytes // 4, dtype=cp.float32)
            dst = cp.empty(nbytes // 4, dtype=cp.float32)
            gpu.launch("fill_uniform_f32", src.size, (src, gpu.u64(src.size), gpu.u64(params.get("seed", 1))), stream)
            runs.append({"dev": d, "stream": stream, "src": src, "dst": dst, "timer": gpu.DeviceTimer(stream, d["cuda"])})
    for r in runs:  # warm-up copy per GPU
        copy(r, nbytes)
    for _ in range(repeats):
        for r in runs:
            ev = r["timer"].start()
            copy(r, nbytes)
            r["timer"].stop(ev)
    out: dict[str, Any] = {"bytes": nbytes, "repeats": repeats, "gpus": {}}
    for r in runs:
        with cp.cuda.Device(r["dev"]["cuda"]):
            secs = r["timer"].seconds()
            rates = sorted(2 * nbytes / t / 1e9 for t in secs if t > 0)
            same = _hash(gpu, cp, r["src"], r["stream"]) == _hash(gpu, cp, r["dst"], r["stream"])
        out["gpus"][r["dev"]["subject"]] = {
            "gbps": round(gpu.median(rates), 1),
            "gbps_min": round(rates[0], 1) if rates else 0.0,
            "copy_ok": bool(same),
        }
    return out


def copy(r: dict, nbytes: int) -> None:
    from gpuhc.active import gpu

    cp = gpu.cupy()
    with cp.cuda.Device(r["dev"]["cuda"]):
        cp.cuda.runtime.memcpyAsync(r["dst"].data.ptr, r["src"].data.ptr, nbytes, MEMCPY_D2D, r["stream"].ptr)


def _hash(gpu, cp, arr, stream) -> int:
    out = cp.zeros(1, dtype=cp.uint64)
    words = arr.view(cp.uint32)
    gpu.launch("hash_words", words.size, (words, gpu.u64(words.size), out), stream)
    stream.synchronize()
    return int(out.get()[0])


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    """Per GPU: a corrupting copy is that GPU's hardware ticket; a merely slow copy on another
    GPU of the same node stays drain + reboot (a reset restores memory clocks)."""
    gpus = data.get("gpus") or {}
    rates = {s: float(g.get("gbps") or 0.0) for s, g in gpus.items()}
    findings = judge_rates(rates, thr.get("gbps"), thr, "copy", "GB/s", action=Action.DRAIN_REBOOT)
    for s, g in gpus.items():
        if g.get("copy_ok") is False:
            findings.setdefault(s, Finding()).add(Status.FAIL, "device-to-device copy corrupted the data",
                                                  Action.DRAIN_TICKET)
    pass_text = {s: f"copy {g.get('gbps', 0):.0f} GB/s (read+write, {data.get('bytes', 0) >> 20} MiB, "
                    f"median of {data.get('repeats')})" for s, g in gpus.items()}
    return rate_results(CHECK, findings, gpus, pass_text, thr, Action.DRAIN_REBOOT)
