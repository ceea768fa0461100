"""The plain data that flows through gpuhc: what the sources read and what the checks say.

Everything here is a dataclass of plain values so that a snapshot can be written to YAML,
replayed next year, and fed to a pure check in a unit test. Sources fill these in, checks read
them; neither side knows how the other works.

Every class carries a docstring: a dataclass without one has its signature computed (through
``inspect``) at import, on every health check.

Conventions:
- ``None`` means "not available on this GPU/driver" (NVML NOT_SUPPORTED, a missing sysfs file).
  Checks turn ``None`` into status ``n/a``, never into a failure.
- PCI bus ids are normalised by :func:`norm_pci` to ``dddd:bb:dd.f`` lower case, because NVML
  says ``00000000:B3:00.0``, the kernel log ``PCI:0000:b3:00`` and sysfs ``0000:b3:00.0``.
- Times are POSIX epoch seconds (float).
"""

# No ``from __future__ import annotations`` here: the annotations are evaluated once, at class
# creation, so dataclasses and the scenario loader's type tables (gpuhc.sources.snapshot_io)
# need not compile every one of them from a string on each run.
import enum
import re
from dataclasses import dataclass, field
from typing import Any


class _Record:
    """``==`` and ``repr`` exactly as ``@dataclass`` writes them (fields in order; ``compare`` and
    ``repr`` flags honoured), written once here instead of generated and compiled for every class
    on every run: this module is imported by every health check, and generating them was about a
    third of its import time. The classes stay dataclasses (``fields``, ``replace``, ``asdict``)."""

    __slots__ = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in self.__dataclass_fields__.values() if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__dataclass_fields__.values() if f.repr)
        return f"{self.__class__.__qualname__}({inner})"


