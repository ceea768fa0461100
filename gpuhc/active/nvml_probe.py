"""NVML on the worker side: which CUDA device is which GPU, who else uses it, and clock/thermal
samples taken while the GPUs are under load.

Idle GPUs say little about throttling (they report GPU_IDLE); the clocks and clock-event
reasons that matter are those seen *during* the burn-in, so the worker samples them from a
thread while its main thread waits on the GPUs. Every call is optional: NVML missing, or a
getter NOT_SUPPORTED, yields ``None`` fields, never an exception.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

# Clock-event reason bits (nvmlClocksEventReason*), named as gpuhc reports them.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks",
}


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _try(fn, *args, default=None):
    try:
        return fn(*args)
    except Exception:
        return default


def _str(v: Any) -> Any:
    return v.decode() if isinstance(v, bytes) else v


def handle_for_pci(nv, pci: str):
    return _try(nv.nvmlDeviceGetHandleByPciBusId, pci.encode() if isinstance(pci, str) else pci)


def describe(pci_ids: list[str]) -> tuple[list[dict], str | None]:
    """One dict per CUDA device (in CUDA order, given by PCI id): NVML index, name, memory and
    the compute processes already on it. Returns (devices, nvml_error)."""
    nv = _nvml()
    out: list[dict] = []
    for cuda_idx, pci in enumerate(pci_ids):
        d: dict[str, Any] = {"cuda": cuda_idx, "pci": pci, "index": cuda_idx, "procs": []}
        h = handle_for_pci(nv, pci) if nv else None
        if h is not None:
            d["index"] = _try(nv.nvmlDeviceGetIndex, h, default=cuda_idx)
            d["name"] = _str(_try(nv.nvmlDeviceGetName, h))
            d["uuid"] = _str(_try(nv.nvmlDeviceGetUUID, h))
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                d["mem_total"], d["mem_used"] = int(mem.total), int(mem.used)
            procs = _try(nv.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or []
            me = os.getpid()
            d["procs"] = [
                {"pid": int(p.pid), "name": _proc_name(p.pid), "used": _used(p)} for p in procs if int(p.pid) != me
            ]
        out.append(d)
    return out, (None if nv else "NVML unavailable")


def nvml_gpu_count() -> int | None:
    nv = _nvml()
    return _try(nv.nvmlDeviceGetCount) if nv else None


def _used(p) -> int | None:
    v = getattr(p, "usedGpuMemory", None)
    return int(v) if isinstance(v, int) else None


def _proc_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "?"


class Sampler:
    """Samples SM clock, temperature, power and clock-event reasons of some GPUs every
    ``interval`` seconds in a daemon thread, between start() and stop()."""

    def __init__(self, pci_by_subject: dict[str, str], interval: float = 0.2):
        self.interval = interval
        self.nv = _nvml()
        self.handles = {}
        if self.nv:
            for subject, pci in pci_by_subject.items():
                h = handle_for_pci(self.nv, pci)
                if h is not None:
                    self.handles[subject] = h
        self.samples: dict[str, list[dict]] = {s: [] for s in self.handles}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpuhc-nvml-sampler", daemon=True)

    def start(self) -> "Sampler":
        if self.handles:
            self._thread.start()
        return self

    def stop(self) -> dict[str, dict]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        return {s: summarize(v) for s, v in self.samples.items()}

    def _run(self) -> None:
        nv = self.nv
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        while not self._stop.is_set():
            for subject, h in self.handles.items():
                self.samples[subject].append(
                    {
                        "sm_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                        "temp_c": _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                        "power_w": _try(lambda x: nv.nvmlDeviceGetPowerUsage(x) / 1000.0, h),
                        "reasons": _try(reasons_fn, h) if reasons_fn else None,
                    }
                )
            self._stop.wait(self.interval)


def summarize(samples: list[dict]) -> dict:
    """Reduce samples to what a judge needs: clock range, peak temperature and power, and the
    fraction of samples in which each clock-event reason was active."""
    def vals(key: str) -> list[float]:
        return sorted(s[key] for s in samples if isinstance(s.get(key), (int, float)))

    sm, temp, power = vals("sm_mhz"), vals("temp_c"), vals("power_w")
    reason_samples = [s["reasons"] for s in samples if isinstance(s.get("reasons"), int)]
    fractions = {}
    for bit, name in REASONS.items():
        hits = sum(1 for r in reason_samples if r & bit)
        if hits:
            fractions[name] = round(hits / len(reason_samples), 3)
    return {
        "n": len(samples),
        "sm_mhz_min": sm[0] if sm else None,
        "sm_mhz_median": sm[len(sm) // 2] if sm else None,
        "sm_mhz_max": sm[-1] if sm else None,
        "temp_c_max": temp[-1] if temp else None,
        "power_w_max": round(power[-1], 1) if power else None,
        "reasons": fractions,
    }


def pcie_link(pci: str) -> dict:
    """Current and maximum PCIe generation and width (read right after a transfer, while the
    link is still trained up: an idle GPU may drop its generation to save power)."""
    nv = _nvml()
    h = handle_for_pci(nv, pci) if nv else None
    if h is None:
        return {}
    return {
        "gen": _try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "gen_max": _try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "width": _try(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        "width_max": _try(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
    }


def now() -> float:
    return time.monotonic()
