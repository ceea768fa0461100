"""The kernel's own words about the node around the GPUs: PCIe AER reports, machine checks and
EDAC memory errors, mlx5 cable (module) events. Pure, no I/O, never raises.

:mod:`gpuhc.sources.kernel_log_parse` hands every kernel message to :meth:`HostLines.feed` once
(a :class:`~gpuhc.sources.kernel_log_record.RecordReader`), after its record rules (only kernel records, never a line that starts with a process's name:
docs/security.md, "Kernel log"), so these lines obey the same rules as the driver's. Each form
below is the kernel's printk format, matched exactly from its start; anything else is nothing.

AER (``drivers/pci/pcie/aer.c`` and ``err.c``; the device prefix is ``dev_printk``'s
``<driver> <dddd:bb:dd.f>: ``, then ``AER: ``):

- ``[Multiple ]<severity> error message received from <pci>`` (and the pre-6.x ``... error
  received: <pci>``), printed by the port that took the message: one report. ``state`` is
  ``corrected``, ``nonfatal`` or ``fatal``; ``pci`` the device named as the source; ``device``
  the printing device's ``<driver> <pci>``. Severity words are both spellings the kernel has
  used (``Corrected``/``Correctable``, ``Uncorrected``/``Uncorrectable``).
- ``PCIe Bus Error: severity=<severity>, ...`` on the device itself: the same error's detail.
  It is its own event only when no report of that severity came within
  :data:`DETAIL_JOINS_S` before it (a log cut just after the report line, or firmware-first
  reporting that prints no report line).
- ``AER: device recovery failed`` (the port) and ``AER: can't recover (no error_detected
  callback)`` (a driver with no error handler: the nvidia driver registers none, issue 1229 of
  NVIDIA/open-gpu-kernel-modules): ``state`` ``recovery_failed``, ``pci`` the printing device.

Machine checks (``arch/x86/kernel/cpu/mce/core.c``, ``drivers/edac/edac_mc.c``, ``mm/memory-failure.c``,
``drivers/firmware/efi/cper.c`` through ``drivers/acpi/apei/ghes.c``):

- ``EDAC MC<n>: <count> CE|UE ...``: ``state`` ``corrected``/``uncorrected``, ``code`` the count,
  ``device`` ``MC<n>``.
- ``mce: [Hardware Error]: CPU <n>: Machine Check[ Exception]: <mcgstatus> Bank <b>: <status>``:
  the bank's MCi_STATUS decides: bit 61 (UC) set is ``uncorrected``, else ``corrected``
  (Intel SDM vol. 3B, "IA32_MCi_STATUS"; AMD's MCA_STATUS has UC at the same bit).
- ``mce: [Hardware Error]: Machine check events logged``: ``logged`` (the kernel saw records; the
  EDAC lines or the sysfs counters say what they were).
- ``mce: Uncorrected hardware memory error in user-access at <addr>`` and ``Memory failure:
  0x<pfn>: ...`` (a poisoned page taken out): ``uncorrected``, ``device`` ``memory``.
- ``{n}[Hardware Error]: event severity: fatal|recoverable|corrected`` (firmware-first, APEI
  GHES): ``uncorrected`` for the first two, ``corrected`` for the last; ``device`` ``GHES``.

mlx5 cable events (``drivers/net/ethernet/mellanox/mlx5/core/events.c``):
``mlx5_core <pci>: [<fn>:<line>:(pid <n>): ]Port module event[error]: module <m>, <status>[, <error>]``:
``state`` the status (``Cable plugged``, ``Cable unplugged``, ``Cable error``), ``pci`` the
HCA function, ``port`` the module number, the error words in the message.
"""

from __future__ import annotations

from gpuhc.text.lazyre import lazy
from gpuhc.model.kernel import EventKind
from gpuhc.model.pci import norm_pci
from gpuhc.sources.kernel_log_grammar import PCI
from gpuhc.sources.kernel_log_record import Found, KernelRecord, sanitize

DETAIL_JOINS_S = 2.0  # a "PCIe Bus Error" line this soon after a report of its severity is its detail
_MAX_MESSAGE = 300

# dev_printk's prefix: the bound driver's name (or the bus's: "pci"), a space, the device
_DEV = r"(?P<drv>[\w.-]{1,40}) (?P<dev>" + PCI + r"): "
_SEVERITY = r"(?P<sev>Corrected|Correctable|Uncorrected \(Non-Fatal\)|Uncorrectable \(Non-Fatal\)|Uncorrected \(Fatal\)|Uncorrectable \(Fatal\))"
_AER_REPORT = lazy(_DEV + r"AER: (?:Multiple )?" + _SEVERITY + r" error (?:message received from|received:) (?P<src>" + PCI + r")\b")
_AER_DETAIL = lazy(_DEV + r"(?:AER: )?PCIe Bus Error: severity=" + _SEVERITY + r"\s*(?:,|$)")
_AER_FAILED = lazy(_DEV + r"AER: (?:device recovery failed|can't recover \(no error_detected callback\))\s*$")
_EDAC = lazy(r"EDAC MC(?P<mc>\d{1,4}): (?P<n>\d{1,9}) (?P<kind>CE|UE) ")
_MCE_BANK = lazy(r"mce: \[Hardware Error\]: CPU (?P<cpu>\d{1,5}): Machine Check(?: Exception)?: [0-9a-fA-F]{1,16} "
                 r"Bank (?P<bank>\d{1,3}): (?P<status>[0-9a-fA-F]{16})\b")
