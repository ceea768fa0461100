"""The snapshot: everything the checks may look at, read once per run."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
from dataclasses import dataclass

from gpuhc.model.activity import Activity
from gpuhc.model.host import AerCounters, HostReading, IbPort, ImexStatus
from gpuhc.model.kernel import KernelLog
from gpuhc.model.nvml import NvmlReading
from gpuhc.model.occupancy import Occupancy
from gpuhc.model.record import Record


@dataclass(eq=False, repr=False)
class Snapshot(Record):
    """Everything the checks may look at, read once per run."""

    hostname: str
    time: float  # "now" for judging; replay uses the recording's time
    nvml: NvmlReading | None = None
    kernel: KernelLog | None = None
    ib_ports: list[IbPort] | None = None
    aer: list[AerCounters] | None = None
    # PCI addresses (normalised) of the NVIDIA GPUs on the PCI bus, from sysfs: a GPU that fell
    # off the bus often vanishes from NVML but stays here. None: not read (no sysfs, old recording).
    pci_gpus: list[str] | None = None
    # Processes and memory on the GPUs (prolog/epilog/bootstrap only). None: not read.
    occupancy: Occupancy | None = None
    # The IMEX daemon (gpuhc/sources/imex.py). None: not read (no such check, old recording).
    imex: ImexStatus | None = None
    # What the GPUs held by running jobs did (the health check's job checks). None: not read.
    activity: Activity | None = None
    # Slurm's view of the GPUs, as `gpuhc snapshot` records it for a replay elsewhere:
    # {"conf": gres.conf text, "mig_minors": the driver's MIG minors} (gpuhc/sources/gres.py).
    gres: dict | None = None
    # The node around the GPUs (gpuhc/sources/host.py). None: not read.
    host: HostReading | None = None
