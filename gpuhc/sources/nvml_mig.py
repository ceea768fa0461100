"""A GPU's device minor and its MIG devices, through NVML (part of the NVML read's "who it is").

- The minor (``nvmlDeviceGetMinorNumber``) is the N of ``/dev/nvidiaN``, which is how gres.conf
  and slurmd name a GPU; NVML's index is not (docs/facts.md, "Slurm's GPU numbers, MIG and
  shared GPUs").
- MIG mode and devices: ``nvmlDeviceGetMigMode`` (current), then every slot up to
  ``nvmlDeviceGetMaxMigDeviceCount``: ``nvmlDeviceGetMigDeviceHandleByIndex`` answers NOT_FOUND
  for an empty slot, which is skipped, not an error. Each MIG device's GPU instance and compute
  instance ids, UUID, name and memory (its GPU instance's) come from its own handle.
- A GPU without MIG answers NOT_SUPPORTED (or the binding lacks the call): ``mig_mode`` None.
"""

from __future__ import annotations

from typing import Any, Callable

from gpuhc.model.nvml import MigInstance
from gpuhc.sources.nvml_util import is_error, text

_MIB = 1024 * 1024


def minor(nv: Any, h: Any) -> int | None:
    fn = getattr(nv, "nvmlDeviceGetMinorNumber", None)
    if fn is None:
        return None
    try:
        return int(fn(h))
    except nv.NVMLError:
        return None


def mig_mode(nv: Any, h: Any) -> bool | None:
    """MIG mode now (not pending); None where the GPU has no MIG."""
    fn = getattr(nv, "nvmlDeviceGetMigMode", None)
    if fn is None:
        return None
    try:
        return int(fn(h)[0]) == int(getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1))
    except nv.NVMLError:
        return None  # NOT_SUPPORTED (no MIG on this GPU), FUNCTION_NOT_FOUND (old driver)


def mig_devices(nv: Any, h: Any, note: Callable[[str], None] = lambda s: None) -> list[tuple[Any, MigInstance]]:
    """(MIG device handle, what it is) for every MIG device of a GPU in MIG mode."""
    try:
        slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(h))
    except nv.NVMLError as e:
        note(f"MIG device count: {e}")
        return []
    out = []
    for j in range(slots):
        try:
            mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except nv.NVMLError as e:
            if not is_error(nv, e, "NVML_ERROR_NOT_FOUND"):
                note(f"MIG device {j}: {e}")
            continue
        try:
            inst = MigInstance(gi=int(nv.nvmlDeviceGetGpuInstanceId(mh)), ci=int(nv.nvmlDeviceGetComputeInstanceId(mh)),
                               uuid=text(nv.nvmlDeviceGetUUID(mh)) or "")
        except nv.NVMLError as e:
            note(f"MIG device {j}: {e}")
            continue
        try:
            inst.name = text(nv.nvmlDeviceGetName(mh))
            mem = nv.nvmlDeviceGetMemoryInfo(mh)
            inst.memory_used_mib = round(int(mem.used) / _MIB, 1)
            inst.memory_total_mib = round(int(mem.total) / _MIB, 1)
        except nv.NVMLError as e:
            note(f"MIG device {j} ({inst.label}): {e}")
        out.append((mh, inst))
    return out
