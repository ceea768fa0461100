"""The stamp in front of a kernel log line: which tool printed it, when, and whether it is the
kernel's. Pure, no I/O, never raises; :mod:`gpuhc.sources.kernel_log_parse` reads the rest.

Shapes (``talosctl dmesg`` pads its severity to a column; journal exports are read by
:func:`journal_json` and :class:`JournalExport`, and say who wrote each entry):

==========================  ==================================================  ==============
shape                       example prefix                                      time
==========================  ==================================================  ==============
``/dev/kmsg`` record        ``6,3964,206764307,-;msg``                          since boot
``dmesg``                   ``[  123.456789] msg``                              since boot
``dmesg -T`` (ctime)        ``[Sun Feb 23 16:24:18 2025] msg``                  local time
``dmesg --time-format=iso`` ``2024-11-15T05:39:15,491363+00:00 msg``            epoch
``dmesg --decode``          ``kern  :warn  : `` before any of the above          (as above)
  ``--notime``              ``kern  :warn  : msg``                              none
``journalctl -k``/syslog    ``Feb 14 05:03:41 host kernel: msg``                local time
  without a host name       ``Mar 29 15:38:59 kernel: msg``                     local time
rsyslog / short-iso         ``2024-06-11T10:23:45.123+00:00 host kernel: msg``  epoch
``talosctl dmesg``          ``10.0.0.5: kern: warning: [2026-04-22T21:30:51.5Z]: msg``  epoch
pasted                      ``> [Fri Aug 30 11:43:09 2024] msg``, text before   (its stamp)
continuation line           indented text with no stamp                         previous line
``journalctl -o json``      ``{"_TRANSPORT":"kernel","MESSAGE":"msg",...}``      epoch
``journalctl -o export``    ``__CURSOR=...`` then ``KEY=value`` lines, a blank   epoch
``dmesg -H``/``-wH`` anchor ``[Dec 4 10:00] msg``, ``[Dec14 10:00] msg``         local time
``dmesg -H`` delta          ``[  +0.000844] msg``                               anchor + deltas
``dmesg -r``, RFC 3164      ``<6>[  12.3] msg``, ``<4>Feb 14 05:03:41 h kernel:``  (as above)
RFC 5424 syslog             ``<4>1 2025-02-23T16:24:18Z host kernel - - - msg``  epoch
cut first line              ``un Feb 23 16:24:18 2025] msg`` (``[S`` lost)       (its stamp)
``grep -H``/``-Hn``         ``kern.log.1:12:`` before any shape above            (as above)
==========================  ==================================================  ==============

``dmesg -H`` prints an absolute ``[%b%e %H:%M]`` anchor whenever the minute changes and the
delta to the previous record otherwise (util-linux ``dmesg.c``, ``DMESG_TIMEFTM_RELTIME``): a
line's time is the last anchor plus the deltas since, on the minute the anchor names. Deltas
before any anchor count from the first of them (seconds since the first line, the clock of a
since-boot stamp): :attr:`Stamps.unanchored` counts those lines, and the reader says so. A
syslog priority (``<PRI>``, as ``dmesg -r`` and RFC 3164/5424 write it) gives the facility: only
facility 0 is the kernel's, as in /dev/kmsg; RFC 5424 also needs the app name ``kernel``.

A line pasted from a ticket or an e-mail may carry quote marks or indentation
before its stamp, or unrelated text before the stamp: :meth:`Stamps.embedded` finds the stamp
nearest the driver message in such a line.
"""

from __future__ import annotations

import re
import time as _time
from datetime import date as _date

from gpuhc.text.lazyre import lazy  # patterns compile on first use: most runs need few

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

KMSG = lazy(r"(\d{1,3}),(\d{1,20}),(\d{1,20}),[^;]{0,40};(.*)", re.S)
KMSG_DICT = lazy(r"\s[A-Z_]+=")
_FACILITY = r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])"
_DECODE = lazy("(" + _FACILITY + r")\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?")
_ISO_BODY = r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?"
# talosctl dmesg: "<node>: <facility>: <severity, padded>: [<RFC 3339>]: message"
_TALOS = lazy(r"(?:[\w.:\[\]-]{1,64}: )?(" + _FACILITY + ")"
                    + r"\s*:\s*(?:emerg|alert|crit|err|error|warning|warn|notice|info|debug)\s*:\s*\["
                    + _ISO_BODY + r"\]:?\s?")
_PRI = lazy(r"<(\d{1,3})>")
# RFC 5424: <PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG
_RFC5424 = lazy(r"<(\d{1,3})>1 (?:" + _ISO_BODY + r"|-) \S{1,255} (\S{1,48}) \S{1,128} \S{1,32} "
                r"(?:-|(?:\[(?:[^\]\"\\]|\\.|\"(?:[^\"\\]|\\.)*\")*\])+) ?")
