"""The NVLink fabric half of the NVML read: a GPU's fabric info and its NVLink-C2C error counters.

Fabric info. ``nvmlDeviceGetGpuFabricInfoV`` takes a versioned struct: v3 adds the one-byte
health summary to v2's health mask; a driver that does not know the version asked for answers
ARGUMENT_VERSION_MISMATCH, so the newest struct the binding has is tried first, then older ones,
then the unversioned ``nvmlDeviceGetGpuFabricInfo`` (state, status, clique and cluster only),
which NVML marks deprecated. NOT_SUPPORTED (a GPU without an NVLink fabric, e.g. a PCIe card or
an H100 without NVSwitch) is a reading of nothing -- every field ``None`` -- never a note. One
call per GPU, microseconds (docs/verification.md has the Hopper read).

C2C counters. Grace-Blackwell GPUs reach their CPU over NVLink-C2C; NVML reports its CRC, replay
and back-to-back replay counts as field values (``NVML_FI_DEV_C2C_LINK_ERROR_*``), which the
reader asks for in its one device batch (gpuhc/sources/nvml_fields.py: ``_c2c_*``); this module
turns the answers into the reading's ``c2c_errors``. A GPU without C2C answers NOT_SUPPORTED for
each, and gets ``None``.
"""

from __future__ import annotations

from typing import Any, Callable

from gpuhc.model.nvml import GpuReading
from gpuhc.sources.nvml_fields import FABRIC_STATES
from gpuhc.sources.nvml_util import Field, byref, error_name, is_error

# Struct versions, newest first: (entry point, pynvml struct class). The v4 struct (several
# cliques) has its own entry point in newer bindings and adds nothing gpuhc judges.
_VERSIONS = (
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v3_t"),
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfo_v2_t"),
    ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
)
# NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3): 0 is "not supported" and reads as None.
_SUMMARIES = {1: "healthy", 2: "unhealthy", 3: "limited capacity"}
# The reading's c2c_errors key of each device-batch field (nvml_fields.DEVICE_FIELDS).
C2C_FIELDS = {"_c2c_crc": "crc", "_c2c_replay": "replay", "_c2c_replay_b2b": "replay_b2b"}


def read_fabric(nv: Any, h: Any, gpu: GpuReading, note: Callable[[str], None],
                raise_if_gone: Callable[[Exception], None]) -> None:
    """Fill the GPU's fabric fields from the newest fabric-info struct the driver answers."""
    for fn_name, struct_name in _VERSIONS:
        fn, struct = getattr(nv, fn_name, None), getattr(nv, struct_name, None)
        if fn is None or struct is None:
            continue
        info = struct()
        try:
            fn(h, byref(info))
        except nv.NVMLError as e:
            raise_if_gone(e)
            if is_error(nv, e, "NVML_ERROR_FUNCTION_NOT_FOUND") or is_error(nv, e, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"):
                continue  # an older driver: try the older struct
            if not is_error(nv, e, "NVML_ERROR_NOT_SUPPORTED"):
                note(f"gpu{gpu.index}: fabric info: {e}")
            return
        _fill(nv, gpu, info)
        return


def _fill(nv: Any, gpu: GpuReading, info: Any) -> None:
    state = int(info.state)
    gpu.fabric_state = FABRIC_STATES.get(state, f"state {state}")
    gpu.fabric_status = "success" if int(info.status) == nv.NVML_SUCCESS else error_name(nv, int(info.status))
    if state == 0:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: the rest of the struct means nothing
        return
    gpu.fabric_clique_id = int(info.cliqueId)
    gpu.fabric_cluster_uuid = _uuid(getattr(info, "clusterUuid", None))
    mask = getattr(info, "healthMask", None)
    gpu.fabric_health_mask = None if mask is None else int(mask)
    summary = getattr(info, "healthSummary", None)
    gpu.fabric_health_summary = None if summary is None else _SUMMARIES.get(int(summary))


def _uuid(raw: Any) -> str | None:
    """The cluster UUID's 16 bytes in the usual 8-4-4-4-12 spelling; None when all zero (no
    cluster: a single-node NVSwitch board)."""
    if raw is None:
        return None
    data = bytes(int(b) & 0xFF for b in raw)
    if not any(data):
        return None
    h = data.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def c2c_errors(fields: dict[str, Field]) -> dict[str, int] | None:
    """The C2C counters from the device batch; None when NVML answered none of them."""
    out = {name: int(fields[key].value) for key, name in C2C_FIELDS.items()
           if fields.get(key) is not None and fields[key].ok}
    return out or None
