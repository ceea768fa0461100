"""A recorded kernel log file, read from its end, as far back as the judging window needs.

A recording is attached to a ticket or copied off a node: anyone may have written it, it may be
a month of syslog, a symlink to ``/dev/zero`` or a FIFO. It is opened through
:mod:`gpuhc.files.untrusted` (no symlink, regular files only) and read in two parts, both bounded:

1. the last :data:`TAIL_BYTES` whole, every line kept (a kernel ring buffer is a few MiB);
2. when that does not reach back :data:`COVER_S` before the log's latest time, the file is
   scanned further back, up to :data:`SCAN_BYTES`, keeping only the lines that name a driver
   event (NVRM, SXid, mlx5_core, "fallen off the bus"), :data:`KEPT_BYTES` of them at most. A
   flood of other messages, or one 33 MB line, between an Xid and the end of the file no
   longer hides the Xid. A line longer than :data:`MAX_LINE` is skipped, not buffered.

What could not be read is said, never silent: the :class:`~gpuhc.model.kernel.KernelLog` carries
``covered_from`` (the oldest time the read reached, None when it read the whole file) and
``partial`` (what was left out); the xid check warns when that leaves part of its window unseen.
"""

from __future__ import annotations

import os
import re

from gpuhc.text.limits import RELATIVE_LIMIT
from gpuhc.sources.kernel_log_parse import parse_lines
from gpuhc.sources.kernel_log_journal import export_entries
from gpuhc.sources.kernel_log_prefix import Stamps
from gpuhc.files.untrusted import open_regular

MiB = 1 << 20
TAIL_BYTES = 32 * MiB  # kept whole: the parser reads ~6 MiB/s, a ring buffer is a few MiB
SCAN_BYTES = 1024 * MiB  # scanned beyond the tail, at C speed, for driver lines
KEPT_BYTES = 16 * MiB  # driver lines kept from the scan
MAX_LINE = 1 * MiB  # a longer "line" (binary junk, a runaway printk) is skipped
COVER_S = 7 * 86400.0  # how far back to reach: every check's default window fits in it
CHUNK = 8 * MiB
PROBE_LINES = 200  # lines read for their stamps at each end of a region
_DRIVER_WORD = re.compile(rb"NVRM|SXid|mlx5_core|fallen off the bus|GSP task watchdog")


def read_file(path: str, year: int | None = None):
    """Parse the recorded kernel log at ``path`` (see the module doc) into a KernelLog."""
    fd = open_regular(path, "kernel log")
    try:
        lines, covered_from, partial = _read(fd, year)
    finally:
        os.close(fd)
    log = parse_lines(lines, year=year)
    log.source = path
    log.covered_from, log.partial = covered_from, partial
    return log


def tail_bytes(path: str, limit: int) -> bytes:
    """The newest whole lines of the recorded kernel log at ``path``, at most ``limit`` bytes."""
    from gpuhc.files.untrusted import read_tail

    return read_tail(path, limit, "kernel log")[0]


def _read(fd: int, year: int | None) -> tuple[list[str], float | None, str]:
    """(lines, covered_from, partial): see the module doc."""
    size = os.fstat(fd).st_size
    if size <= TAIL_BYTES:
        data = _pread_all(fd, 0, size)
        entries = export_entries(data)  # journalctl -o export: read by its length-prefixed fields
        return (entries if entries is not None else _decode(data).split("\n")), None, ""
    start = size - TAIL_BYTES
    tail = _pread_all(fd, start, TAIL_BYTES)
    cut = tail.find(b"\n")
    start, tail = (start + cut + 1, tail[cut + 1:]) if cut >= 0 else (size, b"")
    tail_lines = _decode(tail).split("\n")
    stamps = Stamps(None, year)
    latest = _latest(stamps, tail_lines[-PROBE_LINES:])
    oldest = _oldest(stamps, tail_lines[:PROBE_LINES])
    older, covered_from, why, complete = _scan_back(fd, start, stamps, latest, oldest)
    partial = "" if complete else f"{_mib(size)} file: its last {_mib(size - start)} read whole, {why}"
    return [_decode(b) for b in older] + tail_lines, covered_from, partial


