"""Probe the live NVML source on a real GPU node: what it reads, what NVML refuses, how long it takes.

Run on a GPU machine: ``PYTHONPATH=. python3 bench/nvml_probe.py [OUTDIR]``. Prints

- the wall time of ``python -c "import pynvml"`` against ``python -c "pass"`` (medians of 5, same run),
- the wall time of ``NvmlLive().read()`` (median of 5 after one warm-up), and of the raw pieces it is
  made of (nvmlInit/Shutdown, the two field-value batches, the single getters), per GPU,
- which per-link NVLink fields this GPU/driver supports (the return code of each),
- the reading itself as scenario YAML (also written to OUTDIR/reading.yaml), and the notes.

No clocks, limits or modes are changed: everything here is a read.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def median_wall(argv: list[str], n: int = 5) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, check=True, timeout=60)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(outdir, exist_ok=True)
    base = median_wall([sys.executable, "-c", "pass"])
    imp = median_wall([sys.executable, "-c", "import pynvml"])
    print(f"python -c pass: {base * 1e3:.1f} ms; python -c 'import pynvml': {imp * 1e3:.1f} ms "
          f"(import alone ~{(imp - base) * 1e3:.1f} ms)")

    from gpuhc.model.snapshot import Snapshot
    from gpuhc.sources.nvml import NvmlLive
    from gpuhc.sources.nvml_fields import LEGACY_LINK_FIELDS, LINK_FIELDS
    from gpuhc.sources.snapshot_format import dump_yaml

    src = NvmlLive(clock_samples=3, sample_interval_s=0.02)
    t = time.perf_counter()
    reading = src.read()
    first = time.perf_counter() - t
    times = []
    for _ in range(5):
        t = time.perf_counter()
        reading = src.read()
        times.append(time.perf_counter() - t)
    n = len(reading.gpus)
    print(f"NvmlLive.read(): first {first * 1e3:.1f} ms, then median {statistics.median(times) * 1e3:.1f} ms "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}) for {n} GPUs, 3 clock samples 20 ms apart")
    src0 = NvmlLive(clock_samples=1)
    t0 = []
    for _ in range(5):
        t = time.perf_counter()
        src0.read()
        t0.append(time.perf_counter() - t)
    print(f"NvmlLive(clock_samples=1).read(): median {statistics.median(t0) * 1e3:.1f} ms")
    one, every = NvmlLive(clock_samples=1, gpus=[0]), NvmlLive(clock_samples=1)
    t1, ta = [], []
    for _ in range(7):
        for s_, acc in ((one, t1), (every, ta)):
            t = time.perf_counter()
            s_.read()
            acc.append(time.perf_counter() - t)
    print(f"clock_samples=1: GPU 0 in full (the rest inventory only) median {statistics.median(t1) * 1e3:.1f} ms, "
          f"every GPU in full median {statistics.median(ta) * 1e3:.1f} ms (7 alternated runs each)")
    print("notes:", src.notes or "none")
    none_fields = sorted({k for g in reading.gpus for k, v in vars(g).items() if v is None})
    print("fields that came back None:", ", ".join(none_fields) or "none")

    import pynvml as nv

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)

    def timed(label: str, fn, reps: int = 20) -> None:
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            try:
                fn()
            except nv.NVMLError as e:
                label += f" [{e}]"
                reps = 1
            ts.append(time.perf_counter() - t)
        print(f"  {label}: median {statistics.median(ts) * 1e6:.0f} us")

    print("raw costs on GPU 0 (median of 20 after the first call):")
    count = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT])[0]
    links = count.value.uiVal if count.nvmlReturn == 0 else 0
    print(f"  NVLink link count field: ret={count.nvmlReturn} value={links}")
    from gpuhc.sources.nvml_fields import DEVICE_FIELDS

    dev = [getattr(nv, c) for _, c in DEVICE_FIELDS if hasattr(nv, c)]
    timed(f"device field batch ({len(dev)} fields)", lambda: nv.nvmlDeviceGetFieldValues(h, dev))
    scoped = [getattr(nv, c) for _, c in LINK_FIELDS if hasattr(nv, c)]
    core = scoped[:4]
    L = range(links)
    timed("field batch, 4 core fields x all links", lambda: nv.nvmlDeviceGetFieldValues(h, [(f, ln) for ln in L for f in core]))
    timed("field batch, every link field x all links", lambda: nv.nvmlDeviceGetFieldValues(h, [(f, ln) for ln in L for f in scoped]))
    timed("field batch, GET_STATE x all links", lambda: nv.nvmlDeviceGetFieldValues(h, [(core[0], ln) for ln in L]))
    timed("field batch, DL_REPLAY x all links", lambda: nv.nvmlDeviceGetFieldValues(h, [(core[1], ln) for ln in L]))
    timed("field batch, DL_CRC x all links", lambda: nv.nvmlDeviceGetFieldValues(h, [(core[3], ln) for ln in L]))
    timed("field batch, 3 DL counters, link 0 only", lambda: nv.nvmlDeviceGetFieldValues(h, [(f, 0) for f in core[1:]]))
    timed("field batch, NVLink5 counters x all links", lambda: nv.nvmlDeviceGetFieldValues(h, [(f, ln) for ln in L for f in scoped[4:]]))
    timed("nvmlDeviceGetNvLinkState x all links", lambda: [nv.nvmlDeviceGetNvLinkState(h, ln) for ln in L])
    for c in range(5):
        timed(f"nvmlDeviceGetNvLinkErrorCounter(counter {c}) x all links",
              lambda c=c: [nv.nvmlDeviceGetNvLinkErrorCounter(h, ln, c) for ln in L], reps=5)
    timed("nvmlDeviceGetRemappedRows", lambda: nv.nvmlDeviceGetRemappedRows(h))
    timed("nvmlDeviceGetCurrentClocksEventReasons", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
    timed("nvmlDeviceGetPowerUsage", lambda: nv.nvmlDeviceGetPowerUsage(h))
    timed("nvmlDeviceGetTemperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
    timed("nvmlDeviceGetGpuFabricInfoV", lambda: nv.nvmlDeviceGetGpuFabricInfoV(h, __import__("ctypes").byref(nv.c_nvmlGpuFabricInfoV_t())))
    for name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetSerial",
                 "nvmlDeviceGetVbiosVersion", "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetCurrPcieLinkGeneration",
                 "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth",
                 "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetEnforcedPowerLimit",
                 "nvmlDeviceGetPowerManagementDefaultLimit"):
        timed(name, lambda name=name: getattr(nv, name)(h))
    if links:
        print("nvmlDeviceGetNvLinkErrorCounter on link 0:", end=" ")
        for c in range(5):
            try:
                print(f"{c}={nv.nvmlDeviceGetNvLinkErrorCounter(h, 0, c)}", end=" ")
            except nv.NVMLError as e:
                print(f"{c}=[{e}]", end=" ")
        print()
    if links:
        print("per-link field support on link 0 (0 = success, 3 = not supported):")
        for name, const in LINK_FIELDS:
            if hasattr(nv, const):
                v = nv.nvmlDeviceGetFieldValues(h, [(getattr(nv, const), 0)])[0]
                print(f"  {name:22s} {const}: ret={v.nvmlReturn}")
        for name, const in LEGACY_LINK_FIELDS:
            c = const.format(n=0)
            v = nv.nvmlDeviceGetFieldValues(h, [getattr(nv, c)])[0]
            print(f"  {name:22s} {c}: ret={v.nvmlReturn}")
        for c in ("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"):
            v = nv.nvmlDeviceGetFieldValues(h, [getattr(nv, c)])[0]
            print(f"  legacy total {c}: ret={v.nvmlReturn}")
    nv.nvmlShutdown()
    t = []
    for _ in range(5):
        a = time.perf_counter()
        nv.nvmlInit()
        nv.nvmlShutdown()
        t.append(time.perf_counter() - a)
    print(f"nvmlInit+nvmlShutdown: median {statistics.median(t) * 1e3:.1f} ms")

    text = dump_yaml(Snapshot(hostname=os.uname().nodename, time=time.time(), nvml=reading))
    with open(os.path.join(outdir, "reading.yaml"), "w") as f:
        f.write(text)
    print("---- reading (scenario YAML) ----")
    print(text)


if __name__ == "__main__":
    main()
