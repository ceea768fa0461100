"""Check one section of a scenario document (gpuhc/sources/snapshot_format.py) before anything is
built from it: unknown keys, wrong types, NaN and negative numbers, duplicate entries, each refused
with the path of the value in the document.

The field tables come from the records' own type hints (gpuhc.model), so a field added to a
record is accepted in a scenario without a second list to keep in step.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any, Callable

# A count past this is a usage error naming the key, not a MemoryError building a hundred
# million NVLinks.
from gpuhc.text.limits import MAX_NVLINKS
from gpuhc.model.host import AerCounters, IbPort, ImexStatus
from gpuhc.model.kernel import KernelEvent, KernelLog
from gpuhc.model.nvml import GpuReading, MigInstance
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy

# Raises with the location of ``path`` inside the document; supplied by the loader.
ErrorFn = Callable[[tuple, str], Exception]


def field_types(cls: type) -> dict[str, tuple[tuple[type, ...], bool]]:
    """dataclass field -> (accepted python types, may be null), from its type hints."""
    out: dict[str, tuple[tuple[type, ...], bool]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        args = typing.get_args(hint) if is_union else (hint,)
        nullable = type(None) in args
        base = [a for a in args if a is not type(None)]
        origin = typing.get_origin(base[0]) or base[0]
        accepted: tuple[type, ...] = (float, int) if origin is float else (origin,)
        out[name] = (accepted, nullable)
    return out


_TABLES = {"GPU_FIELDS": GpuReading, "IB_FIELDS": IbPort, "AER_FIELDS": AerCounters,
           "OCC_FIELDS": Occupancy, "OCC_GPU_FIELDS": GpuOccupancy, "PROC_FIELDS": GpuProcess}
_TABLES["IMEX_FIELDS"] = ImexStatus
_TABLES["MIG_FIELDS"] = MigInstance
_TABLE_CACHE: dict[str, dict] = {}


def field_table(name: str) -> dict[str, tuple[tuple[type, ...], bool]]:
    """The field table ``name`` (``GPU_FIELDS``, ``IB_FIELDS``, ...), built on first use: resolving
    the type hints costs ~10 ms, which a plain replay run of the health check (no validation
    errors to explain) should not pay at import."""
    if name not in _TABLE_CACHE:
        _TABLE_CACHE[name] = field_types(_TABLES[name])
    return _TABLE_CACHE[name]


def __getattr__(name: str):
    # The same tables as module attributes (``snapshot_validate.IB_FIELDS``), still built lazily.
    if name in _TABLES:
        return field_table(name)
    raise AttributeError(name)


EVENT_FIELDS = field_types(KernelEvent)
KERNEL_FIELDS = {k: v for k, v in field_types(KernelLog).items() if k != "events"}


def check_fields(mapping: Any, table: dict, path: tuple, err: ErrorFn, what: str,
                 extra: dict[str, Callable[[Any, tuple], None]] | None = None) -> None:
    """Reject unknown keys and wrongly typed values in one (partial) mapping."""
    if not isinstance(mapping, dict):
        raise err(path, f"{what} must be a mapping, got {type_name(mapping)}")
    for key, value in mapping.items():
        p = path + (key,)
        if extra and key in extra:
            extra[key](value, p)
            continue
        if key not in table:
            raise err(p, f"unknown {what} field {key!r} (known: {', '.join(sorted(set(table) | set(extra or {})))})")
        types, nullable = table[key]
        if value is None:
            if not nullable:
                raise err(p, "must not be empty")
            continue
        if bool not in types and isinstance(value, bool):
            raise err(p, f"must be {expected(types)}, got a boolean")
        if not isinstance(value, types):
            raise err(p, f"must be {expected(types)}, got {type_name(value)} {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_number(value, p, err)
        if types == (list,) and key == "clock_event_samples":
            for i, v in enumerate(value):
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise err(p + (i,), f"clock event reasons must be non-negative integers, got {v!r}")
        if types == (dict,) and key == "ipoib":  # an IB port's IPoIB interfaces: name -> operstate
            for k, v in value.items():
                if not isinstance(k, str) or not isinstance(v, str) or not v:
                    raise err(p + (k,), f"an IPoIB interface's operstate must be a word (up, down, ...), got {v!r}")
        elif types == (dict,):
            for k, v in value.items():
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise err(p + (k,), f"counter values must be non-negative integers, got {v!r}")


def check_number(value: float, path: tuple, err: ErrorFn) -> None:
    """Every number a node reports (counts, temperatures, watts, times) is finite and >= 0; a NaN
    compares false with every limit and would pass any check, a negative count fail one."""
    if value != value or value in (float("inf"), float("-inf")):
        raise err(path, f"must be a finite number, got {value!r}")
    if value < 0:
        raise err(path, f"must not be negative, got {value!r}")


def check_pci_list(value: Any, path: tuple, err: ErrorFn) -> None:
    """``pci_gpus``: a list of PCI addresses (``0000:18:00.0``, ``18:00.0``), or null (unknown)."""
    if value is None:
        return
    if not isinstance(value, list):
        raise err(path, f"pci_gpus must be a list of PCI addresses, got {type_name(value)}")
    from gpuhc.model.pci import norm_pci

    for i, v in enumerate(value):
        if not isinstance(v, str) or not _PCI_ADDR.fullmatch(norm_pci(v)):
            raise err(path + (i,), f"must be a PCI address like \"0000:18:00.0\", got {v!r}")


_PCI_ADDR = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def check_gpu(mapping: Any, path: tuple, err: ErrorFn) -> None:
    check_fields(mapping, field_table("GPU_FIELDS"), path, err, "GPU", {"nvlinks": lambda v, p: check_nvlinks(v, p, err),
                                                                         "mig": lambda v, p: check_mig(v, p, err)})


def check_mig(value: Any, path: tuple, err: ErrorFn) -> None:
    """A GPU's MIG devices (``mig``), or an occupancy GPU's instances: ``[{gi, ci, uuid, ...}]``."""
    if not isinstance(value, list):
        raise err(path, f"must be a list of {{gi, ci, uuid, name, memory_used_mib, memory_total_mib}}, got {type_name(value)}")
    seen = set()
    for i, inst in enumerate(value):
        check_fields(inst, field_table("MIG_FIELDS"), path + (i,), err, "MIG device")
        if inst.get("gi") is None or inst.get("ci") is None:
            raise err(path + (i,), "a MIG device needs its `gi` and `ci`")
        if (inst["gi"], inst["ci"]) in seen:
            raise err(path + (i,), f"MIG device gi{inst['gi']}/ci{inst['ci']} is listed twice")
        seen.add((inst["gi"], inst["ci"]))


def check_nvlinks(value: Any, path: tuple, err: ErrorFn) -> None:
    link_table = {"link": ((int,), False), "active": ((bool,), True), "errors": ((dict,), False)}
    if isinstance(value, dict):  # shorthand: {count: N, active: .., errors: {..}}
        short = dict(link_table, count=((int,), False))
        del short["link"]
        check_fields(value, short, path, err, "nvlinks shorthand")
        if "count" not in value:
            raise err(path, "the nvlinks shorthand needs `count`")
        if value["count"] > MAX_NVLINKS:
            raise err(path + ("count",), f"at most {MAX_NVLINKS} NVLinks per GPU, got {value['count']}")
        return
    if not isinstance(value, list):
        raise err(path, f"nvlinks must be a list of {{link, active, errors}} or {{count: N, ...}}, got {type_name(value)}")
    if len(value) > MAX_NVLINKS:
        raise err(path, f"at most {MAX_NVLINKS} NVLinks per GPU, got {len(value)}")
    for i, entry in enumerate(value):
        check_fields(entry, link_table, path + (i,), err, "NVLink")
        if "link" not in entry:
            raise err(path + (i,), "each NVLink needs its `link` number")
        if entry["link"] >= MAX_NVLINKS:
            raise err(path + (i, "link"), f"NVLink numbers go up to {MAX_NVLINKS - 1}, got {entry['link']}")


_PROC_KINDS = ("compute", "graphics", "compute+graphics")


def check_occupancy(value: Any, path: tuple, err: ErrorFn) -> None:
    """The ``occupancy`` section: GPUs by index, each with its processes."""
    def gpus(v: Any, p: tuple) -> None:
        if not isinstance(v, list):
            raise err(p, f"occupancy gpus must be a list of {{index, processes, ...}}, got {type_name(v)}")
        seen = set()
        for i, g in enumerate(v):
            check_fields(g, field_table("OCC_GPU_FIELDS"), p + (i,), err, "occupancy GPU",
                         {"processes": lambda procs, q: check_processes(procs, q, err),
                          "instances": lambda v, q: check_mig(v, q, err)})
            if g.get("index") is None:
                raise err(p + (i,), "each occupancy GPU needs its `index`")
            if g["index"] in seen:
                raise err(p + (i, "index"), f"GPU {g['index']} is listed twice")
            seen.add(g["index"])

    check_fields(value, field_table("OCC_FIELDS"), path, err, "occupancy", {"gpus": gpus})


def check_processes(value: Any, path: tuple, err: ErrorFn) -> None:
    if not isinstance(value, list):
        raise err(path, f"processes must be a list of {{pid, name, used_mib, kinds}}, got {type_name(value)}")
    for i, proc in enumerate(value):
        check_fields(proc, field_table("PROC_FIELDS"), path + (i,), err, "process")
        if proc.get("pid") is None:
            raise err(path + (i,), "each process needs its `pid`")
        if proc.get("kinds", "compute") not in _PROC_KINDS:
            raise err(path + (i, "kinds"), f"must be one of {', '.join(_PROC_KINDS)}, got {proc['kinds']!r}")


def check_imex(value: Any, path: tuple, err: ErrorFn) -> None:
    """The ``imex`` section: ImexStatus's fields; ``nodes`` maps an address to its state."""
    def nodes(v: Any, p: tuple) -> None:
        if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(s, str) for k, s in v.items()):
            raise err(p, f"imex nodes must map a node address to its state (strings), got {type_name(v)}")

    check_fields(value, field_table("IMEX_FIELDS"), path, err, "imex", {"nodes": nodes})
    if "installed" not in value:
        raise err(path, "the imex section needs `installed` (true or false)")


def expected(types: tuple[type, ...]) -> str:
    if float in types:
        return "a number"
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             list: "a list", dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def type_name(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(v), type(v).__name__)
