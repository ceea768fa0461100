"""Turn kernel log text into :class:`gpuhc.model.KernelEvent` s: pure, no I/O, never raises.

The same parser reads every shape a kernel log reaches us in, line by line, so a file may even
mix them (a log someone pasted together from two tools):

==========================  ==================================================  ==============
shape                       example prefix                                      time
==========================  ==================================================  ==============
``/dev/kmsg`` record        ``6,3964,206764307,-;msg``                          since boot
``dmesg``                   ``[  123.456789] msg``                              since boot
``dmesg -T`` (ctime)        ``[Sun Feb 23 16:24:18 2025] msg``                  local time
``dmesg --time-format=iso`` ``2024-11-15T05:39:15,491363+00:00 msg``            epoch
``dmesg --decode``          ``kern  :warn  : `` before any of the above          (as above)
``journalctl -k``/syslog    ``Feb 14 05:03:41 host kernel: msg``                local time
rsyslog / short-iso         ``2024-06-11T10:23:45.123+00:00 host kernel: msg``  epoch
continuation line           indented text with no stamp                         previous line
==========================  ==================================================  ==============

Times. Everything that names a wall-clock time becomes epoch seconds. "Since boot" stamps become
epoch seconds when the caller passes ``boot_time`` (the live sources do); a recorded file has no
boot time, so those stamps are *kept as seconds since boot*: ordering, the cursor and the
windows still work because :attr:`KernelLog.last_time` is in the same scale and a replay judges
"now" by the last line. Checks recognise that scale by its size (< 1e9 s, i.e. before 2001).
Syslog stamps carry no year: the caller's ``year`` is used, else the current one, stepping
back a year when that would put the line more than a day in the future (a December log read in
January). ``dmesg -T`` and syslog stamps are read in the local time zone, as the tools print.

Events (one per incident a human would count, not one per line):

- XID: ``NVRM: Xid (PCI:0000:b3:00): 79, pid=..., ...`` and the legacy ``NVRM: Xid (0000:03:00): 14, ...``.
- SXID (NVSwitch): a report is a header line (``..., Fatal|Non-fatal, Link N ...``) followed by
  ``Severity ...`` and ``Data {...}`` detail lines. Details belong to their header's event; a
  detail whose header is not in the log (cut off) still makes one event. Fatality goes to
  ``state`` (``"fatal"``/``"non-fatal"``, None when the log does not say), the switch name
  (``nvswitch1``) to ``device`` and the link number, when named, to ``port``.
- FALLEN_OFF_BUS: "... has fallen off the bus" without an Xid, possibly spread over several
  lines ("The NVIDIA GPU 0000:18:00.0 / (PCI ID ...) installed in this system has / fallen off
  the bus ..."). Dropped when an Xid 79 or another fallen-off message for the same GPU is
  within a minute: the driver often prints both for one incident.
- IB_LINK: mlx5 ``Port: 1 Link DOWN/ACTIVE/INIT``; also the netdev ``enp83s0f0np0: Link down/up``
  line of the same port when no ``Port:`` line reports that change (a log cut just after it).
  mlx5 gives each PCI function one port, so a netdev line is port 1 of the ``mlx5_N`` that the
  log names for that PCI address (None when it never does).

Lines that look like NVRM Xid, SXid or mlx5 port lines but do not parse are counted in
``unparsed_lines`` so that a new driver's format change shows up instead of hiding.
"""

from __future__ import annotations

import calendar
import re
import time as _time
from dataclasses import dataclass
from typing import Iterable

from gpuhc.model import EventKind, KernelEvent, KernelLog, norm_pci

MAX_MESSAGE = 400  # characters kept of one message: enough to read, bounded for state files
RELATIVE_LIMIT = 1e9  # times below this are seconds since boot, not epoch (see module doc)
SXID_DETAIL_S = 5.0  # an SXid detail line this close to its header belongs to it
FALLEN_SAME_INCIDENT_S = 60.0  # fallen-off-bus messages for one GPU this close are one incident
NETDEV_SAME_CHANGE_S = 2.0  # a netdev Link up/down this close to a Port: line repeats it
CONTEXT_LINES = 3  # a multi-line message names its GPU at most this many lines earlier
UNTIMED_NEAR_LINES = 20  # without times, "close" is measured in lines

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

_PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"

# ---- prefixes
_KMSG = re.compile(r"(\d{1,3}),(\d{1,20}),(\d{1,20}),[^;]{0,40};(.*)", re.S)
_DECODE = re.compile(
    r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?")
_LEVEL = re.compile(r"<\d{1,3}>")
_MONO = re.compile(r"\s*\[?\s*(\d{1,12}\.\d{1,9})\]\s?")  # "[  12.34] " and a cut-off " 12.34] "
_CTIME = re.compile(r"\[(\w{3}) (\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?")
_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\s+")
_SYSLOG = re.compile(r"(\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))? ")
_HOST_PROC = re.compile(r"(\S+) ([^\s:\[]+)(?:\[\d+\])?: ?")
_KMSG_DICT = re.compile(r"\s[A-Z_]+=")

# ---- events
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(" + _PCI + r")\): (\d{1,6})(?:,\s*|\s*$)(.*)")
_SXID = re.compile(r"(?:nvidia-(nvswitch\d+):\s*)?SXid \((?:PCI:)?(" + _PCI + r")\): (\d{1,6})(?:,\s*|\s*$)(.*)")
_SXID_FATALITY = re.compile(r"(Fatal|Non-fatal|Nonfatal|Non fatal)\b", re.I)
_SXID_DETAIL = re.compile(r"(Severity \d|Data \{)")
_LINK_NO = re.compile(r"\bLink (\d{1,4})\b")
_GPU_CTX = re.compile(r"NVRM: (?:The NVIDIA GPU|GPU at|GPU) (?:PCI:)?(" + _PCI + r")")
_ANY_PCI = re.compile(r"(?<![0-9a-fA-F:])(?:PCI:)?(" + _PCI + r")")
_MLX_PORT = re.compile(r"mlx5_core (" + _PCI + r")(?: ([\w.-]+))?: Port: (\d{1,3}) Link ([A-Za-z_]+)")
_MLX_NETDEV = re.compile(r"mlx5_core (" + _PCI + r") ([\w.-]+): Link (up|down)\b")
_CTRL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_KMSG_ESC = re.compile(r"((?:\\x[0-9a-fA-F]{2})+)")


def sanitize(text: str, cap: int = MAX_MESSAGE) -> str:
    """One printable line: tabs to spaces, control characters dropped, length capped.

    Messages end up in drain reasons, JSON reports and terminals; a stray escape sequence from
    a misbehaving driver must not reach any of them."""
    return _CTRL.sub("", text.replace("\t", " ")).strip()[:cap]


@dataclass
class _Found:
    """An event while parsing: the KernelEvent fields plus where it was (line index)."""

    kind: EventKind
    time: float | None
    seq: int | None
    idx: int
    message: str
    pci: str | None = None
    code: int | None = None
    device: str | None = None
    port: int | None = None
    state: str | None = None
    detail: bool = False  # SXid Severity/Data line; IB: a netdev line

    def event(self) -> KernelEvent:
        return KernelEvent(kind=self.kind, time=self.time, message=self.message, pci=self.pci, code=self.code,
                           device=self.device, port=self.port, state=self.state, seq=self.seq)


