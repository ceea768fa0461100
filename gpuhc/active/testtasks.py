"""Worker tasks that exist only so that GPU tests can prove the parent's safety nets on real
hardware: a kernel that outlives its deadline, a task that fails holding GPU memory, and the
result hash kernel against a host computation of the same formula."""

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


def hash_check(params: dict, devices: list[dict]) -> dict:
    """Hash a seeded buffer of ``words`` 32-bit words with the burn-in's ``hash_words`` kernel on
    each GPU and on the host (numpy, the same formula mod 2^64): the block-level reduction must
    give the host's value exactly. An odd length leaves a partly filled last warp and block."""
    import numpy as np

    cp = gpu.cupy()
    n = int(params.get("words", (1 << 22) + 77))
    host = np.random.default_rng(int(params.get("seed", 3))).integers(0, 1 << 32, size=n, dtype=np.uint64)
    words = host.astype(np.uint32)
    i = np.arange(n, dtype=np.uint64)
    want = int(np.sum((host + np.uint64(0x9E3779B9)) * (np.uint64(2) * i + np.uint64(1)), dtype=np.uint64))
    out = {"host": f"{want:016x}", "gpus": {}}
    for d in devices:
        with cp.cuda.Device(d["cuda"]):
            gpu.module()
            w = cp.asarray(words)
            slot = cp.zeros(1, dtype=cp.uint64)
            gpu.launch("hash_words", n, (w, gpu.u64(n), slot))
            out["gpus"][d["subject"]] = f"{int(slot.get()[0]):016x}"
    return out
