"""The collectives a sweep times: NCCL on GPUs (CuPy), or MPI on host buffers (no GPU needed).

Both backends reduce the same float32 pattern, ``send[i] = (i + rank) mod 16``, so every result
element is a small integer sum that float32 holds exactly (up to 2^24 / 15 ranks): the check
after each size is an exact comparison, and a chunk delivered to the wrong offset shows up,
which a constant fill would hide. Buffers are allocated once at the largest size; smaller sizes
use prefixes (the pattern's period divides every power-of-two count). The receive prefix is
set to -1 before each size, so a collective that silently did nothing cannot pass on the
previous size's numbers.

Timing, the way nccl-tests does it, plus per-iteration samples for percentiles:

- ``per_iter`` sizes (small): each collective between its own pair of CUDA events (nccl) or
  ``perf_counter`` calls (mpi); the events stay on the GPU until one wait at the end, so the
  loop launches back to back and Python is not on the measured path;
- other sizes: one pair of events around ``iters`` back-to-back collectives, mean per call.

Hangs: the nccl backend never blocks in CUDA; it polls the last event, checks
``ncclCommGetAsyncError`` as it goes, and aborts the communicator at the deadline (raising
:class:`CollectiveTimeout`). A blocking ``MPI_Allreduce`` cannot be interrupted, so the mpi
backend relies on the worker's watchdog thread for the same bound.
"""

from __future__ import annotations

import time
from array import array
from typing import Any, Callable

PERIOD = 16


class CollectiveTimeout(Exception):
    def __init__(self, nbytes: int, seconds: float):
        super().__init__(f"all-reduce of {nbytes} B did not finish within {seconds:g} s")
        self.nbytes = nbytes


class BackendError(Exception):
    """The backend cannot run here (no CuPy, no GPU, NCCL init failed)."""


def pattern_row(rank: int) -> list[float]:
    return [float((j + rank) % PERIOD) for j in range(PERIOD)]


def expected_row(nranks: int) -> list[float]:
    return [float(sum((j + r) % PERIOD for r in range(nranks))) for j in range(PERIOD)]


# ---------------------------------------------------------------------------- mpi (host buffers)


