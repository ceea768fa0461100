"""Device probe for the NVLink fabric read (docs/verification.md, "Fabric read"): on every GPU,
what each fabric-info struct version answers, what gpuhc's reader (gpuhc/sources/nvml_fabric.py)
makes of it, what the NVLink-C2C fields answer, and how long the reader takes. Prints JSON.

Run from a checkout on a GPU node: ``PYTHONPATH=. python3 bench/nvml_fabric_probe.py``.
"""

from __future__ import annotations

import ctypes
import json
import time

import pynvml as nv

from gpuhc.model.nvml import GpuReading
from gpuhc.sources import nvml_fabric
from gpuhc.sources.nvml import NvmlLive


def main() -> None:
    nv.nvmlInit()
    out: dict = {"driver": nv.nvmlSystemGetDriverVersion(), "gpus": []}
    c2c = [getattr(nv, c) for c in ("NVML_FI_DEV_C2C_LINK_COUNT", "NVML_FI_DEV_C2C_LINK_ERROR_INTR",
                                    "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY", "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B")]
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        raw = {}
        for fn, struct in nvml_fabric._VERSIONS:
            info = getattr(nv, struct)()
            try:
                getattr(nv, fn)(h, ctypes.byref(info))
                raw[struct] = {"state": int(info.state), "status": int(info.status)}
            except nv.NVMLError as e:
                raw[struct] = f"{type(e).__name__}: {e}"
        notes: list[str] = []
        gpu = GpuReading(index=i, name=nv.nvmlDeviceGetName(h), uuid="", pci_bus_id="")
        t0 = time.perf_counter()
        for _ in range(200):
            nvml_fabric.read_fabric(nv, h, gpu, notes.append, lambda e: None)
        per_read_us = (time.perf_counter() - t0) / 200 * 1e6
        fields = nv.nvmlDeviceGetFieldValues(h, c2c)
        out["gpus"].append({
            "index": i, "name": gpu.name, "raw": raw, "per_read_us": round(per_read_us, 1), "notes": sorted(set(notes)),
            "reading": {k: getattr(gpu, k) for k in ("fabric_state", "fabric_status", "fabric_clique_id",
                                                     "fabric_cluster_uuid", "fabric_health_mask", "fabric_health_summary")},
            "c2c_returns": [int(v.nvmlReturn) for v in fields],
        })
    nv.nvmlShutdown()
    t0 = time.perf_counter()
    reading = NvmlLive(clock_samples=1).read()
    out["full_read_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    out["full_read"] = [{"index": g.index, "fabric_state": g.fabric_state, "fabric_status": g.fabric_status,
                         "health_mask": g.fabric_health_mask, "c2c_errors": g.c2c_errors} for g in reading.gpus]
    out["full_read_notes"] = reading.notes
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
