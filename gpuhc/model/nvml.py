"""What NVML said in one run: the driver, every GPU, its NVLinks and MIG devices."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
from dataclasses import dataclass, field

from gpuhc.model.pci import norm_pci
from gpuhc.model.record import Record


@dataclass(eq=False, repr=False)
class NvLinkState(Record):
    """One NVLink of a GPU: up or not, and its error counters."""

    link: int
    active: bool | None
    # counter name -> value, e.g. {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}
    errors: dict[str, int] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class MigInstance(Record):
    """One MIG device of a GPU in MIG mode: a compute instance (``ci``) inside a GPU instance
    (``gi``), as NVML numbers them (docs/facts.md, "MIG and Slurm's GPU numbers"). Its memory is
    its GPU instance's, shared by the compute instances in it."""

    gi: int
    ci: int
    uuid: str = ""  # "MIG-<uuid>" (drivers from R470 on)
    name: str | None = None  # "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None

    @property
    def label(self) -> str:
        return f"gi{self.gi}/ci{self.ci}"


@dataclass(eq=False, repr=False)
class GpuReading(Record):
    """What NVML said about one GPU in this run."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str  # normalised, see norm_pci
    serial: str | None = None
    lost: bool = False  # NVML knows the GPU but cannot talk to it (GPU is lost / fallen off the bus)
    # /dev/nvidia<minor>: how Slurm's gres.conf names this GPU (never NVML's index; gpuhc/node/gpumap.py)
    minor: int | None = None
    mig_mode: bool | None = None  # MIG mode now on; None: the GPU has no MIG
    mig: list[MigInstance] = field(default_factory=list)  # its MIG devices, NVML's MIG index order
    vbios: str | None = None
    persistence_mode: bool | None = None
    # ECC
    ecc_mode: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_volatile_corrected: int | None = None
    # Row remapping (Ampere+) and page retirement (pre-Ampere; NOT_SUPPORTED on Hopper)
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    # NVLink
    nvlinks: list[NvLinkState] = field(default_factory=list)
    # PCIe
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replay: int | None = None
    # Clocks: clock-event (throttle) reason bitmasks, one per sample taken in this run
    clock_event_samples: list[int] = field(default_factory=list)
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    utilization_gpu: int | None = None  # percent
    # Thermal and power
    temp_gpu_c: int | None = None
    temp_mem_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced limit
    power_default_limit_w: float | None = None
    # NVSwitch fabric (Hopper+ with NVSwitch): state/status as NVML names them, lower case,
    # e.g. state "completed", status "success"; None where the GPU has no fabric.
    fabric_state: str | None = None
    fabric_status: str | None = None
    # NVLink5 fabric health (gpuhc/sources/nvml_fabric.py; judged by gpuhc/checks/fabric.py):
    # the rest of nvmlDeviceGetGpuFabricInfoV. The health mask is NVML's raw bits (2-bit fields,
    # docs/facts.md "NVML"); the summary is v3's word ("healthy", "unhealthy", "limited
    # capacity"). None where the driver or the GPU does not say.
    fabric_clique_id: int | None = None
    fabric_cluster_uuid: str | None = None
    fabric_health_mask: int | None = None
    fabric_health_summary: str | None = None
    # Grace-Blackwell NVLink-C2C error counters (NVML_FI_DEV_C2C_LINK_ERROR_*, totals of the
    # GPU's C2C links): {"crc": n, "replay": n, "replay_b2b": n}; None where NVML has no C2C.
    c2c_errors: dict[str, int] | None = None

    @property
    def subject(self) -> str:
        return f"gpu{self.index}"


@dataclass(eq=False, repr=False)
class NvmlReading(Record):
    """NVML as a whole: whether it answered, the driver, and every GPU."""

    available: bool
    error: str | None = None  # why NVML is not available ("driver not loaded", ...)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuReading] = field(default_factory=list)
    # Which links' DL error counters (replay, recovery, crc) this reading holds: of GPU i, the
    # links with ``link % dl_rotation == dl_phases[i]``; rotation 1: every link of every GPU.
    # The nvlink check reads the rest from its state (gpuhc/checks/nvlink.py, ``dl_rotation``).
    dl_rotation: int = 1
    dl_phases: dict[int, int] = field(default_factory=dict)
    # Per-field NVML errors other than NOT_SUPPORTED: diagnostics for the report, not state.
    notes: list[str] = field(default_factory=list, compare=False)

    def gpu_by_pci(self, pci: str) -> GpuReading | None:
        want = norm_pci(pci)
        for gpu in self.gpus:
            if norm_pci(gpu.pci_bus_id) == want:
                return gpu
        return None