class MpiBackend:
    """``MPI_Allreduce`` on float32 host buffers: runs anywhere mpi4py does."""

    name = "mpi"

    def __init__(self, comm: Any, local_rank: int, max_bytes: int, corrupt: bool = False, max_iters: int = 0):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm
        self.rank, self.nranks = comm.Get_rank(), comm.Get_size()
        count = max_bytes // 4
        row = pattern_row(self.rank)
        self.send = array("f", row) * (count // PERIOD) + array("f", row[: count % PERIOD])
        if corrupt and count:
            self.send[0] += 1.0  # test-only fault hook: a wrong contribution
        self.recv = array("f", [-1.0]) * count
        self.expected = array("f", expected_row(self.nranks))

    def describe(self) -> dict:
        return {"library": self.MPI.Get_library_version().splitlines()[0].strip()}

    def measure(self, nbytes: int, warmup: int, iters: int, per_iter: bool, delay_s: float = 0.0,
                timeout_s: float = 0.0) -> tuple[list[float] | None, float]:
        count = nbytes // 4
        self.recv[0:count] = array("f", [-1.0]) * count
        sbuf = [memoryview(self.send)[:count], self.MPI.FLOAT]
        rbuf = [memoryview(self.recv)[:count], self.MPI.FLOAT]
        allreduce, op, clock, sleep = self.comm.Allreduce, self.MPI.SUM, time.perf_counter, time.sleep
        for _ in range(warmup):
            if delay_s:
                sleep(delay_s)
            allreduce(sbuf, rbuf, op)
        if per_iter:
            times = []
            for _ in range(iters):
                if delay_s:
                    sleep(delay_s)
                t0 = clock()
                allreduce(sbuf, rbuf, op)
                times.append(clock() - t0)
            return times, sum(times) / len(times)
        t0 = clock()
        for _ in range(iters):
            if delay_s:
                sleep(delay_s)
            allreduce(sbuf, rbuf, op)
        return None, (clock() - t0) / iters

    def correct(self, nbytes: int) -> bool:
        count = nbytes // 4
        want = (self.expected * (count // PERIOD + 1))[:count]
        return memoryview(self.recv)[:count].tobytes() == want.tobytes()

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- nccl (CuPy)


class NcclBackend:
    """NCCL all-reduce through CuPy, one rank per GPU; rank 0's unique id travels over MPI."""

    name = "nccl"
    POLL_S = 0.0002

    def __init__(self, comm: Any, local_rank: int, max_bytes: int, corrupt: bool = False, max_iters: int = 1000):
        """``max_iters``: the most timed iterations of one latency size (two CUDA events each,
        made up front); ``gpuhc sweep run`` passes its ``--latency-iters``."""
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as e:
            raise BackendError(f"the nccl backend needs CuPy with NCCL (pip install gpuhc[gpu]): {e}") from None
        if not getattr(cupy.cuda, "nccl_enabled", True):
            raise BackendError("this CuPy was built without NCCL (install nvidia-nccl-cuXX)")
        self.cp, self.nccl = cupy, nccl
        self.rank, self.nranks = comm.Get_rank(), comm.Get_size()
        try:
            ndev = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001 - CUDARuntimeError when no driver or no device
            raise BackendError(f"no CUDA device visible: {e}") from None
        if ndev < 1:
            raise BackendError("no CUDA device visible")
        # Under Slurm with per-task GPU binding each rank sees one device; otherwise spread the
        # ranks that share this machine over its GPUs. Shared memory, not the node name, says
        # who shares a machine (test clusters run several Slurm "nodes" on one host).
        from mpi4py import MPI

        host_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        self.device = host_rank % ndev
        cupy.cuda.Device(self.device).use()
        uid = nccl.get_unique_id() if self.rank == 0 else None
        uid = comm.bcast(uid, root=0)
        self.comm = nccl.NcclCommunicator(self.nranks, uid, self.rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        count = max_bytes // 4
        self.send = cupy.empty(count, dtype=cupy.float32)
        self.recv = cupy.full(count, -1.0, dtype=cupy.float32)
        self._fill(self.send, pattern_row(self.rank), count)
        if corrupt and count:
            self.send[0] += 1.0
        self.expected = cupy.asarray(expected_row(self.nranks), dtype=cupy.float32)
        self.events = [cupy.cuda.Event() for _ in range(2 * max_iters)]
        self.max_iters = max_iters
        cupy.cuda.runtime.deviceSynchronize()

    def _fill(self, buf: Any, row: list[float], count: int) -> None:
        r = self.cp.asarray(row, dtype=self.cp.float32)
        full = count - count % PERIOD
        if full:
            buf[:full].reshape(-1, PERIOD)[...] = r
        if count - full:
            buf[full:count] = r[: count - full]

    def describe(self) -> dict:
        props = self.cp.cuda.runtime.getDeviceProperties(self.device)
        name = props.get("name", b"")
        return {"device": self.device, "gpu": name.decode() if isinstance(name, bytes) else str(name),
                "nccl": self.nccl.get_version()}

    def measure(self, nbytes: int, warmup: int, iters: int, per_iter: bool, delay_s: float = 0.0,
                timeout_s: float = 0.0) -> tuple[list[float] | None, float]:
        count = nbytes // 4
        stream = self.stream
        self.recv[:count].fill(-1.0)  # on the null stream, before anything on ours: synchronize
        self.cp.cuda.runtime.deviceSynchronize()
        sp, rp, sptr = self.send.data.ptr, self.recv.data.ptr, stream.ptr
        allreduce, f32, op, sleep = self.comm.allReduce, self.nccl.NCCL_FLOAT32, self.nccl.NCCL_SUM, time.sleep
        deadline = time.monotonic() + timeout_s if timeout_s else float("inf")
        for _ in range(warmup):
            if delay_s:
                sleep(delay_s)
            allreduce(sp, rp, count, f32, op, sptr)
        if per_iter:
            iters = min(iters, self.max_iters)
            evs = self.events
            for i in range(iters):
                if delay_s:
                    sleep(delay_s)
                evs[2 * i].record(stream)
                allreduce(sp, rp, count, f32, op, sptr)
                evs[2 * i + 1].record(stream)
            self._wait(evs[2 * iters - 1], deadline, nbytes, timeout_s)
            elapsed = self.cp.cuda.get_elapsed_time
            times = [elapsed(evs[2 * i], evs[2 * i + 1]) / 1e3 for i in range(iters)]
            return times, sum(times) / iters
        start, end = self.events[0], self.events[1]
        start.record(stream)
        for _ in range(iters):
            if delay_s:
                sleep(delay_s)
            allreduce(sp, rp, count, f32, op, sptr)
        end.record(stream)
        self._wait(end, deadline, nbytes, timeout_s)
        return None, self.cp.cuda.get_elapsed_time(start, end) / 1e3 / iters

    def _wait(self, event: Any, deadline: float, nbytes: int, timeout_s: float) -> None:
        """Wait for ``event`` without blocking in CUDA, so a hung peer cannot hang us."""
        polls = 0
        while not event.done:
            polls += 1
            if polls % 256 == 0:
                self.comm.check_async_error()  # raises NcclError on a failed communicator
                if time.monotonic() > deadline:
                    self.comm.abort()  # frees the kernels spinning on the missing peer
                    raise CollectiveTimeout(nbytes, timeout_s)
            time.sleep(self.POLL_S)

    def correct(self, nbytes: int) -> bool:
        count = nbytes // 4
        r = self.recv[:count]
        full = count - count % PERIOD
        ok = True
        if full:
            ok = bool((r[:full].reshape(-1, PERIOD) == self.expected).all())
        if ok and count - full:
            ok = bool((r[full:] == self.expected[: count - full]).all())
        return ok

    def close(self) -> None:
        try:
            self.comm.destroy()
        except Exception:  # noqa: BLE001 - a destroyed or aborted communicator is fine at exit
            pass


BACKENDS: dict[str, Callable[..., Any]] = {"mpi": MpiBackend, "nccl": NcclBackend}
