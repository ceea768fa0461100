"""The kernel's hung-task reports and the mlx5 driver's health words, as kernel-log events.
Pure, no I/O, never raises.

The kernel-log reader hands the kernel messages it wants to :meth:`NodeReports.feed`, in log
order, after its record rules (only records the kernel wrote: docs/security.md, "Kernel log"). Each
form below is the printk format of the source named, matched exactly from its start.

Hung tasks (``kernel/hung_task.c``, ``check_hung_task``): one report is an ``INFO: task
NAME:PID blocked for more than N seconds.`` record, then the kernel's release line, the
``"echo 0 > ..."`` hint, ``sched_show_task``'s line for the task (``task:NAME state:D ...``, or
the old ``NAME D <hex> ...`` with hex stack words) and its stack: ``Call Trace:``, ``<TASK>``,
one record per frame (``sym+0xoff/0xlen [module]``; ``? `` before a frame the unwinder only
guessed from a stale stack word), ``</TASK>``. One HUNG_TASK event per report: ``device`` the
task's name (user text: a process names itself), ``code`` its pid, ``state`` the modules its
*reliable* frames are in, space-separated (``"kernel"``: frames, none in a module; None: no
stack in the log). A frame counts only as its own record inside the report: a name that holds
a newline stays inside its own record, which the reader reads for its first line only.

mlx5 health (``drivers/net/ethernet/mellanox/mlx5/core/``; ``mlx5_core_err`` prints
``mlx5_core <pci>: <func>:<line>:(pid <n>): ``): NIC_HEALTH events, ``state`` naming which:

- ``health.c``: ``device's health compromised - reached miss count`` (the firmware's health
  counter stopped: ``miss_count``), ``Fatal error <n> detected`` (``fatal_error``), ``Health issue
  observed, <syndrome>, severity(<n>) <LEVEL>:`` (``health_issue`` at severity 3, ERROR, or worse;
  ``health_warning`` above), the health buffer's ``synd 0x<n>: <text>`` line (``syndrome``, one
  per dump, only when no ``Health issue`` header of that function came just before: kernels
  before the header print the buffer on the fatal paths only; its ``assert_var[..]`` words are
  no event of their own), ``PCI slot is
  unavailable`` and ``health recovery failed`` / ``... flow aborted ...`` (``recovery_failed``).
- ``cmd.c``: ``<CMD>(0x<op>) [Async, ]timeout. Will cause a leak of a command resource``
  (``cmd_timeout``: the firmware stopped answering commands).
- ``events.c``: ``Detected insufficient power on the PCIe slot (<n>W).`` (``slot_power``),
  ``temp_warn``'s ``High temperature on sensors with bit set <msb> <lsb>`` (``nic_hot``: the
  adapter's own sensors, not a cable module's).
- ``net/sched/sch_generic.c``: ``NETDEV WATCHDOG: <ifname> (<driver>): transmit queue <q> timed
  out`` (before 6.9; in a WARN) and the ``netdev_crit`` form ``<driver> <pci> <ifname>: NETDEV
  WATCHDOG: CPU: <n>: transmit queue <q> timed out <ms> ms`` (``tx_timeout``; ``device`` the
  interface, ``pci`` where the line names one).

``gpuhc.model.kernel.NIC_FATAL`` are the states that take the NIC out (the checks fail on them and the port's
downtime counts from them); the others warn.
"""

from __future__ import annotations

from gpuhc.text.lazyre import lazy
from gpuhc.model.kernel import NIC_FATAL, EventKind  # noqa: F401 (NIC_FATAL: declared in the model)
from gpuhc.model.pci import norm_pci
from gpuhc.sources.kernel_log_grammar import PCI
from gpuhc.sources.kernel_log_incidents import Found
from gpuhc.sources.kernel_log_record import KernelRecord

REPORT_S = 5.0  # a hung-task report's records come within this of its first line
REPORT_LINES = 120  # records one report may hold (stack, lock dump): bounded
HEADER_JOINS_S = 5.0  # health buffer lines this soon after a "Health issue" header are its own
_MAX_FRAMES = 4  # driver frames quoted in the message
_MAX_MODULES = 8
_MAX_MESSAGE = 300
_LOG_ERR = 3  # LOGLEVEL_ERR: the firmware's severity at or below it is an error (health.c)

