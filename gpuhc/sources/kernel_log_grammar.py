"""The NVIDIA driver's own message grammar, and the kernel lines that carry a process name.
Pure, no I/O, never raises; :mod:`gpuhc.sources.kernel_log_parse` uses it line by line.

Why a strict grammar (docs/security.md, "Kernel log (driver evidence)"): gpuhc drains nodes
on driver evidence, and the kernel log also holds text that users choose. The kernel starts
some of its own lines with a process's name (``comm[pid]: segfault at ...``, ``comm invoked
oom-killer``), and any user may name a process ``NVRM Xid()79``. So a driver event is a line
that *starts* with the driver's own words, exactly as the driver prints them; a name of at most
15 characters cannot spell any of these forms, because each has fixed text longer than that
before its first variable part. The formats are the ones in NVIDIA's open-gpu-kernel-modules
(kernel_rc.c's Xid print, NV_DEV_PRINTF's ``NVRM: GPU dddd:bb:dd.f:`` prefix, osapi.c's
three-line fallen-off-the-bus message, the NVSwitch SXid print, the GSP health check and
CrashCat report), checked against the real lines in tests/fixtures/kernel_log/real/.

A line that names NVRM and an Xid but does not fit the grammar is at most a warning that never
drains (the xid check says why); a line in a process-name form is nothing at all.
"""

from __future__ import annotations

import re

from gpuhc.text.lazyre import lazy

PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
# "NVRM: " then the driver's optional GPU name ("GPU6 ") and the printing function's name, as
# NV_PRINTF writes them: "NVRM: GPU0 kgspHealthCheck_TU102: ..."
_FN = r"NVRM: (?:GPU\d{1,3} )?\w{1,80}: "

# kernel_rc.c: "NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, ..." and the
# older "NVRM: Xid (0000:03:00): 14, ..." of NVIDIA's Xid documentation. The comma is always
# printed (the message may be empty after it).
XID = lazy(r"NVRM: Xid \((?:PCI:)?(" + PCI + r")(?: GPU-I:\d{1,3})?(?: GPU-CI:\d{1,3})?\): (\d{1,6}),")
XID_WORD = lazy(r"\bXid\b")
# common_nvswitch.h: "nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, ..."
SXID = lazy(r"(?:nvidia-(nvswitch\d{1,3}): )?SXid \(PCI:(" + PCI + r")\): (\d{1,6}),\s*(.*)")
SXID_WORD = lazy(r"\bSXid\b")
# The SXid reports (intr_nvswitch.h, error_nvswitch.h) say "Fatal, ", "Non-fatal, " or
# "Correctable, "; the error log's detail lines (error_nvswitch.c) "Severity N ..." with the
# driver's NVSWITCH_ERROR_SEVERITY (0 non-fatal, 1 fatal) and "Data {...}". SOE and firmware
# reports ("SOE HALTED") carry no word: the SXid catalog decides.
_SXID_WORD = lazy(r"(Fatal|Non-fatal|Nonfatal|Non fatal|Correctable)\b", re.I)
_SXID_DETAIL = lazy(r"Severity (\d)|Data \{")
# osapi.c prints three lines in one record (the GPU is named on the first); NV_DEV_PRINTF's
# one-liner after an Xid 79; and the pre-R400 legacy one-liner.
FALLEN = lazy(r"NVRM: (?:fallen off the bus and is not responding to commands\."
              r"|GPU (" + PCI + r"): GPU has fallen off the bus\."
              r"|GPU at (?:PCI:)?(" + PCI + r") has fallen off the bus\.)")
GPU_CTX = lazy(r"NVRM: (?:The NVIDIA GPU|GPU at|GPU) (?:PCI:)?(" + PCI + r")")
DRIVER_GPU = lazy(r"NVRM: (GPU\d{1,3})\b")
# "NVRM: loading NVIDIA UNIX [Open ]Kernel Module for x86_64  575.57.08  Release Build ..." and
# the proprietary "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."
DRIVER_LOADED = lazy(r"NVRM: loading NVIDIA UNIX .{0,40}?Kernel Module (?:for \S{1,20} )?\s*(\d{2,4}\.\d{1,3}(?:\.\d{1,3})?)\b")

