"""Worker tasks that exist only so that GPU tests can prove the parent's safety nets on real
hardware: a kernel that outlives its deadline, and a task that fails holding GPU memory."""

from __future__ import annotations

from gpuhc.active import gpu


def spin(params: dict, devices: list[dict]) -> dict:
    """Occupy each GPU with a kernel that runs ``seconds`` (bounded, so it ends regardless)."""
    cp = gpu.cupy()
    out = {}
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            clock_khz = cp.cuda.runtime.deviceGetAttribute(13, d["cuda"])  # cudaDevAttrClockRate
            cycles = int(float(params.get("seconds", 30)) * clock_khz * 1000)
            sink = cp.zeros(1, dtype=cp.int32)
            gpu.kernel("spin")((1,), (1,), (cp.int64(cycles), sink))
            out[d["subject"]] = sink
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            cp.cuda.get_current_stream().synchronize()
    return {"spun": sorted(out)}


def fail_after_alloc(params: dict, devices: list[dict]) -> dict:
    """Allocate ``mib`` on each GPU, then fail: the worker must still hand the memory back."""
    cp = gpu.cupy()
    held = []
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            held.append(cp.ones(int(params.get("mib", 256)) << 18, dtype=cp.float32))
    raise RuntimeError(f"injected failure holding {len(held)} buffers")
