"""Who holds the GPUs: the processes NVML lists on each GPU, and the memory in use.

Read only in the stages that judge occupancy (prolog, epilog, bootstrap; docs/checks.md,
"occupancy"), in its own reader thread beside the counter read, so that the epilog's wait for a
job's leftover processes delays no other check.

- Compute *and* graphics processes are listed (``nvmlDeviceGetComputeRunningProcesses`` and
  ``nvmlDeviceGetGraphicsRunningProcesses``) and merged by pid; a process in both lists is
  ``compute+graphics``.
- Who each process is (its name, ``/proc/<pid>/comm``, and real uid) is read by
  gpuhc/node/holders.py, as the reset plan and the services check read it. A pid NVML lists that
  ``/proc`` does not have is kept and marked ``gone``: the process exited since, or lives in
  another PID namespace (a container), which is exactly what an admin must be told.
- MIG on: each MIG device's own process list, each process marked with its GPU and compute
  instance, and each instance's memory (``instances``): the prolog of a job on one slice judges
  that slice alone (gpuhc/checks/occupancy.py).
- Memory "used" is NVML's v2 figure where the driver has it, which leaves out what the driver
  reserves for itself (several hundred MiB on Hopper), so an idle GPU reads near zero. With MIG
  on, the parent GPU's figure is its instances' and is not judged (``mig``).
- gpuhc runs in the host's PID namespace (as slurmd's prolog and epilog do): NVML's pids are the
  host's, and ``/proc`` is read with that in mind.
- A GPU NVML cannot talk to is kept with ``error`` set: the check says it could not judge it.
  A list NVML does not give there (NOT_SUPPORTED) is named in ``unlisted``: the check reads it as
  no process, as before; the GPU reset's plan, which reads these lists too
  (gpuhc/slurm/repair/reset_probe.py), reads it as holders it cannot see and refuses.
- ``wait_s`` (the epilog): while a wanted GPU still holds a compute process, or more than
  ``settle_mib`` in use (a context the driver is still tearing down), read again every
  ``poll_s`` until it settles or the wait is over; ``waited_s`` says how long it took.
"""

from __future__ import annotations

import os
import time
from typing import Any

from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy
from gpuhc.sources import nvml_mig, nvml_util

_MIB = 1024 * 1024