class _Parser:
    def __init__(self, boot_time: float | None, year: int | None):
        self.boot_time = boot_time
        self.year = year
        self.found: list[_Found] = []
        self.unparsed = 0
        self.idx = 0  # logical line number (kmsg records split into their lines)
        self.prev_time: float | None = None
        self.prev_seq: int | None = None
        self.prev_kernel = True  # was the previous stamped line a kernel message?
        self.prev_kmsg = False
        self.last_time: float | None = None
        self.last_seq: int | None = None
        self.gpu_ctx: tuple[str, int] | None = None  # (pci, line index) of the last GPU named

    # ------------------------------------------------------------------ lines and prefixes

    def feed(self, raw: str) -> None:
        line = raw.rstrip("\r\n")
        if not line.strip():
            return
        m = _KMSG.match(line)
        if m:
            self._kmsg(m)
            return
        if self.prev_kmsg and _KMSG_DICT.match(line):
            return  # kmsg dictionary (" SUBSYSTEM=pci"): metadata, not message text
        self.prev_kmsg = False
        stamped = self._stamped(line)
        if stamped is not None:
            t, kernel, msg = stamped
            self.prev_time, self.prev_seq, self.prev_kernel = t, None, kernel
            if t is not None:
                self.last_time = t
            if kernel:
                self._message(msg, t, None)
            return
        if line[0].isspace():  # continuation of the previous line's message
            if self.prev_kernel:
                self._message(line.strip(), self.prev_time, self.prev_seq)
            return
        self.prev_time, self.prev_seq, self.prev_kernel = None, None, True
        self._message(line, None, None)  # bare text, no stamp at all

    def _kmsg(self, m: re.Match) -> None:
        seq, usec = int(m.group(2)), int(m.group(3))
        t = usec / 1e6 + (self.boot_time or 0.0)
        self.prev_time, self.prev_seq, self.prev_kernel, self.prev_kmsg = t, seq, True, True
        self.last_time, self.last_seq = t, seq
        # Newlines inside one printk come escaped (\x0a), as does any non-ASCII byte.
        for part in _unescape_kmsg(m.group(4)).split("\n"):
            if part.strip():
                self._message(part, t, seq)

    def _stamped(self, line: str) -> tuple[float | None, bool, str] | None:
        """(time, is-a-kernel-message, message) for a line with a known stamp, else None."""
        m = _DECODE.match(line)
        if m:
            line = line[m.end():]
        m = _LEVEL.match(line)
        if m:
            line = line[m.end():]
        if line.startswith("["):
            m = _CTIME.match(line)
            if m:
                return self._ctime(m), True, line[m.end():]
        m = _MONO.match(line)
        if m:
            return self._since_boot(float(m.group(1))), True, line[m.end():]
        m = _ISO.match(line)
        if m:
            t = _iso_time(m)
            rest = line[m.end():]
            hp = _HOST_PROC.match(rest)
            if hp and (hp.group(2) == "kernel" or hp.group(0).rstrip().endswith("]:")):
                return t, hp.group(2) == "kernel", _strip_mono(rest[hp.end():])
            return t, True, rest
        m = _SYSLOG.match(line)
        if m:
            rest = line[m.end():]
            hp = _HOST_PROC.match(rest)
            if hp:
                return self._syslog_time(m), hp.group(2) == "kernel", _strip_mono(rest[hp.end():])
        return None

    def _since_boot(self, seconds: float) -> float:
        return seconds + self.boot_time if self.boot_time is not None else seconds

    def _ctime(self, m: re.Match) -> float | None:
        month = _MONTHS.get(m.group(2))
        if month is None:
            return None
        return _epoch(int(m.group(7)), month, int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)))

    def _syslog_time(self, m: re.Match) -> float | None:
        month = _MONTHS.get(m.group(1))
        if month is None:
            return None
        fields = (month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
        frac = float("0." + m.group(6)) if m.group(6) else 0.0
        if self.year is not None:
            t = _epoch(self.year, *fields)
            return None if t is None else t + frac
        year = _time.localtime().tm_year
        t = _epoch(year, *fields)
        if t is not None and t > _time.time() + 86400:
            t = _epoch(year - 1, *fields)
        return None if t is None else t + frac

    # ------------------------------------------------------------------ messages

    def _message(self, text: str, t: float | None, seq: int | None) -> None:
        self.idx += 1
        if "NVRM" in text:
            self._nvrm(text, t, seq)
        elif "SXid" in text:
            self._sxid(text, t, seq)
        elif "mlx5_core" in text:
            self._mlx5(text, t, seq)
        elif "fallen off the bus" in text:
            self._fallen(text, t, seq)

    def _nvrm(self, text: str, t: float | None, seq: int | None) -> None:
        at = text.find("NVRM:")
        body = text[at:] if at >= 0 else text
        m = _XID.search(body)
        if m:
            self.found.append(_Found(EventKind.XID, t, seq, self.idx, sanitize(body[len("NVRM: "):]),
                                     pci=norm_pci(m.group(1)), code=int(m.group(2))))
            return
        if "Xid" in body and "SXid" not in body:
            self.unparsed += 1
            return
        if "fallen off the bus" in body:
            self._fallen(body, t, seq)
            return
        ctx = _GPU_CTX.search(body)
        if ctx:
            self.gpu_ctx = (norm_pci(ctx.group(1)), self.idx)

    def _fallen(self, text: str, t: float | None, seq: int | None) -> None:
        m = _ANY_PCI.search(text)
        pci = norm_pci(m.group(1)) if m else None
        if pci is None and self.gpu_ctx and self.idx - self.gpu_ctx[1] <= CONTEXT_LINES:
            pci = self.gpu_ctx[0]
        at = text.find("NVRM:")
        msg = text[at + len("NVRM:"):] if at >= 0 else text
        self.found.append(_Found(EventKind.FALLEN_OFF_BUS, t, seq, self.idx, sanitize(msg), pci=pci, code=79))

    def _sxid(self, text: str, t: float | None, seq: int | None) -> None:
        m = _SXID.search(text)
        if not m:
            self.unparsed += 1
            return
        rest = m.group(4)
        fat = _SXID_FATALITY.match(rest)
        state = None
        if fat:
            state = "fatal" if fat.group(1).lower() == "fatal" else "non-fatal"
        link = _LINK_NO.search(rest)
        at = text.find("SXid")
        self.found.append(_Found(EventKind.SXID, t, seq, self.idx, sanitize(text[at:]), pci=norm_pci(m.group(2)),
                                 code=int(m.group(3)), device=m.group(1), port=int(link.group(1)) if link else None,
                                 state=state, detail=fat is None and bool(_SXID_DETAIL.match(rest))))

    def _mlx5(self, text: str, t: float | None, seq: int | None) -> None:
        at = text.find("mlx5_core")
        body = text[at:]
        m = _MLX_PORT.match(body)
        if m:
            dev = m.group(2) if m.group(2) and m.group(2).startswith("mlx5_") else None
            self.found.append(_Found(EventKind.IB_LINK, t, seq, self.idx, sanitize(body), pci=norm_pci(m.group(1)),
                                     device=dev, port=int(m.group(3)), state=m.group(4).upper()))
            return
        m = _MLX_NETDEV.match(body)
        if m:
            state = "ACTIVE" if m.group(3) == "up" else "DOWN"
            self.found.append(_Found(EventKind.IB_LINK, t, seq, self.idx, sanitize(body), pci=norm_pci(m.group(1)),
                                     port=1, state=state, detail=True))
            return
        if "Port:" in body and "Link" in body:
            self.unparsed += 1

    # ------------------------------------------------------------------ incidents

    def finish(self) -> KernelLog:
        found = _merge_sxid_details(self.found)
        found = _merge_fallen(found)
        found = _merge_netdev(found)
        return KernelLog(events=[f.event() for f in found], last_time=self.last_time, last_seq=self.last_seq,
                         unparsed_lines=self.unparsed)


# ---------------------------------------------------------------------- post-passes


def _near(a: _Found, b: _Found, seconds: float) -> bool:
    if a.time is not None and b.time is not None:
        return abs(a.time - b.time) <= seconds
    return abs(a.idx - b.idx) <= UNTIMED_NEAR_LINES


def _merge_sxid_details(found: list[_Found]) -> list[_Found]:
    """Severity/Data lines join their header; a detail with no header nearby becomes the event."""
    headers: dict[tuple, list[_Found]] = {}
    for f in found:
        if f.kind is EventKind.SXID and not f.detail:
            headers.setdefault((f.pci, f.code), []).append(f)
    out: list[_Found] = []
    orphans: dict[tuple, list[_Found]] = {}
    for f in found:
        if f.kind is EventKind.SXID and f.detail:
            key = (f.pci, f.code)
            if any(_near(f, h, SXID_DETAIL_S) for h in headers.get(key, ())):
                continue
            if any(_near(f, o, SXID_DETAIL_S) for o in orphans.get(key, ())):
                continue
            orphans.setdefault(key, []).append(f)
            f.detail = False
        out.append(f)
    return out


def _merge_fallen(found: list[_Found]) -> list[_Found]:
    """One incident per GPU: drop fallen-off messages next to an Xid 79 or an earlier message."""
    xid79 = [f for f in found if f.kind is EventKind.XID and f.code == 79]
    kept: list[_Found] = []
    out: list[_Found] = []
    for f in found:
        if f.kind is EventKind.FALLEN_OFF_BUS:
            same = [g for g in xid79 + kept if f.pci is None or g.pci is None or g.pci == f.pci]
            if any(_near(f, g, FALLEN_SAME_INCIDENT_S) for g in same):
                continue
            kept.append(f)
        out.append(f)
    return out


def _merge_netdev(found: list[_Found]) -> list[_Found]:
    """Keep a netdev Link up/down only when no Port: line tells the same change; name its HCA."""
    ports = [f for f in found if f.kind is EventKind.IB_LINK and not f.detail]
    names = {f.pci: f.device for f in ports if f.device}
    out: list[_Found] = []
    for f in found:
        if f.kind is EventKind.IB_LINK:
            if f.detail:
                twin = [p for p in ports if p.pci == f.pci and p.state == f.state]
                if any(_near(f, p, NETDEV_SAME_CHANGE_S) for p in twin):
                    continue
            if f.device is None:
                f.device = names.get(f.pci)
        out.append(f)
    return out


# ---------------------------------------------------------------------- small helpers


def _unescape_kmsg(text: str) -> str:
    """/dev/kmsg escapes control and non-ASCII bytes as \\xNN; turn them back into text."""
    if "\\x" not in text:
        return text
    parts = _KMSG_ESC.split(text)
    for i in range(1, len(parts), 2):
        raw = bytes(int(h, 16) for h in parts[i].split("\\x")[1:])
        parts[i] = raw.decode("utf-8", "replace")
    return "".join(parts)


def _strip_mono(text: str) -> str:
    """Syslog copies of kernel lines often keep the kernel's own "[  12.34]" stamp: drop it."""
    m = _MONO.match(text) if text.startswith(("[", " ")) else None
    return text[m.end():] if m else text


def _epoch(year: int, month: int, day: int, hh: int, mm: int, ss: int, utc_offset: int | None = None) -> float | None:
    """Epoch seconds of a calendar time (local time when ``utc_offset`` is None); None if invalid."""
    if not (1970 <= year <= 9999 and 1 <= month <= 12 and 1 <= day <= 31 and hh <= 23 and mm <= 59 and ss <= 60):
        return None
    fields = (year, month, day, hh, mm, ss, 0, 0, -1)
    try:
        return float(_time.mktime(fields)) if utc_offset is None else float(calendar.timegm(fields)) - utc_offset
    except (OverflowError, ValueError):
        return None


def _iso_time(m: re.Match) -> float | None:
    tz, offset = m.group(8), None
    if tz == "Z":
        offset = 0
    elif tz:
        digits = tz[1:].replace(":", "")
        offset = (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * (1 if tz[0] == "+" else -1)
    t = _epoch(*(int(m.group(i)) for i in range(1, 7)), utc_offset=offset)
    return None if t is None else t + (float("0." + m.group(7)) if m.group(7) else 0.0)


def parse_lines(lines: Iterable[str], boot_time: float | None = None, year: int | None = None) -> KernelLog:
    """Parse kernel log lines (any shape in the module doc) into a :class:`KernelLog`.

    ``boot_time``: epoch of boot, to turn since-boot stamps into epoch (live sources).
    ``year``: the year of syslog stamps, which print none. ``source``/``boot_id`` are the
    caller's to fill in. Never raises on any text."""
    parser = _Parser(boot_time, year)
    for line in lines:
        parser.feed(line)
    return parser.finish()
