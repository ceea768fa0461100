"""Small pieces shared by the NVML readers (the counters in ``nvml.py``, the processes in
``gpu_procs.py``): loading and starting NVML, turning its answers into plain values, and
timing the clock-event sample rounds.

``pynvml`` is imported inside :func:`start`, so nothing that merely imports a source pays for it.
A missing package, library or driver comes back as a reason (a string), never as an exception:
the readers turn it into a reading with ``available=False``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")

_INIT_REASONS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML library (libnvidia-ml.so.1) not found: is the NVIDIA driver installed?",
    "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA driver not loaded (nvmlInit: Driver Not Loaded)",
    "NVML_ERROR_NO_PERMISSION": "no permission to open the NVIDIA devices (nvmlInit: Insufficient Permissions)",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "NVML library and kernel driver versions differ (driver updated without reboot?)",
}


class GpuGone(Exception):
    """The GPU stopped answering (NVML_ERROR_GPU_IS_LOST): stop asking it anything."""


@dataclass
class Field:
    """One answer of a field-values batch."""

    ok: bool
    value: Any = None
    error: str | None = None  # None when ok or NOT_SUPPORTED


def start(module: Any = None) -> tuple[Any, str | None]:
    """(pynvml module, None) after a successful ``nvmlInit``, or (None, why not).

    NVML counts its initialisations, so two readers in two threads may each start and stop it.
    """
    nv = module
    if nv is None:
        try:
            import pynvml as nv  # noqa: PLC0415 - lazy on purpose, see the module docstring
        except ImportError as e:
            return None, f"pynvml (nvidia-ml-py) is not installed: {e}"
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return None, init_reason(nv, e)
    except OSError as e:  # a broken libnvidia-ml.so can raise from ctypes itself
        return None, f"cannot load the NVML library: {e}"
    return nv, None


def session(module: Any, read: Callable[[Any], T], unavailable: Callable[[str], T]) -> T:
    """``read(nv)`` between ``nvmlInit`` and ``nvmlShutdown`` (a failing shutdown is ignored: the
    reading is taken), or ``unavailable(why)`` when NVML cannot start. The readers that hold
    nothing between runs (GPU processes, job activity) share this one bracket."""
    nv, why = start(module)
    if nv is None:
        return unavailable(why or "NVML unavailable")
    try:
        return read(nv)
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def is_error(nv: Any, e: Exception, const: str) -> bool:
    return getattr(e, "value", None) == getattr(nv, const, object())


def init_reason(nv: Any, e: Exception) -> str:
    for const, reason in _INIT_REASONS.items():
        if is_error(nv, e, const):
            return reason
    return f"nvmlInit failed: {e}"


def error_name(nv: Any, code: int) -> str:
    """NVML return code -> lower-case words, e.g. 9 -> "driver not loaded"."""
    for name in dir(nv):
        if name.startswith("NVML_ERROR_") and getattr(nv, name) == code:
            return name[len("NVML_ERROR_"):].lower().replace("_", " ")
    return f"nvml error {code}"


# nvmlValue_t union member per NVML_VALUE_TYPE_* (0..6; part of NVML's ABI, never renumbered)
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_value(v: Any) -> float | int:
    return union_value(v.value, int(v.valueType))


def union_value(u: Any, vt: int) -> float | int:
    """The member of an nvmlValue_t union that NVML's value type names (field values, samples)."""
    return getattr(u, _VALUE_MEMBERS[vt] if 0 <= vt < len(_VALUE_MEMBERS) else "ullVal")


def pci_getter(nv: Any) -> Callable[[Any], Any]:
    return getattr(nv, "nvmlDeviceGetPciInfo_v3", None) or nv.nvmlDeviceGetPciInfo


def byref(obj: Any) -> Any:
    import ctypes

    try:
        return ctypes.byref(obj)
    except TypeError:  # a fake struct in tests: pass it as is
        return obj


def text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace").strip("\x00 ")
    return str(value).strip()


class Rounds:
    """When the clock-event sample rounds after the first are due: ``interval`` apart."""

    def __init__(self, samples: int, interval: float):
        self.left, self.interval, self.last = samples - 1, interval, time.monotonic()

    def due(self) -> bool:
        if self.left > 0 and time.monotonic() - self.last >= self.interval:
            self.left -= 1
            self.last = time.monotonic()
            return True
        return False

    def wait(self) -> bool:
        """Sleep until the next round is due; False when all were taken."""
        while self.left > 0:
            pause = self.interval - (time.monotonic() - self.last)
            if pause > 0:
                time.sleep(pause)
            if self.due():
                return True
        return False
