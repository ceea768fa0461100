#!/usr/bin/env python3
"""The floor: a minimal hand-written pynvml program that reads what gpuhc's stage reads.

No gpuhc import, no error handling beyond skipping what a GPU does not support, no output but
one line: the least any Python tool pays for the same NVML fields. bench/bench_check.py times
gpuhc against it (issue 10: the prolog within 1.3x of this floor).

    python3 bench/nvml_floor.py passive            # every GPU in full, 3 clock samples 20 ms apart
    python3 bench/nvml_floor.py prolog --gpus 1    # GPU 1 in full plus its processes and memory;
                                                   # the others' name, UUID, PCI id and serial
    python3 bench/nvml_floor.py passive --dl-rotation 1   # the DL counters of every link

The three NVLink DL error counters (about 0.8 ms per link each in the driver) are read, as the
passive and prolog stages read them, on one slice of the links: every ``--dl-rotation``-th link
(default 3, the nvlink check's default ``dl_rotation``; 1: every link). Every other link field
is read on every link.

The field lists are written out here on purpose (a floor must not pay for gpuhc's imports);
tests/bench/test_nvml_floor.py keeps them equal to gpuhc/sources/nvml_fields.py.
"""

import sys
import time

DEVICE_FIELDS = (
    "NVML_FI_DEV_ECC_CURRENT", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_FI_DEV_ECC_DBE_VOL_TOTAL",
    "NVML_FI_DEV_ECC_DBE_AGG_TOTAL", "NVML_FI_DEV_RETIRED_SBE", "NVML_FI_DEV_RETIRED_DBE",
    "NVML_FI_DEV_RETIRED_PENDING", "NVML_FI_DEV_REMAPPED_COR", "NVML_FI_DEV_REMAPPED_UNC",
    "NVML_FI_DEV_REMAPPED_PENDING", "NVML_FI_DEV_REMAPPED_FAILURE", "NVML_FI_DEV_PCIE_REPLAY_COUNTER",
    "NVML_FI_DEV_MEMORY_TEMP", "NVML_FI_DEV_NVLINK_LINK_COUNT",
    # NVLink-C2C error counters (Grace-Blackwell): NOT_SUPPORTED on Hopper, asked in the same batch
    "NVML_FI_DEV_C2C_LINK_ERROR_INTR", "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY", "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B",
)
LINK_FIELDS = (
    "NVML_FI_DEV_NVLINK_GET_STATE", "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY",
    "NVML_FI_DEV_NVLINK_ERROR_DL_CRC", "NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS", "NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS", "NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS", "NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS",
    "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS",
    "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS",
)
DL_FIELDS = ("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY", "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY", "NVML_FI_DEV_NVLINK_ERROR_DL_CRC")
LEGACY_LINK_FIELDS = ("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L{n}", "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{n}")
SIMPLE_GETTERS = (
    ("nvmlDeviceGetCurrPcieLinkGeneration", None), ("nvmlDeviceGetMaxPcieLinkGeneration", None),
    ("nvmlDeviceGetCurrPcieLinkWidth", None), ("nvmlDeviceGetMaxPcieLinkWidth", None),
    ("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"), ("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
    ("nvmlDeviceGetUtilizationRates", None), ("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU"),
    ("nvmlDeviceGetPowerUsage", None), ("nvmlDeviceGetEnforcedPowerLimit", None),
    ("nvmlDeviceGetPowerManagementDefaultLimit", None),
)


def main() -> None:
    stage = sys.argv[1] if len(sys.argv) > 1 else "passive"
    gpus = None
    if "--gpus" in sys.argv:
        gpus = {int(x) for x in sys.argv[sys.argv.index("--gpus") + 1].split(",")}
    samples = 1 if stage == "prolog" else 3
    rotation = int(sys.argv[sys.argv.index("--dl-rotation") + 1]) if "--dl-rotation" in sys.argv else 3

    import ctypes

    import pynvml as nv

    def get(fn, *args):
        try:
            return fn(*args)
        except nv.NVMLError:
            return None

    nv.nvmlInit()
    got = [get(nv.nvmlSystemGetDriverVersion), get(nv.nvmlSystemGetCudaDriverVersion)]
    dev = [getattr(nv, c) for c in DEVICE_FIELDS if hasattr(nv, c)]
    count_id = getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
    at = dev.index(count_id) if count_id in dev else None
    link_fields = [getattr(nv, c) for c in LINK_FIELDS if hasattr(nv, c) and c not in DL_FIELDS]
    dl_fields = [getattr(nv, c) for c in DL_FIELDS if hasattr(nv, c)]
    full = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        got += [get(nv.nvmlDeviceGetName, h), get(nv.nvmlDeviceGetUUID, h), get(nv.nvmlDeviceGetPciInfo_v3, h),
                get(nv.nvmlDeviceGetSerial, h)]
        if gpus is not None and i not in gpus:
            continue
        got += [get(nv.nvmlDeviceGetVbiosVersion, h), get(nv.nvmlDeviceGetPersistenceMode, h)]
        values = get(nv.nvmlDeviceGetFieldValues, h, dev) or []
        count = values[at] if at is not None and at < len(values) else None  # the link count, by position
        links = count.value.uiVal if count is not None and count.nvmlReturn == 0 else 0
        got.append(get(nv.nvmlDeviceGetCurrentClocksEventReasons, h))
        for fn, arg in SIMPLE_GETTERS:
            got.append(get(getattr(nv, fn), h, *(() if arg is None else (getattr(nv, arg),))))
        info = nv.c_nvmlGpuFabricInfoV_t()
        got.append(get(nv.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info)))
        if stage == "prolog":
            got += [get(nv.nvmlDeviceGetComputeRunningProcesses, h), get(nv.nvmlDeviceGetGraphicsRunningProcesses, h),
                    get(nv.nvmlDeviceGetMemoryInfo, h, nv.nvmlMemory_v2)]
        full.append((h, links))
    start = time.monotonic()
    for h, links in full:
        pairs = [(f, link) for link in range(links) for f in link_fields]
        pairs += [(f, link) for link in range(0, links, rotation) for f in dl_fields]
        pairs += [(getattr(nv, c.format(n=link)), 0) for link in range(min(links, 12)) for c in LEGACY_LINK_FIELDS]
        if pairs:
            got.append(get(nv.nvmlDeviceGetFieldValues, h, pairs))
    for _ in range(samples - 1):
        time.sleep(max(0.0, 0.02 - (time.monotonic() - start)))
        start = time.monotonic()
        got += [get(nv.nvmlDeviceGetCurrentClocksEventReasons, h) for h, _ in full]
    nv.nvmlShutdown()
    print(f"floor {stage}: {len(full)} GPU(s) in full, DL counters of every {rotation}. link, {len(got)} answers")


if __name__ == "__main__":
    main()