_MCE_LOGGED = lazy(r"mce: \[Hardware Error\]: Machine check events logged\s*$")
_MCE_USER = lazy(r"mce: Uncorrected hardware memory error in user-access at [0-9a-fA-F]{1,16}\b")
_MEMORY_FAILURE = lazy(r"Memory failure: 0x[0-9a-fA-F]{1,16}: ")
_GHES = lazy(r"\{\d{1,6}\}\[Hardware Error\]: event severity: (?P<sev>fatal|recoverable|corrected)\s*$")
_MODULE = lazy(r"mlx5_core (?P<dev>" + PCI + r")(?: [\w.-]{1,40})?: (?:\w{1,60}:\d{1,6}:\(pid \d{1,10}\): )?"
               r"Port module event(?:\[error\])?: module (?P<m>\d{1,4}), (?P<status>Cable plugged|Cable unplugged|Cable error)"
               r"(?:, (?P<err>[^\x00-\x1f]{1,80}))?\s*$")
_UC_BIT = 1 << 61

# Cheap words one of the forms above must contain: most kernel lines hold none of them.
_WORDS = ("AER", "PCIe Bus Error", "EDAC", "mce:", "Memory failure", "[Hardware Error]", "Port module event")


def _severity(word: str) -> str:
    if word.startswith("Correct"):
        return "corrected"
    return "fatal" if "(Fatal)" in word else "nonfatal"


def _clip(msg: str) -> str:
    return sanitize(msg, _MAX_MESSAGE)


class HostLines:
    """One parse's host events. ``feed`` returns the event a kernel message is, or None."""

    words = _WORDS

    def __init__(self) -> None:
        self._reports: list[tuple[float | None, int, str]] = []  # (time, line index, severity) of AER reports

    @staticmethod
    def wants(msg: str) -> bool:
        """Cheap first test: does ``msg`` hold a word one of the forms needs?"""
        return any(w in msg for w in _WORDS)

    def feed(self, rec: KernelRecord) -> Found | None:
        """The event kernel message ``rec`` is (one of :meth:`wants`'s), or None."""
        if not rec.kernel:
            return None
        msg, t, seq, idx = rec.text, rec.time, rec.seq, rec.line
        if "AER" in msg or "PCIe Bus Error" in msg:
            return self._aer(msg, t, seq, idx)
        if msg.startswith("mlx5_core"):
            m = _MODULE.match(msg)
            if m is None:
                return None
            return Found(EventKind.IB_MODULE, t, seq, idx, _clip(msg), pci=norm_pci(m.group("dev")),
                         port=int(m.group("m")), state=m.group("status"))
        return self._mce(msg, t, seq, idx)

    def _aer(self, msg: str, t: float | None, seq: int | None, idx: int) -> Found | None:
        m = _AER_REPORT.match(msg)
        if m:
            sev = _severity(m.group("sev"))
            self._reports.append((t, idx, sev))
            del self._reports[:-16]
            return Found(EventKind.AER, t, seq, idx, _clip(msg), pci=norm_pci(m.group("src")),
                         device=f"{m.group('drv')} {norm_pci(m.group('dev'))}", state=sev)
        m = _AER_DETAIL.match(msg)
        if m:
            sev = _severity(m.group("sev"))
            if any(s == sev and _soon_after(r, ri, t, idx) for r, ri, s in self._reports):
                return None
            pci = norm_pci(m.group("dev"))
            return Found(EventKind.AER, t, seq, idx, _clip(msg), pci=pci, device=f"{m.group('drv')} {pci}", state=sev)
        m = _AER_FAILED.match(msg)
        if m:
            pci = norm_pci(m.group("dev"))
            return Found(EventKind.AER, t, seq, idx, _clip(msg), pci=pci, device=f"{m.group('drv')} {pci}",
                         state="recovery_failed")
        return None

    def _mce(self, msg: str, t: float | None, seq: int | None, idx: int) -> Found | None:
        m = _EDAC.match(msg)
        if m:
            state = "uncorrected" if m.group("kind") == "UE" else "corrected"
            return Found(EventKind.MCE, t, seq, idx, _clip(msg), code=int(m.group("n")), device=f"MC{m.group('mc')}",
                         state=state)
        m = _MCE_BANK.match(msg)
        if m:
            state = "uncorrected" if int(m.group("status"), 16) & _UC_BIT else "corrected"
            return Found(EventKind.MCE, t, seq, idx, _clip(msg), code=1, device=f"CPU{m.group('cpu')}", state=state)
        if _MCE_LOGGED.match(msg):
            return Found(EventKind.MCE, t, seq, idx, _clip(msg), code=1, state="logged")
        if _MCE_USER.match(msg) or _MEMORY_FAILURE.match(msg):
            return Found(EventKind.MCE, t, seq, idx, _clip(msg), code=1, device="memory", state="uncorrected")
        m = _GHES.match(msg)
        if m:
            state = "corrected" if m.group("sev") == "corrected" else "uncorrected"
            return Found(EventKind.MCE, t, seq, idx, _clip(msg), code=1, device="GHES", state=state)
        return None


def _soon_after(rt: float | None, ridx: int, t: float | None, idx: int) -> bool:
    if rt is not None and t is not None:
        return 0.0 <= t - rt <= DETAIL_JOINS_S
    return 0 <= idx - ridx <= 20