# dmesg -H / --time-format=reltime: "[%b%e %H:%M]" on a new minute, "[  %+8.06f]" otherwise
_REL_ANCHOR = lazy(r"\[([A-Z][a-z]{2}) ?(\d{1,2}) (\d{2}):(\d{2})\]\s?")
_REL_DELTA = lazy(r"\[\s{0,3}\+(\d{1,9}\.\d{1,9})\]\s?")
# a ctime stamp that lost its head (a partial copy): its weekday or "[" gone, the date intact
_CTIME_CUT = lazy(r"(?:\w{1,3} )?(\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?")
_MONO = lazy(r"\s*\[?\s*(\d{1,12}\.\d{1,9})\]\s?")  # "[  12.34] " and a cut-off " 12.34] "
_CTIME = lazy(r"\[(\w{3}) (\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s?")
_ISO = lazy(_ISO_BODY + r"\s+")
_SYSLOG = lazy(r"(\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))? ")
# After a syslog/ISO stamp: "[host ]kernel: msg" is the kernel; "host proc[pid]: msg" and
# "proc[pid]: msg" are programs, "kernel[pid]:" too: the kernel has no pid, and the journal
# prints one for any program that calls itself "kernel" (logger -t kernel). A host name never ends in ':', which tells "NVRM: ..." (a
# kernel message with neither host nor tag, as some collectors write it) from "host proc:".
_KERNEL_TAG = lazy(r"(?:[^\s:]+ )?kernel: ?")
_HOST_PROC = lazy(r"[^\s:]+ ([^\s:\[]+)(?:\[\d+\])?: ?")
_PROC_PID = lazy(r"(?:[^\s:]+ )?[^\s:\[]+\[\d+\]: ?")
# A stamp anywhere in a line (the text before it is not the log's): the shapes above, searched.
_EMBEDDED = (
    lazy(r"\[" + _ISO_BODY + r"\]"),
    lazy(r"(?<![\d:])" + _ISO_BODY + r"(?=[\s\]])"),
    lazy(r"\[?(?:\w{3} )?(\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]"),
    lazy(r"(?<![A-Za-z0-9])([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?= )"),
    lazy(r"\[([A-Z][a-z]{2}) ?(\d{1,2}) (\d{2}):(\d{2})\]|\[\s{0,3}\+(\d{1,9}\.\d{1,9})\]"),
    lazy(r"\[\s*(\d{1,12}\.\d{1,9})\]"),
)
# ``grep -H`` (and ``-n``) in front of a whole line of any shape above: "kern.log.1:", "log:12:".
# Only where a stamp follows at once (a digit, "<", "["): a syslog "Mar 21" is found by _EMBEDDED.
GREP_FILE = lazy(r"[\w./@+-]{1,512}:(?:\d{1,12}:)?(?=[<\d\[])")
QUOTES = " \t>|+#*"  # what a ticket, an e-mail reply or a diff puts before a pasted line


