"""Snapshot <-> scenario document: the one file format for recordings and hand-written scenarios.

`gpuhc snapshot` writes a node's readings with :func:`dump_snapshot`; `--nvml-scenario` reads the
same document back through :mod:`gpuhc.sources.scenario`. An admin can attach the file to a
ticket and anyone re-judges the node offline with the verdict the node itself got.

Document shape (all keys optional except where a GPU needs them)::

    format: 1                        # written by `gpuhc snapshot`; optional in hand-written files
    hostname: gpu017                 # what the recording came from
    time: 1731500000.0               # when
    driver_version: "580.95.05"
    cuda_driver_version: "13.0"
    nvml: {available: true}          # or {available: false, error: "driver not loaded"}
    count: 8                         # number of GPUs (default: as many as `gpus` lists)
    defaults: {<GPU fields>}         # applied to every GPU; "{index}" in strings -> the index
    gpus: [{<GPU fields>}, ...]      # entry i is GPU i; or a mapping {index: {<GPU fields>}}
    kernel_log: ["<dmesg line>", ...]        # raw lines, parsed like a live log, or
    kernel: {events: [{kind: xid, ...}], last_time: ...}   # parsed events, as snapshots write them
    ib_defaults: {<IB port fields>}
    ib_ports: [{device: mlx5_0, port: 1, state: ACTIVE, ...}, ...]
    aer: [{pci: "0000:18:00.0", correctable: 0, nonfatal: 0, fatal: 0}, ...]
    pci_gpus: ["0000:18:00.0", ...]          # NVIDIA GPUs on the PCI bus (sysfs), seen by NVML or not
    occupancy:                               # who holds the GPUs (prolog/epilog/bootstrap)
      waited_s: 0                            # optional; also `available`, `error`
      gpus: [{index: 1, memory_used_mib: 20480, memory_total_mib: 81559,
              processes: [{pid: 4242, name: python, used_mib: 20000, kinds: compute, gone: false}]}]
    imex: {installed: true, daemon: READY, domain: UP,   # the IMEX daemon (gpuhc/sources/imex.py)
           nodes: {"10.0.0.1": READY}, error: null}
    activity: {gpus: [{index: 0, jobs: ["4242"], gpu_util: [100], ...}]}   # gpuhc.sources.activity_io
    host: {cpus_online: 128, mem_total_kib: 2113470000, edac: {mc0: {ce: 0, ue: 0}},   # gpuhc.sources.host
           pci_watch: {"0000:18:00.0": {role: gpu, upstream: ["0000:17:00.0"]}}, mounts: {...}, ...}
    steps: [{<partial document>}, ...]       # see gpuhc.sources.scenario
    extends: healthy-8xh100.yaml             # start from another scenario (gpuhc.sources.scenario)

GPU fields are exactly :class:`gpuhc.model.nvml.GpuReading`'s; occupancy fields those of
:class:`gpuhc.model.occupancy.GpuOccupancy` and :class:`gpuhc.model.occupancy.GpuProcess` (a GPU the section does not
list holds no process, its memory use unknown). ``nvlinks`` is a list of
``{link, active, errors: {counter: n}}`` or the shorthand ``{count: 18, active: true,
errors: {...}}`` for identical links.

Why the kernel log is stored as parsed events and not as lines: KernelEvent keeps no raw line, and
rebuilding one the parser reads back identically would tie the recording to the parser's line
formats. Events replay exactly, so snapshot -> replay gives the same verdict by construction.
Hand-written scenarios use ``kernel_log`` lines instead, which exercise the real parser.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any, Callable

# A count past these is a usage error naming the key, not a MemoryError building a hundred
# million NVLinks.
from gpuhc.limits import MAX_GPUS, MAX_NVLINKS  # noqa: F401 - MAX_GPUS: for the scenario loader
from gpuhc.model.host import AerCounters, IbPort, ImexStatus
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from gpuhc.model.nvml import GpuReading, MigInstance, NvLinkState, NvmlReading
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess, Occupancy
from gpuhc.model.snapshot import Snapshot

FORMAT_VERSION = 1

# Raises with the location of ``path`` inside the document; supplied by the loader.
ErrorFn = Callable[[tuple, str], Exception]


# ------------------------------------------------------------------------- field tables


def _field_types(cls: type) -> dict[str, tuple[tuple[type, ...], bool]]:
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


def __getattr__(name: str):
    # Built on first use: resolving the type hints costs ~10 ms, which a plain replay run
    # of the health check (no validation errors to explain) should not pay at import.
    if name in _TABLES:
        if name not in _TABLE_CACHE:
            _TABLE_CACHE[name] = _field_types(_TABLES[name])
        return _TABLE_CACHE[name]
    raise AttributeError(name)
EVENT_FIELDS = _field_types(KernelEvent)
KERNEL_FIELDS = {k: v for k, v in _field_types(KernelLog).items() if k != "events"}
GPU_REQUIRED = ("name", "uuid", "pci_bus_id")


# ------------------------------------------------------------------------- dump


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, EventKind):
        return obj.value
    return obj


def dump_snapshot(snapshot: Snapshot, compact: bool = True) -> dict[str, Any]:
    """A snapshot as a scenario document (plain, YAML/JSON-able).

    ``compact`` moves every GPU field whose value is the same on all GPUs into ``defaults``, so
    an 8-GPU dump shows at a glance what differs between the GPUs.
    """
    doc: dict[str, Any] = {"format": FORMAT_VERSION, "hostname": snapshot.hostname, "time": snapshot.time}
    nvml = snapshot.nvml
    if nvml is not None:
        doc["driver_version"] = nvml.driver_version
        doc["cuda_driver_version"] = nvml.cuda_driver_version
        doc["nvml"] = {"available": nvml.available, "error": nvml.error}
        gpus = [_plain(g) for g in nvml.gpus]
        if compact:
            for g in gpus:
                g["nvlinks"] = _compact_links(g["nvlinks"])
        if compact and len(gpus) > 1:
            # (a string holding "{index}" stays per GPU: in defaults it would be read as a template)
            common = {k: v for k, v in gpus[0].items()
                      if k != "index" and not (isinstance(v, str) and "{index}" in v)
                      and all(g.get(k) == v for g in gpus[1:])}
            if common:
                doc["defaults"] = common
                gpus = [{k: v for k, v in g.items() if k not in common} for g in gpus]
        doc["count"] = len(gpus)
        doc["gpus"] = gpus
    if snapshot.kernel is not None:
        doc["kernel"] = _plain(snapshot.kernel)
    if snapshot.ib_ports is not None:
        doc["ib_ports"] = _plain(snapshot.ib_ports)
    if snapshot.aer is not None:
        doc["aer"] = _plain(snapshot.aer)
    if snapshot.pci_gpus is not None:
        doc["pci_gpus"] = list(snapshot.pci_gpus)
    if snapshot.occupancy is not None:
        doc["occupancy"] = occ = _plain(snapshot.occupancy)
        for g in occ["gpus"]:  # MIG facts only where there is MIG: a plain GPU's section stays as it was
            if not g["instances"]:
                del g["instances"]
            for p in g["processes"]:
                for key in ("gi", "ci"):
                    if p[key] is None:
                        del p[key]
    if snapshot.imex is not None:
        doc["imex"] = _plain(snapshot.imex)
    # job activity (issue 24; format in gpuhc/sources/activity_io.py)
    if snapshot.activity is not None:
        doc["activity"] = _plain(snapshot.activity)
    if snapshot.gres is not None:  # gres.conf and MIG minors: Slurm's GPU numbers replay too
        doc["gres"] = dict(snapshot.gres)
    if snapshot.host is not None:  # the node around the GPUs (gpuhc/sources/host.py)
        doc["host"] = {k: v for k, v in _plain(snapshot.host).items() if v is not None}
    return doc


def _compact_links(links: list[dict[str, Any]]) -> Any:
    """Identical links numbered 0..n-1 -> the ``{count, active, errors}`` shorthand."""
    if links and all(e["link"] == i and e["active"] == links[0]["active"] and e["errors"] == links[0]["errors"]
                     for i, e in enumerate(links)):
        return {"count": len(links), "active": links[0]["active"], "errors": links[0]["errors"]}
    return links


def dump_yaml(snapshot: Snapshot, compact: bool = True) -> str:
    """The YAML text of :func:`dump_snapshot`: flow style for short lists, keys in field order."""
    import yaml

    header = "# gpuhc snapshot: replay with `gpuhc check --nvml-scenario FILE`\n"
    return header + yaml.safe_dump(dump_snapshot(snapshot, compact), sort_keys=False, default_flow_style=None, width=110)


# ------------------------------------------------------------------------- validation


def check_fields(mapping: Any, table: dict, path: tuple, err: ErrorFn, what: str,
                 extra: dict[str, Callable[[Any, tuple], None]] | None = None) -> None:
    """Reject unknown keys and wrongly typed values in one (partial) mapping."""
    if not isinstance(mapping, dict):
        raise err(path, f"{what} must be a mapping, got {_tname(mapping)}")
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
            raise err(p, f"must be {_want(types)}, got a boolean")
        if not isinstance(value, types):
            raise err(p, f"must be {_want(types)}, got {_tname(value)} {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_number(value, p, err)
        if types == (list,) and key == "clock_event_samples":
            for i, v in enumerate(value):
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise err(p + (i,), f"clock event reasons must be non-negative integers, got {v!r}")
        if types == (dict,):
            for k, v in value.items():
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise err(p + (k,), f"counter values must be non-negative integers, got {v!r}")


def _check_number(value: float, path: tuple, err: ErrorFn) -> None:
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
        raise err(path, f"pci_gpus must be a list of PCI addresses, got {_tname(value)}")
    from gpuhc.model.pci import norm_pci

    for i, v in enumerate(value):
        if not isinstance(v, str) or not _PCI_ADDR.fullmatch(norm_pci(v)):
            raise err(path + (i,), f"must be a PCI address like \"0000:18:00.0\", got {v!r}")


_PCI_ADDR = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def check_gpu(mapping: Any, path: tuple, err: ErrorFn) -> None:
    check_fields(mapping, __getattr__("GPU_FIELDS"), path, err, "GPU", {"nvlinks": lambda v, p: check_nvlinks(v, p, err),
                                                                         "mig": lambda v, p: check_mig(v, p, err)})


def check_mig(value: Any, path: tuple, err: ErrorFn) -> None:
    """A GPU's MIG devices (``mig``), or an occupancy GPU's instances: ``[{gi, ci, uuid, ...}]``."""
    if not isinstance(value, list):
        raise err(path, f"must be a list of {{gi, ci, uuid, name, memory_used_mib, memory_total_mib}}, got {_tname(value)}")
    seen = set()
    for i, inst in enumerate(value):
        check_fields(inst, __getattr__("MIG_FIELDS"), path + (i,), err, "MIG device")
        if inst.get("gi") is None or inst.get("ci") is None:
            raise err(path + (i,), "a MIG device needs its `gi` and `ci`")
        if (inst["gi"], inst["ci"]) in seen:
            raise err(path + (i,), f"MIG device gi{inst['gi']}/ci{inst['ci']} is listed twice")
        seen.add((inst["gi"], inst["ci"]))


def mig_from_list(value: list[dict[str, Any]] | None) -> list[MigInstance]:
    def number(v: Any) -> float | None:
        return None if v is None else float(v)

    return [MigInstance(**dict(d, memory_used_mib=number(d.get("memory_used_mib")),
                               memory_total_mib=number(d.get("memory_total_mib")))) for d in value or []]


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
        raise err(path, f"nvlinks must be a list of {{link, active, errors}} or {{count: N, ...}}, got {_tname(value)}")
    if len(value) > MAX_NVLINKS:
        raise err(path, f"at most {MAX_NVLINKS} NVLinks per GPU, got {len(value)}")
    for i, entry in enumerate(value):
        check_fields(entry, link_table, path + (i,), err, "NVLink")
        if "link" not in entry:
            raise err(path + (i,), "each NVLink needs its `link` number")
        if entry["link"] >= MAX_NVLINKS:
            raise err(path + (i, "link"), f"NVLink numbers go up to {MAX_NVLINKS - 1}, got {entry['link']}")


# ------------------------------------------------------------------------- build


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
    for k, (accepted, _) in __getattr__("GPU_FIELDS").items():
        if float in accepted and isinstance(kw.get(k), int):
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


_PROC_KINDS = ("compute", "graphics", "compute+graphics")


def check_occupancy(value: Any, path: tuple, err: ErrorFn) -> None:
    """The ``occupancy`` section: GPUs by index, each with its processes."""
    def gpus(v: Any, p: tuple) -> None:
        if not isinstance(v, list):
            raise err(p, f"occupancy gpus must be a list of {{index, processes, ...}}, got {_tname(v)}")
        seen = set()
        for i, g in enumerate(v):
            check_fields(g, __getattr__("OCC_GPU_FIELDS"), p + (i,), err, "occupancy GPU",
                         {"processes": lambda procs, q: check_processes(procs, q, err),
                          "instances": lambda v, q: check_mig(v, q, err)})
            if g.get("index") is None:
                raise err(p + (i,), "each occupancy GPU needs its `index`")
            if g["index"] in seen:
                raise err(p + (i, "index"), f"GPU {g['index']} is listed twice")
            seen.add(g["index"])

    check_fields(value, __getattr__("OCC_FIELDS"), path, err, "occupancy", {"gpus": gpus})


def check_processes(value: Any, path: tuple, err: ErrorFn) -> None:
    if not isinstance(value, list):
        raise err(path, f"processes must be a list of {{pid, name, used_mib, kinds}}, got {_tname(value)}")
    for i, proc in enumerate(value):
        check_fields(proc, __getattr__("PROC_FIELDS"), path + (i,), err, "process")
        if proc.get("pid") is None:
            raise err(path + (i,), "each process needs its `pid`")
        if proc.get("kinds", "compute") not in _PROC_KINDS:
            raise err(path + (i, "kinds"), f"must be one of {', '.join(_PROC_KINDS)}, got {proc['kinds']!r}")


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
        for k in ("memory_used_mib", "memory_total_mib"):
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


def check_imex(value: Any, path: tuple, err: ErrorFn) -> None:
    """The ``imex`` section: ImexStatus's fields; ``nodes`` maps an address to its state."""
    def nodes(v: Any, p: tuple) -> None:
        if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(s, str) for k, s in v.items()):
            raise err(p, f"imex nodes must map a node address to its state (strings), got {_tname(v)}")

    check_fields(value, __getattr__("IMEX_FIELDS"), path, err, "imex", {"nodes": nodes})
    if "installed" not in value:
        raise err(path, "the imex section needs `installed` (true or false)")


def imex_from_dict(d: dict[str, Any]) -> ImexStatus:
    return ImexStatus(**dict(d, nodes=dict(d.get("nodes") or {})))


def _want(types: tuple[type, ...]) -> str:
    if float in types:
        return "a number"
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             list: "a list", dict: "a mapping"}
    return " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))


def _tname(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(v), type(v).__name__)