# Driver messages that need action without an Xid, first match wins (one line, one signal).
# What each one asks for is data: the ``signals`` section of gpuhc/data/xid_catalog.yaml.
# The assertion wrappers (nvAssertFailedNoLog, nvCheckOkFailedNoLog, ...) print
# "<fn>: Assertion failed: <text>" or "<fn>: Check failed: <text> [NV_ERR_...]".
_CHECK = _FN + r"(?:Assertion|Check) failed: "
SIGNALS: tuple[tuple[str, re.Pattern], ...] = (
    ("gpu_lost", lazy(_CHECK + r"GPU lost from the bus \[NV_ERR_GPU_IS_LOST\]")),
    ("rm_init_failed", lazy(r"NVRM: GPU " + PCI + r": RmInitAdapter failed! \(0x[0-9a-fA-F]{1,8}:0x[0-9a-fA-F]{1,8}:\d{1,8}\)")),
    ("gsp_rpc_timeouts", lazy(_CHECK + r"Back to back GSP RPC timeout detected! GPU marked for reset")),
    ("marked_for_reset", lazy(_FN + r"(?:Assertion failed: )?G[Pp][Uu] marked for reset\b")),
    ("reset_required", lazy(_CHECK + r"Reset required \[NV_ERR_RESET_REQUIRED\]")),
    # kernel_gsp_tu102.c's health check: a banner, then crashcatReportLog's lines
    ("gsp_crashcat", lazy(_FN + r"\*{10,} GSP-CrashCat Report \*{10,}\s*$")),
    # kernel_gsp.c: the GSP-RM or LibOS heartbeat stopped (GSP-RM hung, in the driver's words)
    ("gsp_heartbeat", lazy(_FN + r"(?:Heartbeat timed out, currentTimeMs \d{1,12} |(?:GSP RM|LibOS) heartbeat timed out\s*$)")),
    # crashcat_report_v1_libos3.c prints the watchdog line with no "NVRM:" in front; newer
    # drivers put their own banner over it
    # kernel_rc_watchdog_callback.c (open-gpu-kernel-modules 595.45.04): the channel watchdog's
    # notifier did not come back; the driver then runs its recovery, which logs the Xid 8
    ("rc_watchdog", lazy(_FN + r"RC watchdog: GPU is probably locked!")),
    ("gsp_watchdog", lazy(r"(?:NVRM: (?:GPU\d{1,3} )?)?GSP task watchdog timeout @ pc:0x[0-9a-fA-F]{1,16}, partition:\d{1,3}#\d{1,3}, task:\d{1,3}")),
    # kernel_nvlink_gh100.c and kernel_nvlink.c (595.45.04): NVLink discovery could not learn which
    # links got past receiver detection (the GSP call behind it failed); the GPU's NVLinks stay down
    ("nvlink_post_rx_detect", lazy(r"NVRM: (?:GPU\d{1,3} )?(?:knvlinkDiscoverPostRxDetLinks_\w{1,20}: Getting peer[01]'s "
                                   r"postRxDetLinkMask failed!|knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update "
                                   r"Rx Detect Link mask!)\s*$")),
)
# Words each signal's grammar cannot match without: a line that holds none of its words is not
# that signal, and its pattern need not be compiled (most runs see only healthy NVRM lines, and
# compiling the ten patterns cost each such run about a millisecond; gpuhc/text/lazyre.py).
MARKS: dict[str, tuple[str, ...]] = {
    "gpu_lost": ("GPU lost from the bus",), "rm_init_failed": ("RmInitAdapter failed",),
    "gsp_rpc_timeouts": ("Back to back GSP RPC timeout",), "marked_for_reset": (" marked for reset",),
    "reset_required": ("Reset required",), "gsp_crashcat": ("GSP-CrashCat Report",),
    "gsp_heartbeat": ("eartbeat timed out",), "rc_watchdog": ("RC watchdog: GPU is probably locked!",),
    "gsp_watchdog": ("GSP task watchdog timeout",),
    "nvlink_post_rx_detect": ("postRxDetLinkMask failed!", "Failed to update Rx Detect Link mask!"),
}
# Driver words of a signal, in a line that is not its grammar: a warning, never a drain.
SIGNAL_WORDS = lazy(r"postRxDetLinkMask|fallen off the bus")

