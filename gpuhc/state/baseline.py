"""A node's baseline: what its hardware looked like when it was known to be good.

Why: a profile knows what an H100 *model* should look like (18 NVLinks, gen5 x16), not what this
*node* looks like — which PCI ids its GPUs sit at, that its second HCA port is unused, that its
board routes one GPU through a gen4 retimer. `gpuhc baseline capture` records that once, on a
node that passed burn-in; the checks then compare each run against it (a GPU missing by PCI id,
an IB port that was ACTIVE and is not, a link that trained below its own maximum; gpu-count
also compares the GPU model (another board), the driver version and each bus id's serial).

Format (YAML or JSON)::

    version: 1
    captured_at: "2025-03-04T10:00:00Z"
    hostname: gpu001
    driver_version: "580.95.05"
    gpu_count: 8
    gpu_model: NVIDIA H100 80GB HBM3
    gpus:
      "0000:18:00.0": {index: 0, name: ..., uuid: ..., serial: ..., pcie_gen_max: 5,
                       pcie_width_max: 16, nvlink_active: 18}
    ib:
      mlx5_0/1: {rate_gbps: 400.0, state: ACTIVE, link_layer: InfiniBand}
    host: {cpus_online: 224, mem_total_kib: 2113470000}   # the host check's (CPUs, memory)
    topology: {...}            # optional, written by the active checks (gpuhc.active)
    forced: {problems: [...]}  # only with `capture --force`: what the node failed when captured

PCI ids are normalised (:func:`gpuhc.model.pci.norm_pci`) so a lookup never misses on case or domain
width.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

from gpuhc.errors import ConfigError, SourceError
from gpuhc.checks.mig_layout import layout_entry
from gpuhc.model.pci import norm_pci
from gpuhc.model.snapshot import Snapshot

VERSION = 1
_GPU_KEYS = {"index": int, "name": str, "uuid": str, "serial": str, "pcie_gen_max": int, "pcie_width_max": int,
             "nvlink_active": int}
_HOST_KEYS = {"cpus_online": int, "mem_total_kib": int}
_IB_KEYS = {"rate_gbps": (int, float), "state": str, "link_layer": str}
_TOP_STRINGS = ("captured_at", "hostname", "driver_version", "gpu_model")


def capture(snapshot: Snapshot) -> dict[str, Any]:
    """The baseline document of ``snapshot``. Raises SourceError when NVML could not be read:
    a baseline without its GPUs would make every later comparison meaningless."""
    nvml = snapshot.nvml
    if nvml is None or not nvml.available:
        why = nvml.error if nvml is not None else "not read"
        raise SourceError(f"cannot capture a baseline: NVML unavailable ({why})")
    gpus: dict[str, dict[str, Any]] = {}
    for g in nvml.gpus:
        gpus[norm_pci(g.pci_bus_id) if g.pci_bus_id else f"unknown-gpu{g.index}"] = {
            "index": g.index,
            "name": g.name,
            "uuid": g.uuid,
            "serial": g.serial,
            "pcie_gen_max": g.pcie_gen_max,
            "pcie_width_max": g.pcie_width_max,
            "nvlink_active": sum(1 for link in g.nvlinks if link.active),
        }
        if g.mig_mode is not None:  # the MIG layout the node should come back with (checks/mig_layout.py)
            gpus[norm_pci(g.pci_bus_id) if g.pci_bus_id else f"unknown-gpu{g.index}"].update(
                mig_mode=g.mig_mode, mig=sorted(layout_entry(i) for i in g.mig))
    names = Counter(g.name for g in nvml.gpus)
    doc: dict[str, Any] = {
        "version": VERSION,
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(snapshot.time)),
        "hostname": snapshot.hostname,
        "driver_version": nvml.driver_version,
        "gpu_count": len(nvml.gpus),
        "gpu_model": names.most_common(1)[0][0] if names else None,
        "gpus": gpus,
    }
    if snapshot.ib_ports is not None:
        from gpuhc.checks.infiniband import ib_baseline  # the shape that check reads back

        doc["ib"] = ib_baseline(snapshot.ib_ports)
    host = snapshot.host
    if host is not None and (host.cpus_online is not None or host.mem_total_kib is not None):
        doc["host"] = {"cpus_online": host.cpus_online, "mem_total_kib": host.mem_total_kib}  # the host check's
    return doc


def doubts(snapshot: Snapshot) -> list[str]:
    """Reasons to doubt that ``snapshot`` shows a healthy node, which a baseline must be.

    A baseline taken on a sick node would make its sickness "expected", so `gpuhc baseline
    capture` shows these and refuses to write unless told ``--force``.
    """
    out: list[str] = []
    nvml = snapshot.nvml
    if nvml is not None and nvml.available:
        names = Counter(g.name for g in nvml.gpus)
        if len(names) > 1:
            out.append(f"mixed GPU models: {', '.join(sorted(names))}")
        for g in nvml.gpus:
            if g.name.startswith("unknown") or not g.pci_bus_id:
                out.append(f"gpu{g.index} did not answer NVML ({g.name})")
            if g.pcie_width is not None and g.pcie_width_max is not None and g.pcie_width < g.pcie_width_max:
                out.append(f"gpu{g.index} PCIe link x{g.pcie_width} below its maximum x{g.pcie_width_max}")
            down = [str(link.link) for link in g.nvlinks if link.active is False]
            if down:
                out.append(f"gpu{g.index} NVLinks down: {', '.join(down)}")
    for p in snapshot.ib_ports or []:
        if p.state == "ACTIVE" and p.phys_state not in (None, "LinkUp"):
            out.append(f"{p.subject} ACTIVE but physical state {p.phys_state}")
    return out


def load(path: str) -> dict[str, Any]:
    """Read and check a baseline file; ConfigError names file, line and key."""
    from gpuhc.config.load import check_file_safety
    from gpuhc.text.yamlpos import line_of, load_file_text, read_text

    # A baseline decides drains like the config does (the expected GPUs): as root, one that
    # anyone else could have written or swapped is refused the same way.
    if os.path.exists(path):  # (a missing one is named below)
        check_file_safety(path, "baseline")
    try:
        text = read_text(path)
    except OSError as e:
        raise ConfigError(f"cannot read baseline: {e.strerror or e}", path) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot read baseline: not UTF-8 text (byte {e.start})", path) from None
    except ValueError as e:
        raise ConfigError(f"cannot read baseline: {e}", path) from None
    doc, lines = load_file_text(text, path)

    def bad(p: tuple, message: str) -> ConfigError:
        return ConfigError(message, path, line_of(lines, p), ".".join(str(x) for x in p) or None)

    if not isinstance(doc, dict):
        raise bad((), "a baseline must be a mapping (written by `gpuhc baseline capture`)")
    if doc.get("version") != VERSION:
        raise bad(("version",), f"unsupported baseline version {doc.get('version')!r} (this gpuhc reads {VERSION})")
    for key in _TOP_STRINGS:
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise bad((key,), f"must be a string, got {doc[key]!r}")
    count = doc.get("gpu_count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise bad(("gpu_count",), f"must be a non-negative integer, got {count!r}")
    gpus = doc.get("gpus") or {}
    if not isinstance(gpus, dict):
        raise bad(("gpus",), "must be a mapping of PCI id -> GPU facts")
    doc["gpus"] = {norm_pci(str(pci)): _checked(info, _GPU_KEYS, ("gpus", pci), bad) for pci, info in gpus.items()}
    ib = doc.get("ib")
    if ib is not None:
        if not isinstance(ib, dict):
            raise bad(("ib",), "must be a mapping of port (mlx5_0/1) -> port facts")
        doc["ib"] = {str(port): _checked(info, _IB_KEYS, ("ib", port), bad) for port, info in ib.items()}
    if doc.get("host") is not None:
        doc["host"] = _checked(doc["host"], _HOST_KEYS, ("host",), bad)
    if doc.get("topology") is not None and not isinstance(doc["topology"], dict):
        raise bad(("topology",), "must be a mapping")
    forced = doc.get("forced")
    if forced is not None and (not isinstance(forced, dict) or not isinstance(forced.get("problems"), list)
                               or not all(isinstance(p, str) for p in forced["problems"])):
        raise bad(("forced",), "must be {problems: [text, ...]} (written by `baseline capture --force`)")
    return doc


def _checked(info: Any, keys: dict[str, Any], p: tuple, bad) -> dict[str, Any]:
    if not isinstance(info, dict):
        raise bad(p, "must be a mapping")
    for key, value in info.items():
        want = keys.get(key)
        if want is None or value is None:
            continue  # unknown keys are kept: a newer gpuhc may have written them
        if not isinstance(value, want) or isinstance(value, bool):
            raise bad(p + (key,), f"has the wrong type: {value!r}")
        # Counts, widths and rates: a NaN passes every comparison, a negative one fails them all.
        if isinstance(value, (int, float)) and not (0 <= value < float("inf")):
            raise bad(p + (key,), f"must be a finite number >= 0, got {value!r}")
    return info


def render(doc: dict[str, Any]) -> str:
    """A baseline for humans (`gpuhc baseline show`)."""
    def known(key: str) -> str:
        value = doc.get(key)
        return "unknown" if value is None else str(value)

    count = "?" if doc.get("gpu_count") is None else doc["gpu_count"]
    lines = [
        f"baseline of {known('hostname')} captured {known('captured_at')} (driver {known('driver_version')})",
        f"{count} x {known('gpu_model')}",
    ]
    forced = (doc.get("forced") or {}).get("problems")
    if forced is not None:
        lines.append(f"FORCED: captured with --force despite {len(forced)} problem(s):")
        lines += [f"  {p}" for p in forced]
    if not doc.get("gpus"):
        lines += ["", "no GPUs recorded"]
        return _with_ib(doc, lines)
    lines += [
        "",
        f"{'GPU':>3}  {'PCI':12}  {'PCIe max':8}  {'NVLinks':7}  {'serial':15}  name",
    ]
    for pci, g in sorted(doc.get("gpus", {}).items(), key=lambda kv: (kv[1].get("index", 0), kv[0])):
        pcie = f"gen{g.get('pcie_gen_max')} x{g.get('pcie_width_max')}"
        lines.append(f"{g.get('index', '?'):>3}  {pci:12}  {pcie:8}  {g.get('nvlink_active', '?')!s:>7}  "
                     f"{g.get('serial') or '-':15}  {g.get('name')}")
    return _with_ib(doc, lines)


def _with_ib(doc: dict[str, Any], lines: list[str]) -> str:
    ib = doc.get("ib") or {}
    if ib:
        lines += ["", f"{'IB port':10}  {'state':8}  {'rate':>8}  link layer"]
        for port, p in sorted(ib.items()):
            rate = "-" if p.get("rate_gbps") is None else f"{p['rate_gbps']:g} Gb/s"
            lines.append(f"{port:10}  {p.get('state') or '-':8}  {rate:>8}  {p.get('link_layer') or '-'}")
    if doc.get("topology"):
        lines += ["", "topology: recorded (see the file)"]
    return "\n".join(lines)