class Stamps:
    """Reads stamps; ``boot_time`` turns since-boot stamps into epoch seconds (live sources),
    ``year`` dates syslog and ``dmesg -H`` stamps, which print none (see :mod:`kernel_log_parse`);
    without it they are dated against ``now`` (a replay's own time; else the clock's).
    Holds the ``dmesg -H`` clock: the time of the last relative line."""

    def __init__(self, boot_time: float | None, year: int | None, now: float | None = None):
        self.boot_time = boot_time
        self.year = year
        self.now = now
        self.rel_time: float | None = None  # dmesg -H: the last line's time
        self.anchored = False  # dmesg -H: an absolute anchor was seen
        self.unanchored = 0  # dmesg -H lines dated from the first line only (no anchor before them)
        # The last line's writer was named by a facility (dmesg --decode, talosctl, a syslog
        # priority): a user-space record, whatever its text holds; a program's syslog tag is not.
        self.facility_named = False

    def stamped(self, line: str) -> tuple[float | None, bool, str] | None:
        """(time, is-a-kernel-message, message) for a line that starts with a known stamp."""
        self.facility_named = False
        m = _TALOS.match(line) if "]:" in line[:140] else None  # cheap test first: most lines are not
        if m:
            self.facility_named = m.group(1) != "kern"
            return _iso_time(m, 1), m.group(1) == "kern", line[m.end():]
        m = _DECODE.match(line)
        facility = "kern"
        if m:
            facility, line = m.group(1), line[m.end():]
        found = self._stamp(line)
        if found is None and m:  # dmesg --decode --notime: the facility and level, no stamp
            found = (None, True, line)
        if found is not None and facility != "kern":  # dmesg --decode names the facility
            self.facility_named = True
            return found[0], False, found[2]
        return found

    def _stamp(self, line: str) -> tuple[float | None, bool, str] | None:
        if line[:1] == "<":
            return self._priority(line)
        if line.startswith("["):
            m = _CTIME.match(line)
            if m:
                return self._ctime(m.groups()[1:]), True, line[m.end():]
            m = _MONO.match(line)
            if m:
                return self.since_boot(float(m.group(1))), True, line[m.end():]
            m = _REL_DELTA.match(line)
            if m:
                return self.relative(None, m.group(1)), True, line[m.end():]
            m = _REL_ANCHOR.match(line)
            if m:
                return self.relative(m.groups(), None), True, line[m.end():]
            return None
        m = _MONO.match(line)  # " 12.34] ": a cut-off "[  12.34] "
        if m:
            return self.since_boot(float(m.group(1))), True, line[m.end():]
        m = _ISO.match(line)
        if m:
            kernel, msg = after_stamp(line[m.end():], strict=False)
            return iso_time(m), kernel, msg
        m = _CTIME_CUT.match(line)
        if m:
            return self._ctime(m.groups()), True, line[m.end():]
        m = _SYSLOG.match(line)
        if m:
            kernel, msg = after_stamp(line[m.end():], strict=True)
            return self._syslog_time(m.groups()), kernel, msg
        return None

    def _priority(self, line: str) -> tuple[float | None, bool, str] | None:
        """A line with a syslog priority: RFC 5424, or ``<PRI>`` before another shape."""
        m = _RFC5424.match(line)
        if m:  # the facility and the app name: both the kernel's, or a program's line
            t = _iso_time(m, 1) if m.group(2) else None
            self.facility_named = int(m.group(1)) >> 3 != 0
            return t, not self.facility_named and m.group(10) == "kernel", line[m.end():]
        m = _PRI.match(line)
        if m is None:
            return None
        found = self._stamp(line[m.end():])
        if found is not None and int(m.group(1)) >> 3 != 0:  # only facility 0 is the kernel's (as in /dev/kmsg)
            self.facility_named = True
            return found[0], False, found[2]
        return found

    def relative(self, anchor: tuple | None, delta: str | None) -> float | None:
        """A ``dmesg -H`` line's time: an anchor's (month, day, hour, minute), else the last
        time plus the ``delta``."""
        if anchor is not None:
            t = self._syslog_time((*anchor, "0", None))
            self.rel_time, self.anchored = t, t is not None
            return t
        if self.rel_time is None:
            self.rel_time, self.anchored = 0.0, False
        self.rel_time += float(delta or 0.0)
        if not self.anchored:
            self.unanchored += 1
        return self.rel_time

    def embedded(self, prefix: str) -> tuple[float | None, int] | None:
        """(time, end) of the stamp nearest the end of ``prefix`` (the text before a driver
        message in a pasted line); time None for a stamp with no usable time; None: no stamp."""
        best: tuple[int, re.Match] | None = None
        for kind, rx in enumerate(_EMBEDDED[:-1]):
            for m in rx.finditer(prefix):
                # nearest the message; of two ending together, the longer (a ctime stamp holds
                # a syslog-looking "Jan  1 00:00:00")
                if best is None or (m.end(), -m.start()) > (best[1].end(), -best[1].start()):
                    best = (kind, m)
        mono = None
        for mono in _EMBEDDED[-1].finditer(prefix, best[1].end() if best else 0):
            pass  # the since-boot stamp nearest the message, after any other
        # "[ 4441.76]" after a wall-clock stamp and the kernel's tag ("host kernel: [ 4441.76]")
        # is the syslog copy of the kernel's own: the wall clock dates it. After a program's tag
        # ("relay fluent-bit[42]: [ 65.3]", a relay's own line around a plain dmesg record) the
        # wall clock is the relay's, and the record's own stamp is the since-boot one.
        if mono is not None and (best is None or not _kernel_between(prefix[best[1].end():mono.start()])):
            best = (len(_EMBEDDED) - 1, mono)
        if best is None:
            return None
        kind, m = best
        if kind <= 1:
            t = iso_time(m)
        elif kind == 2:
            t = self._ctime(m.groups())
        elif kind == 3:
            t = self._syslog_time(m.groups())
        elif kind == 4:
            g = m.groups()
            t = self.relative(g[:4] if g[0] else None, g[4])
        else:
            t = self.since_boot(float(m.group(1)))
        return t, m.end()

    def since_boot(self, seconds: float) -> float:
        return seconds + self.boot_time if self.boot_time is not None else seconds

    def _ctime(self, g: tuple) -> float | None:
        month = _MONTHS.get(g[0])
        if month is None:
            return None
        return epoch(int(g[5]), month, int(g[1]), int(g[2]), int(g[3]), int(g[4]))

    def _syslog_time(self, g: tuple) -> float | None:
        month = _MONTHS.get(g[0])
        if month is None:
            return None
        fields = (month, int(g[1]), int(g[2]), int(g[3]), int(g[4]))
        frac = float("0." + g[5]) if g[5] else 0.0
        if self.year is not None:
            t = epoch(self.year, *fields)
            return None if t is None else t + frac
        ref = self.now if self.now is not None else _time.time()
        year = _time.localtime(ref).tm_year
        t = epoch(year, *fields)
        if t is not None and t > ref + 86400:
            t = epoch(year - 1, *fields)
        return None if t is None else t + frac


