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
``journalctl -k``/syslog    ``Feb 14 05:03:41 host kernel: msg``                local time
  without a host name       ``Mar 29 15:38:59 kernel: msg``                     local time
rsyslog / short-iso         ``2024-06-11T10:23:45.123+00:00 host kernel: msg``  epoch
``talosctl dmesg``          ``10.0.0.5: kern: warning: [2026-04-22T21:30:51.5Z]: msg``  epoch
pasted                      ``> [Fri Aug 30 11:43:09 2024] msg``, text before   (its stamp)
continuation line           indented text with no stamp                         previous line
``journalctl -o json``      ``{"_TRANSPORT":"kernel","MESSAGE":"msg",...}``      epoch
``journalctl -o export``    ``__CURSOR=...`` then ``KEY=value`` lines, a blank   epoch
==========================  ==================================================  ==============

A line pasted from a ticket or an e-mail may carry quote marks or indentation
before its stamp, or unrelated text before the stamp: :meth:`Stamps.embedded` finds the stamp
nearest the driver message in such a line.
"""

from __future__ import annotations

import calendar
import re
import time as _time

from gpuhc.lazyre import lazy  # patterns compile on first use: most runs need few

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
_LEVEL = lazy(r"<\d{1,3}>")
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
    lazy(r"\[(\w{3}) (\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]"),
    lazy(r"\b(\w{3}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?= )"),
    lazy(r"\[\s*(\d{1,12}\.\d{1,9})\]"),
)
QUOTES = " \t>|+#*"  # what a ticket, an e-mail reply or a diff puts before a pasted line


class Stamps:
    """Reads stamps; ``boot_time`` turns since-boot stamps into epoch seconds (live sources),
    ``year`` dates syslog stamps, which print none (see :mod:`kernel_log_parse`)."""

    def __init__(self, boot_time: float | None, year: int | None):
        self.boot_time = boot_time
        self.year = year

    def stamped(self, line: str) -> tuple[float | None, bool, str] | None:
        """(time, is-a-kernel-message, message) for a line that starts with a known stamp."""
        m = _TALOS.match(line) if "]:" in line[:140] else None  # cheap test first: most lines are not
        if m:
            return _iso_time(m, 1), m.group(1) == "kern", line[m.end():]
        m = _DECODE.match(line)
        facility = "kern"
        if m:
            facility, line = m.group(1), line[m.end():]
        found = self._stamp(line)
        if found is not None and facility != "kern":  # dmesg --decode names the facility
            return found[0], False, found[2]
        return found

    def _stamp(self, line: str) -> tuple[float | None, bool, str] | None:
        m = _LEVEL.match(line)
        if m:
            line = line[m.end():]
        if line.startswith("["):
            m = _CTIME.match(line)
            if m:
                return self._ctime(m.groups()[1:]), True, line[m.end():]
        m = _MONO.match(line)
        if m:
            return self.since_boot(float(m.group(1))), True, line[m.end():]
        m = _ISO.match(line)
        if m:
            kernel, msg = after_stamp(line[m.end():], strict=False)
            return iso_time(m), kernel, msg
        m = _SYSLOG.match(line)
        if m:
            kernel, msg = after_stamp(line[m.end():], strict=True)
            return self._syslog_time(m.groups()), kernel, msg
        return None

    def embedded(self, prefix: str) -> tuple[float | None, int] | None:
        """(time, end) of the stamp nearest the end of ``prefix`` (the text before a driver
        message in a pasted line); time None for a stamp with no usable time; None: no stamp."""
        best: tuple[int, re.Match] | None = None
        for kind, rx in enumerate(_EMBEDDED):
            if kind == len(_EMBEDDED) - 1 and best is not None:
                break  # "[ 4441.76]" after a wall-clock stamp is the syslog copy of the kernel's own
            for m in rx.finditer(prefix):
                # nearest the message; of two ending together, the longer (a ctime stamp holds
                # a syslog-looking "Jan  1 00:00:00")
                if best is None or (m.end(), -m.start()) > (best[1].end(), -best[1].start()):
                    best = (kind, m)
        if best is None:
            return None
        kind, m = best
        if kind <= 1:
            t = iso_time(m)
        elif kind == 2:
            t = self._ctime(m.groups()[1:])
        elif kind == 3:
            t = self._syslog_time(m.groups())
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
        year = _time.localtime().tm_year
        t = epoch(year, *fields)
        if t is not None and t > _time.time() + 86400:
            t = epoch(year - 1, *fields)
        return None if t is None else t + frac


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
        return float(_time.mktime(fields)) if utc_offset is None else float(calendar.timegm(fields)) - utc_offset
    except (OverflowError, ValueError):
        return None


def iso_time(m: re.Match) -> float | None:
    """Epoch of a match whose groups 1-8 are _ISO_BODY's."""
    return _iso_time(m, 0)


