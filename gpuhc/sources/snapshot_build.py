"""A scenario document's sections, once checked (gpuhc/sources/snapshot_validate.py), into the
records of gpuhc.model: GPUs and their NVLinks and MIG devices, IB ports, AER counters, the kernel
log's events, occupancy and the IMEX daemon. Numbers a hand-written file gives as integers become
the floats the records hold."""

from __future__ import annotations

from typing import Any

from gpuhc.model.host import AerCounters, IbPort, ImexStatus
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from gpuhc.model.nvml import GpuReading, MigInstance, NvLinkState, NvmlReading
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy
from gpuhc.sources.snapshot_validate import EVENT_FIELDS, KERNEL_FIELDS, ErrorFn, check_fields, field_table

GPU_REQUIRED = ("name", "uuid", "pci_bus_id")
_FLOATS: list[tuple[str, ...]] = []  # the GPU fields that hold floats, once asked for


def _gpu_floats() -> tuple[str, ...]:
    """The GPU fields whose records hold floats, from the field table once, not every field of
    every GPU at every load of a replay (a campaign model's node is loaded at every run)."""
    if not _FLOATS:
        _FLOATS.append(tuple(k for k, (accepted, _) in field_table("GPU_FIELDS").items() if float in accepted))
    return _FLOATS[0]


def mig_from_list(value: list[dict[str, Any]] | None) -> list[MigInstance]:
    def number(v: Any) -> float | None:
        return None if v is None else float(v)

    return [MigInstance(**dict(d, memory_used_mib=number(d.get("memory_used_mib")),
                               memory_total_mib=number(d.get("memory_total_mib")))) for d in value or []]


def expand_nvlinks(value: Any) -> list[dict[str, Any]]:
    """Shorthand or list -> list of link mappings (validated input)."""
    if isinstance(value, dict):
        return [{"link": i, "active": value.get("active", True), "errors": dict(value.get("errors", {}))}
                for i in range(value["count"])]
    return [dict(e) for e in value]


def merge_nvlinks(base: list[dict[str, Any]], override: Any) -> list[dict[str, Any]]:
    """A shorthand replaces all links; a list merges into ``base`` by link number."""
    if isinstance(override, dict):
        return expand_nvlinks(override)
    out = {e["link"]: dict(e, errors=dict(e.get("errors", {}))) for e in base}
    for e in override:
        cur = out.setdefault(e["link"], {"link": e["link"], "active": True, "errors": {}})
        if "active" in e:
            cur["active"] = e["active"]
        cur["errors"].update(e.get("errors", {}))
    return [out[k] for k in sorted(out)]


def gpu_from_dict(d: dict[str, Any], path: tuple, err: ErrorFn) -> GpuReading:
    """A merged, validated GPU mapping -> GpuReading."""
    for key in GPU_REQUIRED:
        if d.get(key) is None:
            raise err(path, f"GPU {d.get('index', '?')} has no {key} (set it per GPU or in defaults)")
    kw = {k: v for k, v in d.items() if k not in ("nvlinks", "mig")}
    kw["mig"] = mig_from_list(d.get("mig"))
    # A recording from before gpuhc read minor numbers: /dev/nvidia<index>, as on most nodes.
    kw.setdefault("minor", kw.get("index"))
    for k in _gpu_floats():
        if isinstance(kw.get(k), int):
            kw[k] = float(kw[k])
    links = [NvLinkState(link=e["link"], active=e.get("active"), errors=dict(e.get("errors", {})))
             for e in expand_nvlinks(d.get("nvlinks", []))]
    return GpuReading(nvlinks=links, **kw)


def nvml_from_doc(doc: dict[str, Any], gpus: list[GpuReading]) -> NvmlReading:
    nvml = doc.get("nvml") or {}
    available = nvml.get("available", True)
    return NvmlReading(
        available=available,
        error=nvml.get("error"),
        driver_version=doc.get("driver_version"),
        cuda_driver_version=doc.get("cuda_driver_version"),
        gpus=gpus if available else [],
    )


