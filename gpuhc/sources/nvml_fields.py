"""What the live NVML source asks for: field ids, per-link counters and single getters.

Kept as data so that the reader (``nvml.py``), the floor script (``bench/nvml_floor.py``) and the
probe (``bench/nvml_probe.py``) ask for exactly the same things. Names starting with "_" are
read for the reader's own use and not stored on the reading.
"""

from __future__ import annotations

from typing import Any, Callable

# Device-wide field values read in one batch: GpuReading attribute -> pynvml constant name.
# Names starting with "_" are read for our own use and not stored on the reading.
DEVICE_FIELDS: tuple[tuple[str, str], ...] = (
    ("ecc_mode", "NVML_FI_DEV_ECC_CURRENT"),
    ("ecc_volatile_corrected", "NVML_FI_DEV_ECC_SBE_VOL_TOTAL"),
    ("ecc_volatile_uncorrected", "NVML_FI_DEV_ECC_DBE_VOL_TOTAL"),
    ("ecc_aggregate_uncorrected", "NVML_FI_DEV_ECC_DBE_AGG_TOTAL"),
    ("retired_pages_sbe", "NVML_FI_DEV_RETIRED_SBE"),
    ("retired_pages_dbe", "NVML_FI_DEV_RETIRED_DBE"),
    ("retired_pages_pending", "NVML_FI_DEV_RETIRED_PENDING"),
    ("remap_correctable", "NVML_FI_DEV_REMAPPED_COR"),
    ("remap_uncorrectable", "NVML_FI_DEV_REMAPPED_UNC"),
    ("remap_pending", "NVML_FI_DEV_REMAPPED_PENDING"),
    ("remap_failure", "NVML_FI_DEV_REMAPPED_FAILURE"),
    ("pcie_replay", "NVML_FI_DEV_PCIE_REPLAY_COUNTER"),
    ("temp_mem_c", "NVML_FI_DEV_MEMORY_TEMP"),
    ("_nvlink_count", "NVML_FI_DEV_NVLINK_LINK_COUNT"),
    # Grace-Blackwell NVLink-C2C error counters (gpuhc/sources/nvml_fabric.py): NOT_SUPPORTED
    # without C2C, so they cost a healthy Hopper node nothing but their slots in this batch.
    ("_c2c_crc", "NVML_FI_DEV_C2C_LINK_ERROR_INTR"),
    ("_c2c_replay", "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY"),
    ("_c2c_replay_b2b", "NVML_FI_DEV_C2C_LINK_ERROR_REPLAY_B2B"),
)
BOOL_FIELDS = {"ecc_mode", "retired_pages_pending", "remap_pending", "remap_failure"}

# Per-link fields, read as (fieldId, scopeId=link). The legacy *_TOTAL fields are NOT_SUPPORTED on
# Hopper; these per-link ones are what nvidia-smi shows there. The NVLink5 counters further down
# are NOT_SUPPORTED before Blackwell and absent from older bindings (then simply not asked for).
# A counter that NVML does not support is left out of NvLinkState.errors rather than set to 0.
# On H200 (driver 580) replay/recovery/crc answer; nvmlDeviceGetNvLinkErrorCounter also knows
# CRC-data and ECC-data counts, but at ~0.75 ms per link per counter, too slow for every run.
LINK_FIELDS: tuple[tuple[str, str], ...] = (
    ("_state", "NVML_FI_DEV_NVLINK_GET_STATE"),
    ("replay", "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY"),
    ("crc", "NVML_FI_DEV_NVLINK_ERROR_DL_CRC"),
    ("malformed_packet", "NVML_FI_DEV_NVLINK_COUNT_MALFORMED_PACKET_ERRORS"),
    ("buffer_overrun", "NVML_FI_DEV_NVLINK_COUNT_BUFFER_OVERRUN_ERRORS"),
    ("rcv_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_ERRORS"),
    ("rcv_remote_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_REMOTE_ERRORS"),
    ("rcv_general_errors", "NVML_FI_DEV_NVLINK_COUNT_RCV_GENERAL_ERRORS"),
    ("local_link_integrity", "NVML_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS"),
    ("xmit_discards", "NVML_FI_DEV_NVLINK_COUNT_XMIT_DISCARDS"),
    ("link_recovery_failed", "NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS"),
    ("effective_errors", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS"),
    ("symbol_errors", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"),
)
# The three DL error counters among them: on Hopper the only NVLink error counters that answer,
# and ~0.8 ms per link EACH inside the driver however they are asked for (~43 ms per 18-link GPU;
# the state costs ~0.3 ms for all links, each COUNT_* field ~0.01 ms: docs/verification.md run
# 14). So a rotating stage asks for them on a slice of the links per run (``in_dl_slice``, the
# nvlink check's ``dl_rotation``); every other link field is read on every link every run.
DL_COUNTERS = ("replay", "recovery", "crc")
# Pre-Hopper per-link CRC counters have one field id per link (L0..L11), no scope.
LEGACY_LINK_FIELDS: tuple[tuple[str, str], ...] = (
    ("crc_flit", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L{n}"),
    ("crc_data", "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L{n}"),
)
LEGACY_MAX_LINKS = 12
# NVML_FI_DEV_NVLINK_GET_STATE values that mean the link carries traffic (SLEEP is a low-power
# state of an up link, not a down link).
LINK_UP_STATES = (1, 2)  # ACTIVE, SLEEP

FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


# GpuReading attribute, pynvml getter, constant passed after the handle, conversion of the answer
SIMPLE_GETTERS: tuple[tuple[str, str, str | None, Callable[[Any], Any] | None], ...] = (
    ("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", None, int),
    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", None, int),
    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", None, int),
    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", None, int),
    ("sm_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", int),
    ("mem_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM", int),
    ("utilization_gpu", "nvmlDeviceGetUtilizationRates", None, lambda u: int(u.gpu)),
    ("temp_gpu_c", "nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", int),
    ("power_w", "nvmlDeviceGetPowerUsage", None, lambda mw: round(mw / 1000.0, 3)),  # NVML says mW
    ("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", None, lambda mw: round(mw / 1000.0, 3)),
    ("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit", None, lambda mw: round(mw / 1000.0, 3)),
)


def in_dl_slice(link: int, rotation: int, phase: int) -> bool:
    """Whether a read of slice ``phase`` of ``rotation`` asks for this link's DL counters: links
    ``phase``, ``phase + rotation``, ..., so ``rotation`` reads in a row cover every link once."""
    return rotation <= 1 or link % rotation == phase


def keep_dl_slice(reading: Any, rotation: int, phases: dict[int, int]) -> Any:
    """A recorded reading (a replay) as a read of that slice would have found it: the DL counters
    of the other links dropped and the slice recorded, so a replay judges the rotation as a node
    does. Changes the reading in place: pass a copy."""
    if rotation <= 1 or not reading.available:
        return reading
    reading.dl_rotation, reading.dl_phases = rotation, {}
    for gpu in reading.gpus:
        if gpu.lost or not gpu.nvlinks:
            continue
        phase = reading.dl_phases[gpu.index] = phases.get(gpu.index, 0)
        for link in gpu.nvlinks:
            if not in_dl_slice(link.link, rotation, phase):
                link.errors = {k: v for k, v in link.errors.items() if k not in DL_COUNTERS}
    return reading
