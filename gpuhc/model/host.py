"""The node around the GPUs: InfiniBand ports and PCIe AER counters (sysfs), the IMEX daemon, and
the host reading (CPUs, memory, EDAC, PCI tree, mounts, scratch, stuck processes, GPU services)."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
from dataclasses import dataclass, field
from typing import Any

from gpuhc.model.record import Record


@dataclass(eq=False, repr=False)
class IbPort(Record):
    """One InfiniBand (or RoCE) port, from sysfs."""

    device: str  # "mlx5_0"
    port: int
    state: str | None  # "ACTIVE", "DOWN", "INIT", "ARMED"
    phys_state: str | None  # "LinkUp", "Disabled", "Polling", ...
    rate_gbps: float | None
    link_layer: str | None = None  # "InfiniBand" / "Ethernet"
    counters: dict[str, int] = field(default_factory=dict)
    pci: str | None = None  # the HCA's PCI address: mlx5 kernel lines sometimes name only that
    fw_ver: str | None = None  # the HCA's firmware version (<hca>/fw_ver), the same for its ports
    # The port's IPoIB interfaces that are administratively up, name -> operstate ("up",
    # "down", "lowerlayerdown", ...); an interface set down on purpose is not listed. None: not read.
    ipoib: dict[str, str] | None = None

    @property
    def subject(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(eq=False, repr=False)
class AerCounters(Record):
    """PCIe Advanced Error Reporting counters of one device, from sysfs."""

    pci: str  # normalised
    correctable: int | None = None
    nonfatal: int | None = None
    fatal: int | None = None


@dataclass(eq=False, repr=False)
class ImexStatus(Record):
    """The node's IMEX daemon (multi-node NVLink memory export, GB200 NVL72) as ``nvidia-imex-ctl``
    reports it (gpuhc/sources/imex.py); judged by gpuhc/checks/fabric.py."""

    installed: bool  # nvidia-imex-ctl found in a root-owned system directory
    daemon: str | None = None  # `-q`: READY, INITIALIZING, ...; None: no answer
    domain: str | None = None  # `-N`'s "Domain State": UP, DOWN, DEGRADED; None: not read
    nodes: dict[str, str] = field(default_factory=dict)  # `-N`'s node table: address -> state
    error: str | None = None  # why the daemon or the domain could not be read, in words


@dataclass(eq=False, repr=False)
class HostReading(Record):
    """The node around the GPUs (gpuhc/sources/host.py), judged by the host, services, aer and
    mce checks. Every field None: not read (off by config, or no such thing on this node)."""

    cpus_online: int | None = None  # /sys/devices/system/cpu/online, counted
    mem_total_kib: int | None = None  # /proc/meminfo MemTotal
    # EDAC memory controllers: "mc0" -> {"ce": n, "ue": n} (/sys/devices/system/edac/mc)
    edac: dict[str, dict[str, int]] | None = None
    # The devices a job needs and the bridges above them: PCI id -> {"role": "gpu" | "nvswitch" |
    # "nic", "upstream": [bridge PCI ids, nearest first]} (sysfs, walked up from each device)
    pci_watch: dict[str, dict[str, Any]] | None = None
    # Site-named mounts: path -> {"ok": bool, "seconds": float, "error": str | None, "fstype": str
    # | None (/proc/self/mountinfo's; absent in older recordings)}
    mounts: dict[str, dict[str, Any]] | None = None
    # Local scratch: {"path": str, "free_bytes": int, "total_bytes": int} or {"path", "error"}
    scratch: dict[str, Any] | None = None
    # Processes in uninterruptible sleep in a listed wait (gpuhc/sources/host_stuck.py): [{"pid",
    # "start", "comm", "wchan", "wait": "gpu-driver" | "file-system" | "fuse", "cpu": the main
    # thread's clock ticks, "switches": its context switches, "holds_gpu": bool (gpu-driver only)}]
    dstate: list[dict[str, Any]] | None = None
    # GPU services: name -> {"expected": bool, "running": bool, "answering": bool | None,
    # "error": str | None} (fabricmanager, persistenced, dcgm)
    services: dict[str, dict[str, Any]] | None = None
