"""The kernel log as read in one run: the events gpuhc acts on and how far the read reached."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
import enum
from dataclasses import dataclass, field

from gpuhc.model.record import FrozenRecord, Record


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
    # gpuhc/sources/node_reports.py: the kernel's hung-task report (``device`` the task's name,
    # ``state`` the modules its reliable stack frames are in) and the mlx5 driver's own health
    # words about its NIC (``state`` which, ``pci`` the function)
    HUNG_TASK = "hung_task"
    NIC_HEALTH = "nic_health"
    # gpuhc/sources/kernel_log_storage.py: a local disk's fault (``state`` which, ``device`` the
    # block device), an NFS server's state (``device`` the server) and the kernel's own health
    # (soft lockup, a panic, the file-max limit)
    STORAGE = "storage"
    NFS = "nfs"
    HOST_KERNEL = "host_kernel"


# The NIC_HEALTH states that take the NIC out (the mlx5 driver's fatal paths: node_reports names
# each); the others (slot power, TX time-out, a health issue below ERROR) are warnings.
NIC_FATAL = frozenset({"miss_count", "fatal_error", "health_issue", "syndrome", "recovery_failed", "cmd_timeout"})


@dataclass(frozen=True, eq=False, repr=False)
class KernelEvent(FrozenRecord):
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
class KernelLog(Record):
    """The kernel log as read in this run: its events and how far the read reached."""

    events: list[KernelEvent] = field(default_factory=list)
    source: str = ""  # "/dev/kmsg", "dmesg", or a file path
    boot_id: str | None = None  # /proc/sys/kernel/random/boot_id on a live node
    last_time: float | None = None  # the latest time the log shows (replay: judging "now")
    last_seq: int | None = None
    unparsed_lines: int = 0  # lines that looked like NVRM/mlx5 lines but did not parse
    unparsed_example: str | None = None  # the first of them, sanitised, to quote in a warning
    driver_version: str | None = None  # "575.57.08" from the driver's loading line: Xid 144-150 decode by branch
    # Lines with no stamp gpuhc knows, in a log whose lines have one (a partial copy's cut first
    # line, typed text): how many and the first's line number. Read for the driver's exact words
    # only, undated; they never hide the lines after them.
    unread_lines: int = 0
    unread_first_line: int | None = None
    # ``dmesg -H`` lines before any absolute anchor: dated from the log's first line only (seconds
    # since it, the since-boot clock), so the log's end is "now" and they are judged as recent.
    relative_unanchored: int = 0
    # A recording too big to read whole (gpuhc.sources.kernel_log_file): the oldest time the read
    # reached (None: nothing with a time was left out) and what was left out, in words.
    covered_from: float | None = None
    partial: str = ""
    # /dev/kmsg only: the oldest record's sequence number still in the ring buffer, and how many
    # records were overwritten while this read went on (gaps between the numbers it read).
    first_seq: int | None = None
    seq_lost: int = 0
