"""The child process that does the GPU work, started isolated (``python -I``: gpuhc/active/supervise.py).

It speaks JSON lines (see :mod:`gpuhc.active.supervise`): says hello with what it can see, then
runs one task per line read from stdin until told to quit or stdin closes. It measures and
reports raw numbers; it judges nothing. Anything a library prints goes to stderr, so stdout
carries protocol only.

After each task every GPU buffer goes back to the driver, whether the task succeeded or not.
After a CUDA error the CUDA context may be unusable (errors are sticky), so the worker says
``restart`` and exits; the parent starts a fresh one for the remaining tasks.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import time
from typing import Any

from gpuhc.active import registry

# task name -> module holding measure(params, devices): the registry's tasks, and the ones that
# exist only for the GPU tests (their function is the task name without the underscore)
TASKS = {
    **{t.name: t.module for t in registry.TASKS},
    "_spin": "gpuhc.active.testtasks",
    "_fail_after_alloc": "gpuhc.active.testtasks",
    "_hash_check": "gpuhc.active.testtasks",
}
NODE_WIDE = {t.name for t in registry.TASKS if t.node_wide}


class Protocol:
    def __init__(self) -> None:
        # Keep the real stdout for the protocol; point fd 1 at stderr for everything else.
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def emit(self, ev: dict[str, Any]) -> None:
        self.out.write(json.dumps(ev, default=_jsonable) + "\n")
        self.out.flush()


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    return str(v)


def hello() -> dict[str, Any]:
    """What this process can see: CuPy, CUDA devices (in CUDA order) and their NVML identity."""
    from gpuhc.active import nvml_probe

    info: dict[str, Any] = {"ev": "hello", "pid": os.getpid(), "cupy": False, "devices": []}
    info["nvml_count"] = nvml_probe.nvml_gpu_count()
    try:
        import cupy as cp

        info["cupy"] = True
        info["cupy_version"] = cp.__version__
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        info["cupy_error"] = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        devices, info["nvml_error"] = nvml_probe.describe(_nvml_pci_ids())
        for d in devices:
            d["cuda"] = None
        info["devices"] = _with_subjects(devices)
        return info
    try:
        n = cp.cuda.runtime.getDeviceCount()
        pcis = [cp.cuda.runtime.deviceGetPCIBusId(i) for i in range(n)]
    except Exception as e:  # no driver, or CUDA refuses (e.g. fabric manager not ready)
        info["cuda_error"] = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return info
    devices, info["nvml_error"] = nvml_probe.describe(pcis)
    for d in devices:
        d["sm_count"] = cp.cuda.runtime.deviceGetAttribute(16, d["cuda"])  # cudaDevAttrMultiProcessorCount
    info["devices"] = _with_subjects(devices)
    try:
        from cupy.cuda import nccl

        info["nccl"] = bool(nccl.available)
    except Exception:
        info["nccl"] = False
    return info


def _nvml_pci_ids() -> list[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            pci = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            out.append(pci.decode() if isinstance(pci, bytes) else pci)
        return out
    except Exception:
        return []


def _with_subjects(devices: list[dict]) -> list[dict]:
    for d in devices:
        d["subject"] = f"gpu{d['index']}"
    return devices


def run_task(name: str, params: dict, devices: list[dict]) -> dict[str, Any]:
    from gpuhc.active.gpu import classify

    ev: dict[str, Any] = {"task": name}
    t0 = time.monotonic()
    try:
        if name not in TASKS:
            raise ValueError(f"unknown task {name!r}")
        fn = getattr(importlib.import_module(TASKS[name]), "measure" if not name.startswith("_") else name[1:])
        ev.update(ev="done", data=fn(params, devices))
    except BaseException as e:  # reported to the parent, which decides what it means
        kind, message = classify(e)
        if isinstance(e, ImportError) and "nccl" in str(e).lower():
            kind = "nccl-missing"
        ev.update(ev="fail", kind=kind, message=message, restart=kind in ("cuda", "ecc"))
    finally:
        gc.collect()  # drop the task's arrays before asking the pools to give memory back
        if "cupy" in sys.modules:
            try:
                from gpuhc.active.gpu import pool_used_bytes, release

                release()
                ev["pool_used"] = pool_used_bytes()
            except Exception:
                pass
    ev["seconds"] = round(time.monotonic() - t0, 3)
    return ev


def _die_with_parent() -> None:
    """The worker runs in its own session (so the parent can kill its whole group), which also
    takes it out of the group Slurm kills when an epilog overruns. Ask the kernel to kill it when
    the parent dies, so an orphan never keeps a node's GPUs busy."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        return  # not Linux: the stdin check between tasks still ends an orphan
    parent = os.environ.get("GPUHC_PARENT_PID")
    if parent and parent.isdigit() and os.getppid() != int(parent):
        os._exit(1)  # the parent died before prctl took effect


def main() -> int:
    _die_with_parent()
    proto = Protocol()
    info = hello()
    proto.emit(info)
    by_cuda = {d["cuda"]: d for d in info["devices"]}
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        name = req.get("task")
        if name == "quit":
            break
        if name in NODE_WIDE:  # node-wide inventory, also without CuPy (no CUDA ordinals then)
            devices = list(info["devices"])
        else:
            devices = [by_cuda[i] for i in req.get("devices") or [] if i in by_cuda]
        proto.emit({"ev": "start", "task": name})
        ev = run_task(name, req.get("params") or {}, devices)
        proto.emit(ev)
        if ev.get("restart"):
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
