"""CuPy plumbing shared by the measuring halves of the active checks (worker side only).

Why CuPy: the checks need four things from Python and nothing more — cuBLAS GEMMs with
explicit data and compute types (``cublasGemmEx``), raw kernels compiled at run time (memory
patterns, result hashes), CUDA events and streams for honest timing, and NCCL in one process
over all local GPUs (``NcclCommunicator.initAll``). CuPy exposes each of these as a thin
wrapper over the CUDA library call, installs as one wheel, starts in about a second and holds
no big framework state; PyTorch would add gigabytes and its own allocator and threads to every
node's epilog. Nothing here imports at module load: the parent process (and CI) import the
judging code without CuPy.

Every buffer allocated in a task goes through CuPy's memory pool; :func:`release` returns it to
the driver, and the worker calls it after every task, also when the task failed.
"""

from __future__ import annotations

import statistics
from typing import Any

_MODULES: dict[int, Any] = {}

BLOCK = 256


def cupy():
    import cupy as cp  # noqa: PLC0415 - deliberately lazy, see the module docstring

    return cp


def module():
    """The compiled kernel module for the current device (compiled once per device)."""
    cp = cupy()
    dev = cp.cuda.runtime.getDevice()
    mod = _MODULES.get(dev)
    if mod is None:
        from gpuhc.active.kernels import NAMES, SOURCE

        mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
        for name in NAMES:  # compile now, not inside a timed region
            mod.get_function(name)
        _MODULES[dev] = mod
    return mod


def kernel(name: str):
    return module().get_function(name)


def grid_for(n: int) -> tuple[int]:
    """Grid-stride kernels: enough blocks to fill any current GPU, no more."""
    return (max(1, min(4096, (n + BLOCK - 1) // BLOCK)),)


def launch(name: str, n: int, args: tuple, stream=None) -> None:
    """Launch a grid-stride kernel over ``n`` items on ``stream`` (CuPy launches on the
    current stream, so the stream is made current for the call)."""
    if stream is None:
        kernel(name)(grid_for(n), (BLOCK,), args)
        return
    with stream:
        kernel(name)(grid_for(n), (BLOCK,), args)


def u64(v: int):
    import numpy as np

    return np.uint64(v & 0xFFFFFFFFFFFFFFFF)


def stream():
    """A *blocking* stream: it orders itself with the legacy default stream, on which CuPy runs
    every allocation-side operation not made inside a ``with stream`` block (``cp.zeros``,
    ``cp.asarray``). A non-blocking stream raced such an initialisation on an H200 (a hash
    slot zeroed after the hash kernel had written it)."""
    return cupy().cuda.Stream(non_blocking=False)


def release() -> None:
    """Give every cached device and pinned block back to the driver."""
    cp = cupy()
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def pool_used_bytes() -> int:
    cp = cupy()
    return int(cp.get_default_memory_pool().used_bytes())


class DeviceTimer:
    """Pairs of CUDA events on one stream; durations read only after a sync. Events belong to
    the stream's device, so every record switches to it (callers may loop over GPUs)."""

    def __init__(self, stream, device: int):
        self.stream = stream
        self.device = device
        self.pairs: list[tuple[Any, Any]] = []

    def _record(self):
        cp = cupy()
        with cp.cuda.Device(self.device):
            ev = cp.cuda.Event()
            ev.record(self.stream)
        return ev

    def start(self):
        return self._record()

    def stop(self, start_ev) -> None:
        self.pairs.append((start_ev, self._record()))

    def seconds(self) -> list[float]:
        cp = cupy()
        with cp.cuda.Device(self.device):
            self.stream.synchronize()
            return [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in self.pairs]


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def classify(exc: BaseException) -> tuple[str, str]:
    """Turn an exception from CuPy/CUDA/NCCL into (kind, one-line message) for the parent.

    kinds: ``oom`` (could not allocate: says nothing about the hardware), ``ecc`` (the driver
    reported an uncorrectable ECC error to this process: the hardware is bad), ``cuda`` (any
    other CUDA error), ``nccl`` and ``internal`` (a bug in gpuhc or the environment).
    """
    name = type(exc).__name__
    text = " ".join(str(exc).split())[:300]
    if name == "OutOfMemoryError" or "out of memory" in text.lower() or "cudaErrorMemoryAllocation" in text:
        return "oom", text or "out of memory"
    if "ECCUncorrectable" in text or "uncorrectable ECC" in text:
        return "ecc", text
    if name in ("CUDARuntimeError", "CUDADriverError", "CUBLASError") or text.startswith("cuda"):
        return "cuda", f"{name}: {text}"
    if name == "NcclError":
        return "nccl", f"{name}: {text}"
    return "internal", f"{name}: {text}"