class _FrozenRecord(_Record):
    """Frozen records are hashable, as a frozen dataclass with ``eq`` is."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    NA = "n/a"
    ERROR = "error"  # gpuhc could not judge (timeout, internal error): never a reason to drain

    @property
    def rank(self) -> int:
        return _STATUS_RANK[self]


_STATUS_RANK = {Status.PASS: 0, Status.NA: 0, Status.WARN: 1, Status.ERROR: 2, Status.FAIL: 3}


class Action(str, enum.Enum):
    """What a person (or the policy) should do about a result, mildest first."""

    NONE = "none"
    RESTART_APP = "restart app"
    RESET_GPU = "reset GPU"
    # MIG instances gone (a reboot or reset drops a layout nothing re-creates): an admin's step,
    # no ladder step and no lemon (gpuhc/checks/mig_layout.py)
    RECREATE_MIG = "drain + recreate MIG instances"
    DRAIN_REBOOT = "drain + reboot"
    DRAIN_TICKET = "drain + hardware ticket"

    @property
    def rank(self) -> int:
        return list(Action).index(self)

    @property
    def drains(self) -> bool:
        """Actions that take the node out of the schedule (a GPU reset needs it idle too)."""
        return self in (Action.RESET_GPU, Action.RECREATE_MIG, Action.DRAIN_REBOOT, Action.DRAIN_TICKET)


@dataclass(frozen=True, eq=False, repr=False)
class Result(_FrozenRecord):
    """One verdict of one check on one subject (the node, a GPU, a link, a port)."""

    check: str  # check id, e.g. "xid"
    status: Status
    message: str  # one line, for humans and for the drain reason
    subject: str = "node"  # "node", "gpu3", "mlx5_0/1", "0000:b3:00.0"
    value: Any = None  # the measured value, JSON-able
    threshold: Any = None  # what it was compared against, JSON-able
    action: Action = Action.NONE

    def to_dict(self) -> dict:
        return {
            "check": self.check,
            "status": self.status.value,
            "subject": self.subject,
            "message": self.message,
            "value": self.value,
            "threshold": self.threshold,
            "action": self.action.value,
        }


# --------------------------------------------------------------------------- NVML side


@dataclass(eq=False, repr=False)
class NvLinkState(_Record):
    """One NVLink of a GPU: up or not, and its error counters."""

    link: int
    active: bool | None
    # counter name -> value, e.g. {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}
    errors: dict[str, int] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class MigInstance(_Record):
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
class GpuReading(_Record):
    """What NVML said about one GPU in this run."""

    index: int
    name: str
    uuid: str
    pci_bus_id: str  # normalised, see norm_pci
    serial: str | None = None
    lost: bool = False  # NVML knows the GPU but cannot talk to it (GPU is lost / fallen off the bus)
    # /dev/nvidia<minor>: how Slurm's gres.conf names this GPU (never NVML's index; gpuhc/gpumap.py)
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
class NvmlReading(_Record):
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


# --------------------------------------------------------------------------- GPU occupancy


@dataclass(eq=False, repr=False)
class GpuProcess(_Record):
    """One process NVML lists on a GPU (compute, graphics, or both)."""

    pid: int
    name: str | None = None  # /proc/<pid>/comm; None when /proc could not say
    used_mib: float | None = None  # NVML's usedGpuMemory; None where NVML cannot tell (MIG, no permission)
    kinds: str = "compute"  # "compute", "graphics" or "compute+graphics"
    gone: bool = False  # NVML lists it but /proc has no such pid (exited, or another PID namespace)
    # The MIG instance it runs in (NVML's per-instance process lists); None: not a MIG GPU
    gi: int | None = None
    ci: int | None = None


@dataclass(eq=False, repr=False)
class GpuOccupancy(_Record):
    """Who holds one GPU, and how much of its memory."""

    index: int
    uuid: str = ""
    memory_used_mib: float | None = None  # excluding what the driver reserves, where NVML can tell
    memory_total_mib: float | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    mig: bool | None = None  # MIG mode on: the parent's memory use is the instances', not judged
    error: str | None = None  # NVML could not list this GPU's processes: cannot judge it
    instances: list[MigInstance] = field(default_factory=list)  # MIG on: each instance's memory use

    @property
    def subject(self) -> str:
        return f"gpu{self.index}"


@dataclass(eq=False, repr=False)
class Occupancy(_Record):
    """Who holds the GPUs a stage concerns: read only in the stages that judge it (prolog,
    epilog, bootstrap), never in the passive health check (a running job is not a finding)."""

    available: bool
    error: str | None = None
    gpus: list[GpuOccupancy] = field(default_factory=list)
    waited_s: float = 0.0  # how long the read waited for leftover processes to exit (epilog)


# --------------------------------------------------------------------------- kernel log side


class EventKind(str, enum.Enum):
    XID = "xid"
    SXID = "sxid"  # NVSwitch
    FALLEN_OFF_BUS = "fallen_off_bus"  # multi-line "has fallen off the bus" without an Xid
    IB_LINK = "ib_link"  # mlx5 port state change
    DRIVER = "driver"  # a driver message asking for action without an Xid; ``state`` says which
    # The node around the GPUs (gpuhc/sources/kernel_log_host.py): a PCIe AER report, a machine
    # check or EDAC memory error, an mlx5 cable/module event; ``state`` says which.
    AER = "aer"
    MCE = "mce"
    IB_MODULE = "ib_module"


@dataclass(frozen=True, eq=False, repr=False)
class KernelEvent(_FrozenRecord):
    """One kernel log message gpuhc acts on (an Xid, an SXid, an IB link change...)."""

    kind: EventKind
    time: float | None  # epoch seconds; None when the line carried no usable time
    message: str  # the line's text after the NVRM:/mlx5 prefix, sanitised
    pci: str | None = None  # normalised PCI id of the GPU/switch/HCA, when the line has one
    code: int | None = None  # XID or SXID number
    device: str | None = None  # IB: "mlx5_0"; SXid: the switch, e.g. "nvswitch1"
    port: int | None = None  # IB: port number; SXid: the NVSwitch link
    state: str | None = None  # IB: "DOWN" / "ACTIVE" / "INIT" / ...; SXid: "fatal" / "non-fatal"
    seq: int | None = None  # /dev/kmsg sequence number, for the cursor


@dataclass(eq=False, repr=False)
class KernelLog(_Record):
    """The kernel log as read in this run: its events and how far the read reached."""

    events: list[KernelEvent] = field(default_factory=list)
    source: str = ""  # "/dev/kmsg", "dmesg", or a file path
    boot_id: str | None = None  # /proc/sys/kernel/random/boot_id on a live node
    last_time: float | None = None  # the latest time the log shows (replay: judging "now")
    last_seq: int | None = None
    unparsed_lines: int = 0  # lines that looked like NVRM/mlx5 lines but did not parse
    unparsed_example: str | None = None  # the first of them, sanitised, to quote in a warning
    driver_version: str | None = None  # "575.57.08" from the driver's loading line: Xid 144-150 decode by branch
    # A recording too big to read whole (gpuhc.sources.kernel_log_file): the oldest time the read
    # reached (None: nothing with a time was left out) and what was left out, in words.
    covered_from: float | None = None
    partial: str = ""
    # /dev/kmsg only: the oldest record's sequence number still in the ring buffer, and how many
    # records were overwritten while this read went on (gaps between the numbers it read).
    first_seq: int | None = None
    seq_lost: int = 0


# --------------------------------------------------------------------------- sysfs side


@dataclass(eq=False, repr=False)
class IbPort(_Record):
    """One InfiniBand (or RoCE) port, from sysfs."""

    device: str  # "mlx5_0"
    port: int
    state: str | None  # "ACTIVE", "DOWN", "INIT", "ARMED"
    phys_state: str | None  # "LinkUp", "Disabled", "Polling", ...
    rate_gbps: float | None
    link_layer: str | None = None  # "InfiniBand" / "Ethernet"
    counters: dict[str, int] = field(default_factory=dict)
    pci: str | None = None  # the HCA's PCI address: mlx5 kernel lines sometimes name only that

    @property
    def subject(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(eq=False, repr=False)
class AerCounters(_Record):
    """PCIe Advanced Error Reporting counters of one device, from sysfs."""

    pci: str  # normalised
    correctable: int | None = None
    nonfatal: int | None = None
    fatal: int | None = None


# --------------------------------------------------------------------------- IMEX side


@dataclass(eq=False, repr=False)
class ImexStatus(_Record):
    """The node's IMEX daemon (multi-node NVLink memory export, GB200 NVL72) as ``nvidia-imex-ctl``
    reports it (gpuhc/sources/imex.py); judged by gpuhc/checks/fabric.py."""

    installed: bool  # nvidia-imex-ctl found in a root-owned system directory
    daemon: str | None = None  # `-q`: READY, INITIALIZING, ...; None: no answer
    domain: str | None = None  # `-N`'s "Domain State": UP, DOWN, DEGRADED; None: not read
    nodes: dict[str, str] = field(default_factory=dict)  # `-N`'s node table: address -> state
    error: str | None = None  # why the daemon or the domain could not be read, in words
# --------------------------------------------------------------------------- the host around the GPUs


@dataclass(eq=False, repr=False)
class HostReading(_Record):
    """The node around the GPUs (gpuhc/sources/host.py), judged by the host, services, aer and
    mce checks. Every field None: not read (off by config, or no such thing on this node)."""

    cpus_online: int | None = None  # /sys/devices/system/cpu/online, counted
    mem_total_kib: int | None = None  # /proc/meminfo MemTotal
    # EDAC memory controllers: "mc0" -> {"ce": n, "ue": n} (/sys/devices/system/edac/mc)
    edac: dict[str, dict[str, int]] | None = None
    # The devices a job needs and the bridges above them: PCI id -> {"role": "gpu" | "nvswitch" |
    # "nic", "upstream": [bridge PCI ids, nearest first]} (sysfs, walked up from each device)
    pci_watch: dict[str, dict[str, Any]] | None = None
    # Site-named mounts: path -> {"ok": bool, "seconds": float, "error": str | None}
    mounts: dict[str, dict[str, Any]] | None = None
    # Local scratch: {"path": str, "free_bytes": int, "total_bytes": int} or {"path", "error"}
    scratch: dict[str, Any] | None = None
    # Processes in uninterruptible sleep on the GPU or a file system: [{"pid", "comm", "wchan"}]
    dstate: list[dict[str, Any]] | None = None
    # GPU services: name -> {"expected": bool, "running": bool, "answering": bool | None,
    # "error": str | None} (fabricmanager, persistenced, dcgm)
    services: dict[str, dict[str, Any]] | None = None


# --------------------------------------------------------------------------- job activity (issue 24)


@dataclass(eq=False, repr=False)
class GpuActivity(_Record):
    """What one GPU that a running job holds did over the last seconds: the driver's own
    buffered samples (docs/checks.md, "jobs"), plus the job ids of the processes on it."""

    index: int
    jobs: list[str] = field(default_factory=list)  # Slurm job ids, from the processes' cgroups (or environ)
    span_s: float = 0.0  # how many seconds the samples cover
    gpu_util: list[float] = field(default_factory=list)  # percent, oldest first
    mem_util: list[float] = field(default_factory=list)  # percent of time the memory was read or written
    power_w: list[float] = field(default_factory=list)
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_activity: float | None = None  # GPM SM activity, percent; None: not measured or not supported
    via: str = "cgroup"  # how the job ids were found: "cgroup", "environ" or "mixed"
    instance: str | None = None  # a MIG slice ("gi13/ci0"): the jobs of that slice alone; samples are the GPU's
    # job -> the real uids that own its processes on this GPU (/proc/<pid>/status, the kernel's
    # word): the Slurm side acts on a job only when they are the job's user (docs/security.md)
    owners: dict[str, list[int]] = field(default_factory=dict)
    # The host side of the job's processes on this GPU (/proc/<pid>/stat and io), so that a rank
    # that is busy on the host (writing a checkpoint) is told from one that is stuck:
    pids: list[int] = field(default_factory=list)  # the job processes on this GPU
    rank: int | None = None  # the rank of the first of them in its job (SLURM_PROCID or RANK in its environment)
    host_state: str | None = None  # the busiest thread state of those processes: D, R, S (or T, Z)
    host_cpu_total_s: float | None = None  # their CPU time so far (user + system), summed
    host_dt_s: float | None = None  # the interval the deltas below were measured over (None: not measured)
    host_cpu_s: float | None = None  # CPU seconds they used in that interval
    host_read_bytes: float | None = None  # bytes they read in it (read syscalls: files, pipes)
    host_write_bytes: float | None = None  # bytes they wrote in it (write syscalls)

    @property
    def subject(self) -> str:
        return f"gpu{self.index}"


@dataclass(eq=False, repr=False)
class Activity(_Record):
    """The GPUs running jobs hold, and what each did (only those: an idle GPU costs no read)."""

    available: bool
    error: str | None = None
    gpus: list[GpuActivity] = field(default_factory=list)
    unmapped_pids: int = 0  # processes on a GPU no job could be found for (not Slurm's, or gone)
    job_nodes: dict[str, int] = field(default_factory=dict)  # job -> its node count (SLURM_JOB_NUM_NODES of a rank)
    job_names: dict[str, str] = field(default_factory=dict)  # job -> its name (SLURM_JOB_NAME of a rank)


# --------------------------------------------------------------------------- the snapshot


@dataclass(eq=False, repr=False)
class Snapshot(_Record):
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


_PCI_RE = re.compile(
    r"(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?"
)


def norm_pci(text: str) -> str:
    """Normalise a PCI address to ``dddd:bb:dd.f`` (lower case, 4-digit domain).

    Accepts NVML's ``00000000:B3:00.0``, the kernel's ``0000:b3:00`` or ``PCI:0000:b3:00``, and a
    bare ``b3:00.0``. Unparseable text is returned lower-cased and stripped, so that comparison
    stays deterministic instead of raising.
    """
    s = text.strip()
    if s.upper().startswith("PCI:"):
        s = s[4:]
    m = _PCI_RE.fullmatch(s)
    if not m:
        return s.lower()
    dom = int(m.group("dom") or "0", 16)
    return f"{dom:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn') or '0'}"
