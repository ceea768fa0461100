"""A scenario document's top level (gpuhc/sources/scenario.py): which keys a file and a step may
hold, and each value's check, before anything is built from it. The sections with records of
their own (GPUs, IB ports, occupancy, ...) are checked by gpuhc/sources/snapshot_validate.py, the
host and activity sections by their own modules.

Every error names file, line and key (``err`` is the loader's): a scenario is hand-written, and a
typo in it must not come out as a traceback or, worse, as a silently healthy node.
"""

from __future__ import annotations

from typing import Any

from gpuhc.text.limits import MAX_GPUS
from gpuhc.sources.snapshot_build import kernel_from_dict
from gpuhc.sources.snapshot_validate import (
    ErrorFn, check_fields, check_gpu, check_imex, check_number, check_occupancy, check_pci_list, expected, field_table,
    type_name,
)

_GPU_SECTION = ("count", "defaults", "gpus")
_COMMON = ("hostname", "time", "boot_id", "driver_version", "cuda_driver_version", "nvml", *_GPU_SECTION,
           "kernel_log", "kernel", "ib_ports", "aer", "pci_gpus", "occupancy",
           "activity")  # job activity: gpuhc/sources/activity_io.py
_COMMON = (*_COMMON, "imex")  # the IMEX daemon (gpuhc/sources/imex.py); replaced whole by a step
_COMMON = (*_COMMON, "gres", "host")  # Slurm's view of the GPUs (gpuhc/sources/gres.py), the node around them (gpuhc/sources/host.py); each replaced whole by a step
TOP_KEYS = (*_COMMON, "format", "description", "ib_defaults", "extends", "steps")
STEP_KEYS = (*_COMMON, "description", "ib_defaults")
_SCALARS = {"hostname": (str,), "time": (int, float), "boot_id": (str,), "driver_version": (str,), "cuda_driver_version": (str,),
            "description": (str,), "format": (int,), "count": (int,), "extends": (str,)}
_NVML_TABLE = {"available": ((bool,), False), "error": ((str,), True)}


def validate_document(doc: Any, path: tuple, allowed: tuple[str, ...], err: ErrorFn) -> None:
    """Check a whole scenario (``allowed``: TOP_KEYS) or one of its steps (STEP_KEYS)."""
    if not isinstance(doc, dict):
        raise err(path, f"a scenario must be a mapping, got {type_name(doc)}")
    for key, value in doc.items():
        p = path + (key,)
        if key not in allowed:
            raise err(p, f"unknown key {key!r} (known: {', '.join(allowed)})")
        if key in _SCALARS:
            if value is None and key not in ("count", "format", "extends"):
                continue  # "unknown", as a snapshot of a node without that fact writes it
            if not isinstance(value, _SCALARS[key]) or isinstance(value, bool):
                hint = " (quote it)" if key.endswith("version") and isinstance(value, (int, float)) else ""
                raise err(p, f"must be {expected(_SCALARS[key])}{hint}, got {value!r}")
            if key == "count" and not 0 <= value <= MAX_GPUS:
                raise err(p, f"must be between 0 and {MAX_GPUS}, got {value}")
            if key == "time":
                check_number(value, p, err)
        elif key == "nvml":
            check_fields(value, _NVML_TABLE, p, err, "nvml")
        elif key == "defaults":
            check_gpu(value, p, err)
            if "index" in value:
                raise err(p + ("index",), "defaults apply to every GPU; set index per GPU")
        elif key == "gpus":
            for idx, entry in gpu_entries(value, p, err):
                if entry is not None:
                    check_gpu(entry, p + (idx,), err)
        elif key == "kernel_log":
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise err(p, "kernel_log must be a list of log lines (strings)")
        elif key == "kernel":
            kernel_from_dict(value, p, err)  # validates; the result is rebuilt later
        elif key in ("ib_ports", "aer"):
            if not isinstance(value, list):
                raise err(p, f"{key} must be a list")
            table = field_table("IB_FIELDS") if key == "ib_ports" else field_table("AER_FIELDS")
            for i, entry in enumerate(value):
                check_fields(entry, table, p + (i,), err, "IB port" if key == "ib_ports" else "AER")
        elif key == "ib_defaults":
            check_fields(value, field_table("IB_FIELDS"), p, err, "IB port")
        elif key == "pci_gpus":
            check_pci_list(value, p, err)
        elif key == "occupancy":
            check_occupancy(value, p, err)
        elif key == "imex":
            check_imex(value, p, err)
        elif key == "host":
            from gpuhc.sources.host import check_host

            check_host(value, p, err)
        elif key == "activity":
            from gpuhc.sources.activity_io import check_activity

            check_activity(value, p, err)
        elif key == "gres":
            _check_gres(value, p, err)


def _check_gres(value: Any, path: tuple, err: ErrorFn) -> None:
    """``gres: {conf: <gres.conf text>, mig_minors: <mig-minors text>}``: what Slurm's GPU numbers
    are read with on the recorded node (gpuhc/node/gpumap.py); each part optional."""
    if not isinstance(value, dict):
        raise err(path, f"gres must be a mapping {{conf, mig_minors}}, got {type_name(value)}")
    for key, text in value.items():
        if key not in ("conf", "mig_minors"):
            raise err(path + (key,), f"unknown gres key {key!r} (known: conf, mig_minors)")
        if not isinstance(text, str):
            raise err(path + (key,), f"must be the file's text, got {type_name(text)}")


def gpu_entries(value: Any, path: tuple, err: ErrorFn) -> list[tuple[int, Any]]:
    """`gpus:` as (index, mapping-or-None) pairs, from a list or a {index: mapping} mapping."""
    if isinstance(value, list):
        if len(value) > MAX_GPUS:
            raise err(path, f"at most {MAX_GPUS} GPUs, got {len(value)}")
        return list(enumerate(value))
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < MAX_GPUS:
                raise err(path + (k,), f"GPU keys must be GPU indices (0 to {MAX_GPUS - 1}), got {k!r}")
            out.append((k, v))
        return out
    raise err(path, f"gpus must be a list or a mapping of index -> fields, got {type_name(value)}")