# Kernel lines that begin with a process's name (comm, at most 15 characters, anything a user
# likes): segfaults and traps, print-fatal-signals, drop_caches, the OOM killer, allocation
# failures. Their text is the kernel's, their first words are not.
_PROCESS = lazy(r"(?:traps: )?.{1,16}?(?:\[\d{1,10}\][: ]|/\d{1,10}: potentially unexpected fatal signal"
                r"| \(\d{1,10}\): | invoked oom-killer: |: page allocation failure)", re.S)


def is_process_line(msg: str) -> bool:
    """True for a kernel line that starts with a process's name: never driver evidence."""
    return _PROCESS.match(msg) is not None


def driver_signal(msg: str) -> str | None:
    """The name of the driver signal ``msg`` (one message, stripped) is, else None."""
    for name, rx in SIGNALS:
        if any(w in msg for w in MARKS[name]) and rx.match(msg):
            return name
    return None


def sxid_report(rest: str) -> tuple[str | None, bool]:
    """(state, is-a-detail-line) of what follows an SXid's number: the report's own word
    ("fatal"/"non-fatal", None when it has none) and whether it is a detail line, which joins
    its header (kernel_log_incidents)."""
    m = _SXID_WORD.match(rest)
    if m:
        return ("fatal" if m.group(1).lower() == "fatal" else "non-fatal"), False
    m = _SXID_DETAIL.match(rest)
    if m:
        return {"0": "non-fatal", "1": "fatal"}.get(m.group(1) or ""), True
    return None, False


def driver_version(msg: str) -> str | None:
    """The driver version a "loading NVIDIA UNIX ... Kernel Module" line announces."""
    m = DRIVER_LOADED.match(msg)
    return m.group(1) if m else None


# Marks of a kernel record that quotes a process or a file (arch/x86/mm/fault.c's segfault line
# with print_vma_addr's "error N in FILE[...]" and "likely on CPU", traps, print-fatal-signals,
# the OOM killer), anywhere in the record: a name may carry a newline, so the mark may be on
# any of its lines.
_PROCESS_RECORD = lazy(r"\[\d{1,10}\]: (?:segfault|general protection|trap)| error -?[0-9a-f]{1,8} in |likely on CPU \d"
                       r"|potentially unexpected fatal signal|invoked oom-killer|Killed process \d")
# A driver line that quotes a process by name (an Xid's "pid=..., name=..."): its next lines may be the name's.
_NAMES_PROCESS = lazy(r"\bname=")

def record_lines(text: str) -> list[str]:
    """The lines of one kernel record that may be read as the driver's (docs/security.md,
    "Kernel log"). A record is the unit, not a line: a record that quotes a process or a file
    (a segfault's ``comm[pid]:`` and ``error N in FILE``, a trap, the OOM killer) is never driver
    evidence, whichever of its lines the driver's words sit on, since a file or process name may
    hold a newline and then any text. In a driver record, what follows a process name the driver
    quotes (an Xid's ``name=``) is the name's, not the driver's. A record whose first line is not
    the driver's is read for that first line only."""
    parts = [p for p in text.split("\n") if p.strip()]
    if len(parts) < 2:
        return parts
    if _PROCESS_RECORD.search(text) or any(is_process_line(p.strip()) for p in parts):
        return []
    if not parts[0].lstrip().startswith("NVRM:"):
        return parts[:1]
    out = []
    for part in parts:
        out.append(part)
        if _NAMES_PROCESS.search(part):
            break
    return out