_HUNG = lazy(r"INFO: task (?P<name>.{1,64}):(?P<pid>\d{1,10}) blocked for more than (?P<s>\d{1,9}) seconds\.")
# x86-64 since 4.x: " sym+0x1e/0x40 [mod]" (a build id may follow the module); before: "[<hex>] sym..."
_FRAME = lazy(r"(?:\[<[0-9a-f]{8,16}>\] )?(?P<guess>\? )?(?P<sym>[\w.$]{1,128})\+0x[0-9a-f]{1,8}/0x[0-9a-f]{1,8}"
              r"(?: \[(?P<mod>\w{1,56})(?: [0-9a-f]{8,64})?\])?")
_HEX_WORDS = lazy(r"(?:[0-9a-f]{8,16} ?){1,8}")
_REPORT_WORDS = ("Tainted:", "Not tainted", '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs"', "task:",
                 "Call Trace:", "<TASK>", "</TASK>", "<IRQ>", "</IRQ>", "Showing all locks held", "lock held by",
                 "locks held by", "#", "RIP:", "RSP:", "RAX:", "RDX:", "RBP:", "R10:", "R13:")

_MLX5 = lazy(r"mlx5_core (?P<pci>" + PCI + r")(?: [\w.-]{1,40})?: (?:\w{1,60}:\d{1,6}:\(pid \d{1,10}\): )?(?P<body>.*)")
_NIC_FORMS = (
    ("miss_count", lazy(r"device's health compromised(?: - reached miss count)?\s*$")),
    ("fatal_error", lazy(r"Fatal error \d{1,10} detected\s*$")),
    ("header", lazy(r"Health issue observed, (?P<what>[^,]{1,60}), severity\((?P<sev>\d{1,2})\) [A-Za-z ]{1,20}:\s*$")),
    # one per buffer dump: print_health_info prints its synd line whenever it prints at all
    ("syndrome", lazy(r"synd 0x[0-9a-fA-F]{1,2}: .{1,60}\s*$")),
    ("recovery_failed", lazy(r"(?:PCI slot is unavailable|health recovery failed|health recovery flow aborted, "
                             r"PCI reads still not working)\s*$")),
    ("cmd_timeout", lazy(r"(?:cmd\[\d{1,3}\]: )?\w{1,60}\(0x[0-9a-fA-F]{1,6}\)(?: Async,)? timeout\. "
                         r"Will cause a leak of a command resource\s*$")),
    ("slot_power", lazy(r"Detected insufficient power on the PCIe slot \(\d{1,4}W\)\.?\s*$")),
    # events.c temp_warn: "%llx %llx"; newer kernels "%#llx %#llx." (a zero word prints "0" in both)
    ("nic_hot", lazy(r"High temperature on sensors with bit set (?:0x)?[0-9a-fA-F]{1,16} (?:0x)?[0-9a-fA-F]{1,16}\.?\s*$")),
)
_WATCHDOG_OLD = lazy(r"NETDEV WATCHDOG: (?P<ifc>[\w.@-]{1,20}) \((?P<drv>[\w-]{1,40})\): transmit queue \d{1,5} "
                     r"timed out(?: \d{1,10} ms)?\s*$")
_WATCHDOG_NEW = lazy(r"(?P<drv>[\w-]{1,40}) (?P<pci>" + PCI + r") (?P<ifc>[\w.@-]{1,20}): NETDEV WATCHDOG: CPU: \d{1,5}: "
                     r"transmit queue \d{1,5} timed out \d{1,10} ms\s*$")


def _clip(msg: str) -> str:
    from gpuhc.sources.kernel_log_parse import sanitize  # the one sanitiser of kernel text

    return sanitize(msg, _MAX_MESSAGE)