def _iso_time(m: re.Match, skip: int) -> float | None:
    """Epoch of a match whose groups skip+1 .. skip+8 are _ISO_BODY's."""
    g = m.groups()[skip:skip + 8]
    tz, offset = g[7], None
    if tz == "Z":
        offset = 0
    elif tz:
        digits = tz[1:].replace(":", "")
        offset = (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * (1 if tz[0] == "+" else -1)
    t = epoch(*(int(x) for x in g[:6]), utc_offset=offset)
    return None if t is None else t + (float("0." + g[6]) if g[6] else 0.0)


MAX_JSON_LINE = 1 << 20  # a journal entry longer than this is not one gpuhc reads


def journal_json(line: str, stamps: Stamps) -> tuple[float | None, bool, str] | None:
    """(time, is-the-kernel, message) of one ``journalctl -o json`` entry, else None.

    The journal records who wrote each entry: ``_TRANSPORT`` is ``kernel`` only for the kernel's
    own ring buffer (systemd.journal-fields(7)); a program's message never is, whatever its
    SYSLOG_IDENTIFIER says. MESSAGE is a string, or a list of bytes when it is not UTF-8."""
    if len(line) > MAX_JSON_LINE or not line.rstrip().endswith("}"):
        return None
    import json

    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    msg = entry.get("MESSAGE")
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        msg = bytes(msg).decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    t = None
    usec = entry.get("__REALTIME_TIMESTAMP")
    if isinstance(usec, str) and usec.isdigit() and len(usec) < 20:
        t = int(usec) / 1e6
    elif isinstance(entry.get("__MONOTONIC_TIMESTAMP"), str) and entry["__MONOTONIC_TIMESTAMP"].isdigit():
        t = stamps.since_boot(int(entry["__MONOTONIC_TIMESTAMP"][:19]) / 1e6)
    return t, entry.get("_TRANSPORT") == "kernel", msg


class JournalExport:
    """``journalctl -o export`` read line by line: an entry is ``KEY=value`` lines up to a blank
    line, starting with ``__CURSOR=``. :meth:`feed` returns ``(time, is-the-kernel, message)``
    when an entry ends, like :func:`journal_json`, and False for a line that belongs to an entry.
    A binary field (a name alone on its line, then a 64-bit length and raw bytes) cannot be told
    apart from the fields after it once the bytes are cut into lines: its bytes may hold
    ``\n_TRANSPORT=kernel\nMESSAGE=...``. So an entry with one is dropped here; a file is read by
    its bytes instead (:func:`export_entries`), where every field is taken by its length."""

    MAX_FIELDS = 256  # an entry with more is not one journald writes

    def __init__(self, stamps: Stamps):
        self.stamps = stamps
        self.fields: dict[str, str] | None = None

    def feed(self, line: str) -> tuple[float | None, bool, str] | bool | None:
        if self.fields is None:
            if not line.startswith("__CURSOR="):
                return None
            self.fields = {}
        if not line.strip():
            return self.end()
        key, eq, value = line.partition("=")
        if not eq:
            self.fields[_BINARY] = ""  # a binary field: what follows is not to be read as lines
        elif len(self.fields) < self.MAX_FIELDS:
            self.fields.setdefault(key, value)
        return False

    def end(self) -> tuple[float | None, bool, str] | None:
        fields, self.fields = self.fields, None
        if not fields or "MESSAGE" not in fields or _BINARY in fields:
            return None
        usec = fields.get("__REALTIME_TIMESTAMP", "")
        t = int(usec) / 1e6 if usec.isdigit() and len(usec) < 20 else None
        return t, fields.get("_TRANSPORT") == "kernel", fields["MESSAGE"]


_BINARY = "\0binary"  # no field name journald writes holds a NUL


def export_entries(data: bytes, max_entries: int = 1_000_000) -> list[str] | None:
    """A ``journalctl -o export`` stream read by its bytes (systemd's "Journal Export Format"):
    each entry as one ``journalctl -o json``-shaped line (``_TRANSPORT``, ``MESSAGE``,
    ``__REALTIME_TIMESTAMP``) for :func:`journal_json`. A field is ``NAME=value\\n`` or ``NAME\\n``,
    a little-endian 64-bit length, that many bytes, ``\\n``; an entry ends at an empty line. A
    binary value is taken by its length, so bytes inside it are never fields. Each field name
    counts once (the first), as journald writes each once. None when ``data`` is not an export
    (it must begin with ``__CURSOR=``); a stream cut short ends with the entries it completed."""
    if not data.startswith(b"__CURSOR="):
        return None
    out: list[str] = []
    fields: dict[str, str] = {}
    at, n = 0, len(data)
    while at < n and len(out) < max_entries:
        nl = data.find(b"\n", at)
        if nl < 0:
            break
        line = data[at:nl]
        at = nl + 1
        if not line:
            if "MESSAGE" in fields:
                out.append(_as_json(fields))
            fields = {}
            continue
        name, eq, value = line.partition(b"=")
        if not eq:  # binary: length, bytes, newline
            if at + 8 > n:
                break
            size = int.from_bytes(data[at:at + 8], "little")
            if size > n - at - 8:
                break
            value, at = data[at + 8:at + 8 + size], at + 8 + size + 1
        fields.setdefault(name.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    if "MESSAGE" in fields and at >= n:
        out.append(_as_json(fields))
    return out


def _as_json(fields: dict[str, str]) -> str:
    import json

    return json.dumps({k: fields[k] for k in ("__REALTIME_TIMESTAMP", "_TRANSPORT", "MESSAGE") if k in fields})