class OccupancyLive:
    def __init__(self, gpus: list[int] | None = None, wait_s: float = 0.0, poll_s: float = 0.5,
                 module: Any = None, proc_root: str = "/proc", settle_mib: float | None = None, job: Any = None,
                 allowed: tuple[tuple[str, int], ...] = ()):
        self.gpus = None if gpus is None else sorted(set(gpus))
        self.allowed = tuple(allowed)  # (name, owner uid): a monitor the epilog does not wait for
        self.job = job  # gpuhc.node.gpumap.JobScope: wait for the job's slices only, never on a shared GPU
        self.wait_s = max(0.0, float(wait_s))
        self.settle_mib = settle_mib
        self.poll_s = max(0.01, float(poll_s))
        self._module = module  # tests pass a fake pynvml; None imports the real one
        self.proc_root = proc_root

    def read(self) -> Occupancy:
        return nvml_util.session(self._module, self._read, lambda why: Occupancy(available=False, error=why))

    def _read(self, nv: Any) -> Occupancy:
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as e:
            return Occupancy(available=False, error=f"nvmlDeviceGetCount failed: {e}")
        wanted = [i for i in range(count) if self.gpus is None or i in self.gpus]
        handles: dict[int, Any] = {}
        errors: dict[int, str] = {}
        for i in wanted:
            try:
                handles[i] = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as e:
                errors[i] = f"no NVML handle: {e}"
        start = time.monotonic()
        gpus = [self._gpu(nv, i, handles.get(i), errors.get(i)) for i in wanted]
        while self.wait_s and not self._settled(gpus) and time.monotonic() - start < self.wait_s:
            time.sleep(min(self.poll_s, max(0.0, self.wait_s - (time.monotonic() - start))))
            gpus = [self._gpu(nv, i, handles.get(i), errors.get(i)) for i in wanted]
        waited = round(time.monotonic() - start, 3) if self.wait_s else 0.0
        return Occupancy(available=True, gpus=gpus, waited_s=waited)

    def _gpu(self, nv: Any, index: int, h: Any, error: str | None) -> GpuOccupancy:
        gpu = GpuOccupancy(index=index, error=error)
        if h is None:
            return gpu
        try:
            gpu.uuid = nvml_util.text(nv.nvmlDeviceGetUUID(h)) or ""
            gpu.memory_used_mib, gpu.memory_total_mib, gpu.memory_reserved_mib = _memory(nv, h)
            gpu.mig = nvml_mig.mig_mode(nv, h)
            # MIG on: each instance's own list (the parent's, read as root, holds every slice's
            # processes), each process marked with its instance (docs/checks.md, "occupancy").
            lists = [(None, h)]
            if gpu.mig:
                devices = nvml_mig.mig_devices(nv, h)
                gpu.instances = [inst for _, inst in devices]
                lists = [(inst, mh) for mh, inst in devices]
            listed = [(inst, kind, procs) for inst, handle in lists for kind, procs in _both(nv, handle)]
            gpu.unlisted = sorted({kind for _, kind, procs in listed if procs is None})
        except nv.NVMLError as e:
            gpu.error = f"cannot list processes: {e}"
            return gpu
        from gpuhc.node.holders import identity

        me = os.getpid()
        merged: dict[int, GpuProcess] = {}
        for inst, kind, procs in listed:
            for p in procs or ():
                pid = int(p.pid)
                if pid == me:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                used_mib = round(int(used) / _MIB, 1) if isinstance(used, int) else None
                if pid in merged:
                    cur = merged[pid]
                    cur.kinds = "compute+graphics"
                    cur.used_mib = cur.used_mib if cur.used_mib is not None else used_mib
                    continue
                who = identity(self.proc_root, pid)
                merged[pid] = GpuProcess(pid=pid, name=who.name, used_mib=used_mib, kinds=kind, gone=who.gone,
                                         gi=None if inst is None else inst.gi, ci=None if inst is None else inst.ci,
                                         uid=who.uid)
        gpu.processes = [merged[pid] for pid in sorted(merged)]
        return gpu

    def _settled(self, gpus: list[GpuOccupancy]) -> bool:
        for g in gpus:
            want = self.job.slices.get(g.index) if self.job is not None else None
            if self.job is not None and g.index in self.job.shared:
                continue  # other jobs run there: nothing to wait for
            procs = g.processes if not want else [
                p for p in g.processes if any(p.gi == gi and ci in (None, p.ci) for gi, ci in want)]
            if any("compute" in p.kinds and not p.allowed(self.allowed) for p in procs):
                return False
            if want:
                continue  # the parent's memory is every slice's
            # The bound is for memory left with no process (occupancy's leaked_mib): only a figure
            # without the driver's reserve (v2) can be held to it; a v1 figure waits for processes.
            left = [p for p in procs if not p.allowed(self.allowed)]
            if (self.settle_mib is not None and not g.mig and not left and g.memory_reserved_mib is not None
                    and g.unallowed_used_mib(self.allowed) > self.settle_mib):
                return False
        return True


def _memory(nv: Any, h: Any) -> tuple[float | None, float | None, float | None]:
    """(used, total, reserved) MiB; the v2 query leaves out the driver's reserve and says it
    (reserved), v1 does not (reserved None)."""
    version = getattr(nv, "nvmlMemory_v2", None)
    mem = None
    if version is not None:
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h, version=version)
        except (nv.NVMLError, TypeError):
            mem = None  # an older driver or binding: fall back to v1
    if mem is None:
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h)
        except nv.NVMLError as e:
            if nvml_util.is_error(nv, e, "NVML_ERROR_NOT_SUPPORTED"):
                return None, None, None
            raise
    reserved = getattr(mem, "reserved", None)
    return (round(int(mem.used) / _MIB, 1), round(int(mem.total) / _MIB, 1),
            None if reserved is None else round(int(reserved) / _MIB, 1))


def _both(nv: Any, h: Any) -> list[tuple[str, list[Any] | None]]:
    """The compute and the graphics processes of one device (a GPU or a MIG device); None: a
    list NVML does not give here."""
    return [("compute", _processes(nv, h, ("nvmlDeviceGetComputeRunningProcesses",
                                           "nvmlDeviceGetComputeRunningProcesses_v2"))),
            ("graphics", _processes(nv, h, ("nvmlDeviceGetGraphicsRunningProcesses",
                                            "nvmlDeviceGetGraphicsRunningProcesses_v2")))]


def _processes(nv: Any, h: Any, names: tuple[str, ...]) -> list[Any] | None:
    """The first entry point the binding and the driver both have; None: NOT_SUPPORTED, or no
    entry point (the occupancy check reads it as no process; the reset plan as unknown)."""
    for name in names:
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            return list(fn(h) or [])
        except getattr(nv, "NVMLLibraryMismatchError", ()):
            continue  # the binding's unversioned name asks for a newer entry point than the driver's
        except nv.NVMLError as e:
            if nvml_util.is_error(nv, e, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                continue
            if nvml_util.is_error(nv, e, "NVML_ERROR_NOT_SUPPORTED"):
                return None
            raise
    return None