class NodeReports:
    """One parse's hung-task and NIC-health events: a record reader of the kernel-log parse
    (:data:`gpuhc.sources.kernel_log_readers.READERS`). It wants every message while a hung-task
    report is open (its stack decides the verdict), else only the messages that start one of its
    forms; ``feed`` returns the event a message starts (a hung-task event is completed by the
    records after it)."""

    words = ("INFO: task ", "mlx5_core ", "NETDEV WATCHDOG: ")

    def wants(self, msg: str) -> bool:
        return self._report is not None or msg.startswith(self.words[:2]) or self.words[2] in msg

    def feed(self, rec: KernelRecord) -> Found | None:
        """Only the kernel's own records (a process's line never opens nor continues a report)."""
        if not rec.kernel:
            return None
        return self.read(rec.text, rec.time, rec.seq, rec.line)

    def __init__(self) -> None:
        self._report: Found | None = None  # the hung-task report still open
        self._lines = 0
        self._modules: list[str] = []
        self._frames: list[str] = []
        self._headers: dict[str, float | None] = {}  # pci -> time of its last "Health issue" header

    def read(self, msg: str, t: float | None, seq: int | None, idx: int) -> Found | None:
        if self._report is not None and not self._continues(msg, t):
            self._report = None
        if msg.startswith("INFO: task "):
            return self._hung(msg, t, seq, idx)
        if msg.startswith("mlx5_core "):
            return self._mlx5(msg, t, seq, idx)
        if "NETDEV WATCHDOG: " in msg:
            return self._watchdog(msg, t, seq, idx)
        return None

    # ------------------------------------------------------------------ hung tasks

    def _hung(self, msg: str, t: float | None, seq: int | None, idx: int) -> Found | None:
        m = _HUNG.match(msg)
        if m is None:
            return None
        self._report = Found(EventKind.HUNG_TASK, t, seq, idx, _clip(msg), code=int(m.group("pid")),
                             device=_clip(m.group("name")), state=None)
        self._lines, self._modules, self._frames = 0, [], []
        return self._report

    def _continues(self, msg: str, t: float | None) -> bool:
        """Is ``msg`` still the open report's? A frame records its module when reliable."""
        rep = self._report
        assert rep is not None
        self._lines += 1
        if self._lines > REPORT_LINES or (t is not None and rep.time is not None and not 0 <= t - rep.time <= REPORT_S):
            return False
        m = _FRAME.fullmatch(msg)
        if m is not None:
            if not m.group("guess"):
                mod = m.group("mod") or "kernel"
                if mod not in self._modules and len(self._modules) < _MAX_MODULES:
                    self._modules.append(mod)
                if m.group("mod") and len(self._frames) < _MAX_FRAMES:
                    self._frames.append(f"{m.group('sym')} [{m.group('mod')}]")
                rep.state = " ".join(sorted(self._modules, key=lambda s: s == "kernel"))
                rep.message = _clip(self._base(rep) + (f"; stack in {', '.join(self._frames)}" if self._frames else ""))
            elif rep.state is None:
                rep.state = "kernel"  # a stack, nothing reliable in it yet
            return True
        if msg.startswith(_REPORT_WORDS) or _HEX_WORDS.fullmatch(msg):
            return True
        # sched_show_task's old line starts with the task's name: the record right after the hint
        return self._lines <= 4 and rep.device is not None and msg.startswith(rep.device[:15])

    @staticmethod
    def _base(rep: Found) -> str:
        at = rep.message.find("; stack in ")
        return rep.message if at < 0 else rep.message[:at]

    # ------------------------------------------------------------------ the NIC

    def _mlx5(self, msg: str, t: float | None, seq: int | None, idx: int) -> Found | None:
        m = _MLX5.match(msg)
        if m is None:
            return None
        pci, body = norm_pci(m.group("pci")), m.group("body")
        for name, rx in _NIC_FORMS:
            hit = rx.match(body)
            if hit is None:
                continue
            if name == "header":
                self._headers[pci] = t
                sev = int(hit.group("sev"))
                name = "health_issue" if sev <= _LOG_ERR else "health_warning"
            elif name == "syndrome" and pci in self._headers and _soon(self._headers[pci], t):
                return None  # the buffer of the issue its header already reported
            return Found(EventKind.NIC_HEALTH, t, seq, idx, _clip(msg), pci=pci, state=name)
        w = _WATCHDOG_NEW.match(msg)
        if w is not None:
            return Found(EventKind.NIC_HEALTH, t, seq, idx, _clip(msg), pci=norm_pci(w.group("pci")),
                         device=w.group("ifc"), state="tx_timeout")
        return None

    def _watchdog(self, msg: str, t: float | None, seq: int | None, idx: int) -> Found | None:
        m = _WATCHDOG_OLD.match(msg) or _WATCHDOG_NEW.match(msg)
        if m is None:
            return None
        pci = m.groupdict().get("pci")
        return Found(EventKind.NIC_HEALTH, t, seq, idx, _clip(msg), pci=norm_pci(pci) if pci else None,
                     device=m.group("ifc"), state="tx_timeout")


def _soon(header: float | None, t: float | None) -> bool:
    if header is None or t is None:
        return True  # untimed lines: the header is the latest one of this function
    return 0.0 <= t - header <= HEADER_JOINS_S