def _kernel_between(text: str) -> bool:
    """Whether the text between a wall-clock stamp and a since-boot one is the kernel's own
    syslog tag (or nothing but punctuation): the two stamps are one record's."""
    text = text.lstrip(" :]")
    return not text.strip() or _KERNEL_TAG.fullmatch(text.rstrip() + " ") is not None


def after_stamp(rest: str, strict: bool) -> tuple[bool, str]:
    """(is-the-kernel, message) for the text after a syslog (``strict``) or ISO stamp.

    An ISO stamp is also ``dmesg --time-format=iso``'s, whose messages often read like
    "host proc:" ("mlx5_core 0000:5e:00.0: ..."): there only "proc[pid]:" marks a program."""
    m = _KERNEL_TAG.match(rest)
    if m:
        return True, strip_mono(rest[m.end():])
    if _PROC_PID.match(rest):
        return False, rest
    if strict:
        hp = _HOST_PROC.match(rest)
        if hp:
            return False, rest
    return True, strip_mono(rest)


def strip_mono(text: str) -> str:
    """Syslog copies of kernel lines often keep the kernel's own "[  12.34]" stamp: drop it."""
    m = _MONO.match(text) if text.startswith(("[", " ")) else None
    return text[m.end():] if m else text


def unescape_kmsg(text: str) -> str:
    """/dev/kmsg escapes control and non-ASCII bytes as \\xNN; turn them back into text."""
    if "\\x" not in text:
        return text
    parts = _KMSG_ESC.split(text)
    for i in range(1, len(parts), 2):
        raw = bytes(int(h, 16) for h in parts[i].split("\\x")[1:])
        parts[i] = raw.decode("utf-8", "replace")
    return "".join(parts)


_KMSG_ESC = lazy(r"((?:\\x[0-9a-fA-F]{2})+)")


def epoch(year: int, month: int, day: int, hh: int, mm: int, ss: int, utc_offset: int | None = None) -> float | None:
    """Epoch seconds of a calendar time (local time when ``utc_offset`` is None); None if invalid."""
    if not (1970 <= year <= 9999 and 1 <= month <= 12 and 1 <= day <= 31 and hh <= 23 and mm <= 59 and ss <= 60):
        return None
    fields = (year, month, day, hh, mm, ss, 0, 0, -1)
    try:
        return float(_time.mktime(fields)) if utc_offset is None else float(_timegm(fields)) - utc_offset
    except (OverflowError, ValueError):
        return None


_EPOCH_ORDINAL = _date(1970, 1, 1).toordinal()


def _timegm(fields: tuple) -> int:
    """``calendar.timegm``, the same sum: importing calendar (and locale with it) cost every
    run about 2 ms, for one line of arithmetic."""
    year, month, day, hh, mm, ss = fields[:6]
    days = _date(year, month, 1).toordinal() - _EPOCH_ORDINAL + day - 1
    return ((days * 24 + hh) * 60 + mm) * 60 + ss


def iso_time(m: re.Match) -> float | None:
    """Epoch of a match whose groups 1-8 are _ISO_BODY's."""
    return _iso_time(m, 0)


# The epoch of a stamp's whole second and zone: a log has hundreds of lines in one second, and
# the calendar sum is the reader's dearest step per line. Bounded: cleared when full.
_SECONDS: dict[tuple, float | None] = {}
_SECONDS_MAX = 4096


def _iso_time(m: re.Match, skip: int) -> float | None:
    """Epoch of a match whose groups skip+1 .. skip+8 are _ISO_BODY's."""
    g = m.groups()[skip:skip + 8]
    key = (*g[:6], g[7])
    if key in _SECONDS:
        t = _SECONDS[key]
    else:
        tz, offset = g[7], None
        if tz == "Z":
            offset = 0
        elif tz:
            digits = tz[1:].replace(":", "")
            offset = (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * (1 if tz[0] == "+" else -1)
        t = epoch(*(int(x) for x in g[:6]), utc_offset=offset)
        if len(_SECONDS) >= _SECONDS_MAX:
            _SECONDS.clear()
        _SECONDS[key] = t
    return None if t is None else t + (float("0." + g[6]) if g[6] else 0.0)