def _scan_back(fd: int, end: int, stamps: Stamps, latest: float | None,
               oldest: float | None) -> tuple[list[bytes], float | None, str, bool]:
    """(driver lines before byte ``end``, newest last; the oldest time reached; what was done;
    whether every driver line was read). Stops once the oldest time is ``COVER_S`` before
    ``latest``, at the start of the file, or at a budget."""
    found: list[list[bytes]] = []
    kept = scanned = skipped = 0
    carry = b""  # the end part of a line whose beginning lies further back
    skipping = False  # inside a line longer than MAX_LINE: drop it up to its start
    pos = end
    while pos > 0 and not _covered(oldest, latest):
        if scanned >= SCAN_BYTES:
            return _joined(found), oldest, f"{_mib(scanned)} before it scanned for driver lines, then no more", False
        n = min(CHUNK, pos)
        pos -= n
        scanned += n
        block = _pread_all(fd, pos, n) + carry
        if skipping:
            nl = block.rfind(b"\n")
            if nl < 0:
                carry = b""
                continue
            block, skipping = block[:nl], False
        nl = block.find(b"\n") if pos > 0 else -1
        carry, body = (block[:nl], block[nl + 1:]) if nl >= 0 else ((block, b"") if pos > 0 else (b"", block))
        if len(carry) > MAX_LINE:
            carry, skipping, skipped = b"", True, skipped + 1
        lines = _driver_lines(body)
        kept += sum(len(x) + 1 for x in lines)
        if kept > KEPT_BYTES:
            return (_joined(found), oldest,
                    f"{_mib(scanned)} before it scanned, {_mib(KEPT_BYTES)} of driver lines kept, then no more", False)
        found.append(lines)
        t = _oldest(stamps, _decode(body[:65536]).split("\n")[:PROBE_LINES])
        oldest = t if t is not None and (oldest is None or t < oldest) else oldest
    if pos == 0:
        return _joined(found), None, "the rest scanned for driver lines", True
    return _joined(found), oldest, f"{_mib(scanned)} before it scanned for driver lines{_skipped(skipped)}", False


def _driver_lines(body: bytes) -> list[bytes]:
    """The lines of ``body`` that name a driver event. The words are found at C speed and
    widened to their lines (a regex matching the whole line backtracks quadratically)."""
    out: list[bytes] = []
    taken = -1  # end of the last line taken: a second word on it is the same line
    for m in _DRIVER_WORD.finditer(body):
        if m.start() < taken:
            continue
        start = body.rfind(b"\n", 0, m.start()) + 1
        end = body.find(b"\n", m.end())
        end = len(body) if end < 0 else end
        if end - start <= MAX_LINE:
            out.append(body[start:end])
        taken = end
    return out


def _joined(found: list[list[bytes]]) -> list[bytes]:
    return [x for chunk in reversed(found) for x in chunk]


def _covered(oldest: float | None, latest: float | None) -> bool:
    if oldest is None or latest is None:
        return False
    if (oldest < RELATIVE_LIMIT) != (latest < RELATIVE_LIMIT):
        return False  # two clocks (a file pasted from two tools): no telling, read on
    return oldest <= latest - COVER_S


def _oldest(stamps: Stamps, lines: list[str]) -> float | None:
    for line in lines:
        got = stamps.stamped(line) if line else None
        if got is not None and got[0] is not None:
            return got[0]
    return None


def _latest(stamps: Stamps, lines: list[str]) -> float | None:
    times = [got[0] for got in map(stamps.stamped, filter(None, lines)) if got is not None and got[0] is not None]
    return max(times, default=None)


def _pread_all(fd: int, offset: int, n: int) -> bytes:
    from gpuhc.files.untrusted import read_upto

    return read_upto(fd, n, offset)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB"


def _skipped(n: int) -> str:
    return f"; skipped {n} line(s) over {_mib(MAX_LINE)}" if n else ""
