"""What the xid check says about the kernel log read itself, beside its verdicts on events:
lines it could not read, stamps it could not date, records lost or left out. Each is a WARN
that never drains (a worse read is never evidence against the node), and each says what a
person can do about it (docs/checks.md, "xid").

A recording (``--kernel-log``, a ticket's paste) is judged once, so everything it holds is said.
On a live node a count is said when it grows past what the previous run saw (the window's
cursor), so one odd line does not repeat on every run.
"""

from __future__ import annotations

import time

from gpuhc.checks.base import result
from gpuhc.checks.kernel_window import EventWindow
from gpuhc.model.kernel import KernelLog
from gpuhc.model.result import Result, Status


def read_notes(check_id: str, klog: KernelLog, win: EventWindow, window_s: float) -> list[Result]:
    """The WARNs about this run's read of ``klog`` (none when it was read whole and clean)."""
    out: list[Result] = []
    grew = win.grew("unparsed", klog.unparsed_lines)
    if grew:
        first = f'; first: "{klog.unparsed_example}"' if klog.unparsed_example else ""
        out.append(result(check_id, Status.WARN, f"{grew} kernel log line(s) name a driver event (NVRM Xid, SXid or "
                          f"mlx5 port) but are not the driver's exact grammar, so they never drain (a new "
                          f"driver format, or text edited by hand: check by hand){first}",
                          value=klog.unparsed_lines))
    unread = win.grew("unread", klog.unread_lines)
    if unread:
        where = f"line {klog.unread_first_line}" + (" of the part read" if klog.partial else "")
        out.append(result(check_id, Status.WARN, f"{unread} kernel log line(s) carry no stamp gpuhc can read, in a "
                          f"log whose other lines have one (first: {where}; a line cut by a partial copy, or text "
                          "typed in): read for the driver's exact words only, undated, and they hide nothing "
                          "after them", value={"unread_lines": klog.unread_lines,
                                               "unread_first_line": klog.unread_first_line}))
    if klog.relative_unanchored:  # dmesg -H with no absolute anchor (kernel_log_prefix)
        out.append(result(check_id, Status.WARN, f"{klog.relative_unanchored} kernel log line(s) carry only dmesg -H "
                          "relative stamps with no absolute [date] anchor before them: dated from the log's first "
                          "line and judged as recent (paste the lines from the last [date] anchor on, or use "
                          "dmesg -T, to date them)", value=klog.relative_unanchored))
    lost = win.lost()
    if lost:
        out.append(result(check_id, Status.WARN, f"{lost} kernel log record(s) were lost before gpuhc read them "
                          f"({klog.source}: a gap in the record sequence numbers; a flood of kernel lines "
                          "overwrote them in the ring buffer), so an Xid among them was not seen: check the "
                          "node's other logs by hand", value=lost))
    unseen = _unseen(klog, win, window_s)
    if unseen:
        out.append(result(check_id, Status.WARN, unseen, value=klog.covered_from))
    return out


def _unseen(klog: KernelLog, win: EventWindow, window_s: float) -> str | None:
    """Why part of the window went unread in a recording too big to read whole, or None."""
    if not klog.partial:
        return None
    t = klog.covered_from
    if t is not None and t <= win.now_for(t) - window_s:
        return None  # read back past the start of the window: nothing in it was missed
    reach = f"back to {when(t)} only" if t is not None else "with no time to tell how far back"
    return (f"kernel log {klog.source} is too big to read whole ({klog.partial}); the read reaches {reach}, "
            f"so Xids earlier in the {window_s / 3600:g}h window were not seen")


def when(t: float) -> str:
    """A kernel-log time in words: seconds after boot, or a UTC date."""
    if t < 1e9:
        return f"{t:.0f} s after boot"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
