"""The interfaces every source implements, live or replayed.

A live source reads the node; a replay source reads a recording (scenario YAML, a saved kernel
log, a copied sysfs tree). Both return the same dataclasses from :mod:`gpuhc.model`, so the
checks and everything after them cannot tell the difference. Sources are read-only.
"""

from __future__ import annotations

from typing import Protocol

from gpuhc.model.activity import Activity
from gpuhc.model.host import AerCounters, HostReading, IbPort, ImexStatus
from gpuhc.model.kernel import KernelLog
from gpuhc.model.nvml import NvmlReading
from gpuhc.model.occupancy import Occupancy


class NvmlSource(Protocol):
    def read(self) -> NvmlReading:
        """Inventory and every counter the checks use. Never raises for a missing driver:
        returns ``NvmlReading(available=False, error=...)`` instead."""


class KernelLogSource(Protocol):
    def read(self) -> KernelLog:
        """All NVRM/NVSwitch/mlx5 events still in the log, oldest first."""


class SysfsSource(Protocol):
    def ib_ports(self) -> list[IbPort]:
        """Every InfiniBand/RoCE port under <root>/sys/class/infiniband."""

    def aer(self) -> list[AerCounters]:
        """PCIe AER counters of every device that exposes them."""


class PciSource(Protocol):
    def nvidia_gpus(self) -> list[str] | None:
        """Normalised PCI addresses of the NVIDIA GPUs on the bus; None when unknown."""


class ProcsSource(Protocol):
    def read(self) -> Occupancy | None:
        """Processes and memory in use on the GPUs; None when a recording does not say."""


class ImexSource(Protocol):
    def read(self) -> ImexStatus | None:
        """The IMEX daemon's and domain's state; None when a recording does not say."""
class ActivitySource(Protocol):
    def read(self) -> Activity | None:
        """What the GPUs running jobs hold did over the last seconds; None when a recording
        does not say."""


class HostSource(Protocol):
    def read(self) -> HostReading | None:
        """The node around the GPUs (CPUs, memory, EDAC, PCI tree, mounts, services); None when
        a recording does not say."""
