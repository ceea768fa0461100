"""Snapshot -> scenario document: the one file format for recordings and hand-written scenarios,
and its writer.

`gpuhc snapshot` writes a node's readings with :func:`dump_snapshot`; `--nvml-scenario` reads the
same document back through :mod:`gpuhc.sources.scenario`, which checks each section with
:mod:`gpuhc.sources.snapshot_validate` and builds the records with :mod:`gpuhc.sources.snapshot_build`. An admin can attach the file to a
ticket and anyone re-judges the node offline with the verdict the node itself got.

Document shape (all keys optional except where a GPU needs them)::

    format: 1                        # written by `gpuhc snapshot`; optional in hand-written files
    hostname: gpu017                 # what the recording came from
    time: 1731500000.0               # when
    boot_id: "4f1e...-..."           # its boot (/proc/sys/kernel/random/boot_id): a new one is a reboot
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
              processes: [{pid: 4242, name: python, used_mib: 20000, kinds: compute, gone: false,
                           uid: 1000}]}]               # uid: its real uid (/proc/<pid>/status), optional
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
from typing import Any

from gpuhc.model.kernel import EventKind
from gpuhc.model.snapshot import Snapshot

FORMAT_VERSION = 1


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
        # MIG facts and lists NVML does not give only where there are: a plain GPU's section stays as it was
        for g in occ["gpus"]:
            for key in ("instances", "unlisted"):
                if not g[key]:
                    del g[key]
            for p in g["processes"]:
                for key in ("gi", "ci", "uid"):
                    if p[key] is None:
                        del p[key]
    if snapshot.imex is not None:
        doc["imex"] = _plain(snapshot.imex)
    # job activity (format in gpuhc/sources/activity_io.py)
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