def ib_port_from_dict(d: dict[str, Any], path: tuple, err: ErrorFn) -> IbPort:
    for key in ("device", "port"):
        if d.get(key) is None:
            raise err(path, f"an IB port needs `{key}`")
    kw = dict(d)
    kw.setdefault("state", None)
    kw.setdefault("phys_state", None)
    kw.setdefault("rate_gbps", None)
    if isinstance(kw["rate_gbps"], int):
        kw["rate_gbps"] = float(kw["rate_gbps"])
    kw["counters"] = dict(kw.get("counters") or {})
    return IbPort(**kw)


def aer_from_dict(d: dict[str, Any], path: tuple, err: ErrorFn) -> AerCounters:
    if d.get("pci") is None:
        raise err(path, "an AER entry needs `pci`")
    from gpuhc.model.pci import norm_pci

    return AerCounters(**dict(d, pci=norm_pci(d["pci"])))


def kernel_from_dict(d: dict[str, Any], path: tuple, err: ErrorFn) -> KernelLog:
    """The `kernel:` section a snapshot writes: parsed events plus the log's own facts."""
    check_fields(d, KERNEL_FIELDS, path, err, "kernel", {"events": lambda v, p: None})
    events = []
    for i, e in enumerate(d.get("events") or []):
        p = path + ("events", i)
        check_fields(e, EVENT_FIELDS, p, err, "kernel event", {"kind": lambda v, q: None})
        try:
            kind = EventKind(e.get("kind"))
        except ValueError:
            raise err(p + ("kind",), f"kind must be one of {', '.join(k.value for k in EventKind)}") from None
        if "message" not in e:
            raise err(p, "a kernel event needs `message`")
        time = float(e["time"]) if e.get("time") is not None else None
        events.append(KernelEvent(**dict(e, kind=kind, time=time)))
    kw = {k: v for k, v in d.items() if k != "events"}
    if isinstance(kw.get("last_time"), int):
        kw["last_time"] = float(kw["last_time"])
    return KernelLog(events=events, **kw)


def occupancy_from_dict(d: dict[str, Any], uuids: dict[int, str],
                        mig: dict[int, list[MigInstance]] | None = None) -> Occupancy:
    """A validated ``occupancy`` mapping -> Occupancy, with every GPU of the reading present. A
    GPU in MIG mode (``mig``: its MIG devices from the GPU section) gets them as its instances
    unless the section lists their memory use itself."""
    mig = mig or {}
    def number(v: Any) -> float | None:
        return None if v is None else float(v)

    listed = {}
    for g in d.get("gpus") or []:
        procs = [GpuProcess(**dict(p, used_mib=number(p.get("used_mib")))) for p in g.get("processes") or []]
        kw = {k: v for k, v in g.items() if k not in ("processes", "instances")}
        for k in ("memory_used_mib", "memory_total_mib", "memory_reserved_mib"):
            kw[k] = number(kw.get(k))
        kw.setdefault("uuid", uuids.get(g["index"], ""))
        inst = mig_from_list(g["instances"]) if "instances" in g else list(mig.get(g["index"], []))
        if inst:
            kw.setdefault("mig", True)
        listed[g["index"]] = GpuOccupancy(processes=procs, instances=inst, **kw)
    for index, uuid in uuids.items():
        inst = list(mig.get(index, []))
        listed.setdefault(index, GpuOccupancy(index=index, uuid=uuid, instances=inst, mig=True if inst else None))
    return Occupancy(available=d.get("available", True), error=d.get("error"),
                     gpus=[listed[i] for i in sorted(listed)], waited_s=float(d.get("waited_s") or 0.0))


def imex_from_dict(d: dict[str, Any]) -> ImexStatus:
    return ImexStatus(**dict(d, nodes=dict(d.get("nodes") or {})))
