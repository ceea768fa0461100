"""Turn kernel log text into :class:`gpuhc.model.kernel.KernelEvent` s: pure, no I/O, never raises.

The same parser reads every shape a kernel log reaches us in, line by line, so a file may even
mix them (a log someone pasted together from two tools). Stamps, and the shapes they come in
(a table with examples), are :mod:`gpuhc.sources.kernel_log_prefix`'s.

Times. Everything that names a wall-clock time becomes epoch seconds. "Since boot" stamps become
epoch seconds when the caller passes ``boot_time`` (the live sources do); a recorded file has no
boot time, so those stamps are *kept as seconds since boot*: ordering, the cursor and the
windows still work because :attr:`KernelLog.last_time` is in the same scale. Checks recognise
that scale by its size (below ``gpuhc.text.limits.RELATIVE_LIMIT``, 1e9 s, i.e. before 2001).
:attr:`KernelLog.last_time` is the *latest* time in the log, not the last line's: a file pasted
together from two tools, or a journal merged from two sources, is not in time order, and a
replay judges "now" by it.
Syslog stamps carry no year: the caller's ``year`` is used, else the year of its ``now`` (a
replay's time) or the current one, stepping
back a year when that would put the line more than a day in the future (a December log read in
January). ``dmesg -T`` and syslog stamps are read in the local time zone, as the tools print.

Events (one per incident a human would count, not one per line):

- XID: ``NVRM: Xid (PCI:0000:b3:00): 79, pid=..., ...`` (with MIG's `` GPU-I:nn GPU-CI:nn``) and
  the legacy ``NVRM: Xid (0000:03:00): 14, ...``. Any PCI domain and device number; a redacted
  address (``PCI:...``) is not the driver's grammar. Banner lines that only name an Xid inside
  a word (``_kgspLogXid119:``) are not events, and an ``SXid (`` line is never an Xid. The
  driver's "loading NVIDIA UNIX ... Kernel Module 575.57.08" line gives
  :attr:`KernelLog.driver_version` (Xid 144-150 sub-codes decode by driver branch).
- SXID (NVSwitch): a report is a header line (``..., Fatal|Non-fatal, Link N ...``) followed by
  ``Severity ...`` and ``Data {...}`` detail lines. Details belong to their header's event; a
  detail whose header is not in the log (cut off) still makes one event. Fatality goes to
  ``state`` (``"fatal"``/``"non-fatal"``, None when the log does not say), the switch name
  (``nvswitch1``) to ``device`` and the link number, when named, to ``port``.
- FALLEN_OFF_BUS: "... has fallen off the bus" without an Xid, possibly spread over several
  lines ("The NVIDIA GPU 0000:18:00.0 / (PCI ID ...) installed in this system has / fallen off
  the bus ..."), or the legacy one-liner "NVRM: GPU at 0000:01:00.0 has fallen off the bus.".
  Dropped when an Xid 79 or another fallen-off message for the same GPU is within a minute:
  the driver often prints both for one incident.
- DRIVER: a driver message that says a GPU needs help without an Xid (``state`` names which,
  see :data:`SIGNALS`): "RmInitAdapter failed", ``NV_ERR_RESET_REQUIRED``, "GPU marked for
  reset", "Back to back GSP RPC timeout", "GPU lost", a GSP-CrashCat report, a GSP heartbeat
  timeout, a GSP task watchdog timeout. The GPU is the PCI id in the line, else
  one named by an NVRM line just before; ``device`` keeps the driver's own name ("GPU6").
- IB_LINK: mlx5 ``Port: 1 Link DOWN/ACTIVE/INIT``; also the netdev ``enp83s0f0np0: Link down/up``
  line of the same port when no ``Port:`` line reports that change (a log cut just after it).
  mlx5 gives each PCI function one port, so a netdev line is port 1 of the ``mlx5_N`` that the
  log names for that PCI address (None when it never does).

Whose words count (docs/security.md, "Kernel log"): only the kernel's records, and in them only
the driver's exact grammar (:mod:`gpuhc.sources.kernel_log_grammar`). A kmsg record with a
facility other than 0, a journal entry whose ``_TRANSPORT`` is not ``kernel``, a syslog line
tagged by a program (``kernel[pid]:`` included), a ``dmesg --decode`` line of another facility:
none is read. A kernel line that begins with a process's name is never an event, nor is what
follows it inside the same record or, in text, on the unstamped lines after it. Text with no
facility at all (plain ``dmesg``, pasted lines) is read for the exact grammar only.

No silent misses: a line that starts with ``NVRM:`` and names an Xid (or an SXid, or an mlx5
port) but is not the exact grammar is counted in ``unparsed_lines`` and the first is kept in
``unparsed_example``, so that a new driver's format change shows up instead of hiding. It never
yields an event: a looser match is at most the xid check's warning, which never drains.
"""

from __future__ import annotations

import re
from typing import Iterable

from gpuhc.text.lazyre import lazy  # patterns compile on first use: most runs need few
from gpuhc.model.kernel import EventKind, KernelLog
from gpuhc.model.pci import norm_pci
from gpuhc.sources import kernel_log_grammar as G
from gpuhc.sources.kernel_log_incidents import incidents
from gpuhc.sources.kernel_log_journal import JournalExport, journal_json
from gpuhc.sources.kernel_log_prefix import GREP_FILE, KMSG, KMSG_DICT, QUOTES, Stamps, after_stamp, unescape_kmsg
from gpuhc.sources.kernel_log_readers import READERS
from gpuhc.sources.kernel_log_record import Found, KernelRecord, sanitize

CONTEXT_LINES = 3  # a multi-line message names its GPU at most this many lines earlier

_PCI_FULL = lazy(r"(?:PCI:)?(" + G.PCI + r")")
_MARKERS = ("NVRM", "SXid", "mlx5_core", "fallen off the bus", "GSP task watchdog")
_ANY_PCI = lazy(r"(?<![0-9a-fA-F:])(?:PCI:)?(" + G.PCI + r")")
_LINK_NO = lazy(r"\bLink (\d{1,4})\b")
_MLX_PORT = lazy(r"mlx5_core (" + G.PCI + r")(?: ([\w.-]+))?: Port: (\d{1,3}) Link ([A-Za-z_]+)")
_MLX_NETDEV = lazy(r"mlx5_core (" + G.PCI + r") ([\w.-]+): Link (up|down)\b")

_COLOUR = lazy(r"\x1b\[[0-9;]{0,32}m")  # SGR colour sequences (dmesg --color=always)
_STARTS = ("NVRM", "mlx5_core", "GSP task watchdog", "nvidia-nvswitch")  # a driver line's first words
SIGNALS = G.SIGNALS  # the driver's messages that need action without an Xid (kernel_log_grammar)


def _pci(field: str) -> str | None:
    m = _PCI_FULL.fullmatch(field.strip())
    return norm_pci(m.group(1)) if m else None


# Driver words outside the driver's place at the start of the line: an Xid, or the fall-off phrase.
_REFUSED = lazy(r"NVRM: Xid\b|NVRM:.{0,200}fallen off the bus")


class _Parser:
    def __init__(self, boot_time: float | None, year: int | None, live: bool = False, now: float | None = None):
        self.stamps = Stamps(boot_time, year, now)
        self.live = live  # the node's own kernel: no wrapper, no quote, no pasted stamp is read
        self.found: list[Found] = []
        self.unparsed = 0
        self.unparsed_example: str | None = None
        self.idx = 0  # logical line number (kmsg records split into their lines)
        self.lineno = 0  # input line number, for what could not be read
        self.unread = 0  # lines with no shape, in a log whose lines have one
        self.unread_first: int | None = None
        self.lead: tuple[int, int] | None = None  # (count, first) of such lines before any stamp
        self.any_stamp = False
        self.prev_time: float | None = None
        self.prev_seq: int | None = None
        # May the previous stamped line's continuation be read? Not when that line was not the
        # kernel's or began with a process's name: its next line is the same untrusted text.
        self.prev_kernel = True
        self.prev_msg = ""  # the previous stamped message: does it begin with a process's name?
        self.prev_kmsg = False
        self.last_time: float | None = None
        self.last_seq: int | None = None
        self.driver_version: str | None = None
        self.gpu_ctx: tuple[str, int] | None = None  # (pci, line index) of the last GPU named
        self.export = JournalExport(self.stamps)
        self.readers = [kind() for kind in READERS]  # AER, machine checks, ... (kernel_log_readers)
        # the driver's and the readers' words, found at C speed in one pass (most lines hold none)
        self.markers = re.compile("|".join(map(re.escape, _MARKERS + tuple(w for r in self.readers for w in r.words))))
        self.wrapped = False  # the record being read came from behind a wrapper
        # A text record (a stamped line and its indented continuation lines, as dmesg prints a
        # multi-line record) is judged whole once it ends: (time, seq, its lines).
        self.pending: tuple[float | None, int | None, list[str]] | None = None

    # ------------------------------------------------------------------ lines and prefixes

    def feed(self, raw: str) -> None:
        self.lineno += 1
        line = raw.rstrip("\r\n")
        if line[:1] in ("_", "") or self.export.fields is not None:  # journalctl -o export
            entry = self.export.feed(line)
            if entry is not None:
                if entry is not False:
                    self._stamped(entry)
                return
        if not line.strip():
            return
        m = KMSG.match(line)
        if m:
            self._kmsg(m)
            return
        if self.prev_kmsg and KMSG_DICT.match(line):
            return  # kmsg dictionary (" SUBSYSTEM=pci"): metadata, not message text
        self.prev_kmsg = False
        if not self.live and line[0] == "\x1b":
            line = _COLOUR.sub("", line) or " "  # dmesg -H --color=always: the stamp comes coloured
        stamped = journal_json(line, self.stamps) if line[0] == "{" else self.stamps.stamped(line)
        wrapped = False
        if not self.live:  # a recording: the admin's evidence, pasted, quoted or relayed
            if stamped is None and line[0] in QUOTES:
                stamped = self.stamps.stamped(line.lstrip(QUOTES))  # pasted: "> [Fri Aug 30 ...] ..."
            if stamped is None:  # grep -H: "kern.log:2025-03-21T...", "syslog.1:<4>1 2025-...", any shape
                g = GREP_FILE.match(line)
                if g is not None:
                    stamped = self.stamps.stamped(line[g.end():])
                    wrapped = stamped is not None
            # behind a wrapper, never behind a facility or journal transport that names a program
            if stamped is None or not (stamped[1] or self.stamps.facility_named or line[0] == "{"):
                inner = self._wrapped(line)
                if inner is not None:
                    self._stamped(inner, wrapped=True)
                    return
        if stamped is not None:
            self._stamped(stamped, wrapped)
            return
        # asked only here, for the rare unstamped line: most logs stamp every line
        prev_process = self.prev_kernel and G.is_process_line(self.prev_msg.strip())
        if line[0].isspace():  # continuation of the previous line's record: judged with it
            if self.pending is not None:
                self.pending[2].append(line.strip())
            return
        self._flush()
        if prev_process:
            return  # the rest of a line that began with a process name: a newline it quoted
        self._no_shape(line)
        if not self.live and line[0] in QUOTES:
            line = line.lstrip(QUOTES) or " "  # "> NVRM: Xid ...": a quoted bare line

        # bare text, no stamp at all: "kernel: msg" is the kernel's, "proc[pid]: msg" a program's
        kernel, msg = after_stamp(line, strict=False)
        self.prev_time, self.prev_seq = None, None
        self.prev_kernel, self.prev_msg = kernel, msg
        if kernel:
            self.pending = (None, None, [msg])

    def _no_shape(self, line: str) -> None:
        """Count a line with no stamp (its shape unknown) in a log whose lines have one: a line
        cut by a partial copy, or text typed in. It is read for the driver's exact words only,
        undated, and never hides the lines after it. A log with no stamp at all is bare text, a
        shape of its own; journalctl's "-- Boot ... --" lines are its markers."""
        if line.startswith("-- "):
            return
        if self.any_stamp:
            self.unread += 1
            self.unread_first = self.unread_first or self.lineno
        else:
            n, first = self.lead or (0, self.lineno)
            self.lead = (n + 1, first)

    def _flush(self) -> None:
        """Read the text record that just ended, as one record."""
        if self.pending is not None:
            t, seq, lines = self.pending
            self.pending = None
            for part in G.record_lines("\n".join(lines)):
                self._message(part, t, seq)

    def _stamped(self, stamped: tuple[float | None, bool, str], wrapped: bool = False) -> None:
        self._flush()
        if not self.any_stamp:
            self.any_stamp = True
            if self.lead is not None:  # the lines before the first stamp had none: named now
                self.unread, self.unread_first = self.unread + self.lead[0], self.lead[1]
        self.wrapped = wrapped
        t, kernel, msg = stamped
        self.prev_time, self.prev_seq = t, None
        self.prev_kernel, self.prev_msg = kernel, msg
        self._saw_time(t)
        if kernel:  # a journal entry may hold several lines, as a kmsg record; syslog writes them #012
            self.pending = (t, None, [msg.replace("#012", "\n")])

    def _wrapped(self, line: str) -> tuple[float | None, bool, str] | None:
        """A kernel record behind one wrapper (a relay's or agent's prefix, a mail quote, a grep
        file name, a ticket's text), in a recording only: the record's own stamp, nearest the
        driver's (or a reader's) words, then the record. None when there is no such stamp, or
        what follows it is a program's line."""
        m = self.markers.search(line, 1)
        if m is None:
            return None
        found = self.stamps.embedded(line[:m.start()])
        if found is None:
            return None
        t, end = found
        kernel, msg = after_stamp(line[end:].lstrip(" :]"), strict=False)  # "host proc[pid]:" is a program
        return (t, kernel, msg) if kernel else None

    def _saw_time(self, t: float | None) -> None:
        if t is not None and (self.last_time is None or t > self.last_time):
            self.last_time = t

    def _kmsg(self, m: re.Match) -> None:
        self._flush()
        seq, usec = int(m.group(2)), int(m.group(3))
        t = usec / 1e6 + (self.stamps.boot_time or 0.0)
        self.prev_time, self.prev_seq, self.prev_kmsg = t, seq, True
        self._saw_time(t)
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)
        # The prefix is facility * 8 + level. Only facility 0 is the kernel's own: a record
        # written into /dev/kmsg from user space gets facility 1 or more, whatever it asks for.
        self.prev_kernel, self.prev_msg = int(m.group(1)) >> 3 == 0, ""
        if not self.prev_kernel:
            return
        # Newlines inside one printk come escaped (\x0a), as does any non-ASCII byte.
        for part in G.record_lines(unescape_kmsg(m.group(4))):
            self._message(part, t, seq)

    # ------------------------------------------------------------------ messages

    def _message(self, text: str, t: float | None, seq: int | None) -> None:
        self.idx += 1
        msg = text.strip()
        driver = msg.startswith(_STARTS) or "SXid" in msg
        wanting = [r for r in self.readers if r.wants(msg)]  # AER, machine checks, ... (kernel_log_readers)
        if not driver and not wanting:
            # cheap first: most kernel lines are nothing of the driver's nor a reader's. The
            # driver's words behind another prefix or in quotes are named for a person, never read.
            if ("NVRM" in msg or "fallen off the bus" in msg) and _REFUSED.search(msg) and not G.is_process_line(msg):
                self._unreadable(msg)
            return
        process = G.is_process_line(msg)  # a line that starts with a process's name is never evidence
        if wanting:
            rec = KernelRecord(msg, t, seq, self.idx, kernel=not process, wrapped=self.wrapped)
            found = [f for f in (r.feed(rec) for r in wanting) if f is not None]
            self.found.extend(found)
            if found or not driver:
                return
        if process:
            return
        if "SXid" in msg and G.SXID_WORD.search(msg):
            self._sxid(msg, t, seq)
        elif msg.startswith("NVRM"):
            self._nvrm(msg, t, seq)
        elif msg.startswith("mlx5_core"):
            self._mlx5(msg, t, seq)
        elif msg.startswith("GSP task watchdog"):
            self._nvrm(msg, t, seq)

    def _unreadable(self, text: str) -> None:
        self.unparsed += 1
        if self.unparsed_example is None:
            self.unparsed_example = sanitize(text, 200)

    def _nvrm(self, msg: str, t: float | None, seq: int | None) -> None:
        # Each grammar behind the word it cannot match without: a healthy node's NVRM lines then
        # compile neither pattern (gpuhc/text/lazyre.py).
        if "Xid" in msg:
            m = G.XID.match(msg)
            if m:
                self._xid(msg, t, seq, norm_pci(m.group(1)), int(m.group(2)))
                return
            if msg.startswith("NVRM:") and G.XID_WORD.search(msg):
                self._unreadable(msg)  # the driver's prefix, not its grammar: a warning, never a drain
                return
        m = G.FALLEN.match(msg) if "fallen off the bus" in msg else None
        if m:
            self._fallen(msg, t, seq, m.group(1) or m.group(2))
            return
        name = G.driver_signal(msg)
        if name:
            self._signal(name, msg, t, seq)
            return
        if G.SIGNAL_WORDS.search(msg):
            self._unreadable(msg)  # a signal's words, not its grammar ("GPU 18:00.0" without a domain)
            return
        version = G.driver_version(msg)
        if version:
            self.driver_version = version
            return
        ctx = G.GPU_CTX.match(msg)
        if ctx:
            self.gpu_ctx = (norm_pci(ctx.group(1)), self.idx)

    def _xid(self, body: str, t: float | None, seq: int | None, pci: str | None, code: int) -> None:
        self.found.append(Found(EventKind.XID, t, seq, self.idx, sanitize(body[len("NVRM: "):]), pci=pci, code=code))
        if pci:
            self.gpu_ctx = (pci, self.idx)

    def _context_pci(self) -> str | None:
        if self.gpu_ctx and self.idx - self.gpu_ctx[1] <= CONTEXT_LINES:
            return self.gpu_ctx[0]
        return None

    def _signal(self, name: str, body: str, t: float | None, seq: int | None) -> None:
        m = _ANY_PCI.search(body)
        pci = norm_pci(m.group(1)) if m else self._context_pci()
        dev = G.DRIVER_GPU.match(body)
        text = body[len("NVRM: "):] if body.startswith("NVRM: ") else body
        self.found.append(Found(EventKind.DRIVER, t, seq, self.idx, sanitize(text), pci=pci,
                                 device=dev.group(1) if dev else None, state=name))

    def _fallen(self, msg: str, t: float | None, seq: int | None, named: str | None) -> None:
        pci = norm_pci(named) if named else self._context_pci()
        self.found.append(Found(EventKind.FALLEN_OFF_BUS, t, seq, self.idx, sanitize(msg[len("NVRM:"):]), pci=pci,
                                 code=79))

    def _sxid(self, text: str, t: float | None, seq: int | None) -> None:
        m = G.SXID.match(text)
        if not m:
            if "SXid (" in text or text.startswith(("nvidia-nvswitch", "SXid", "NVRM:")):
                self._unreadable(text)  # the driver's words behind a prefix it never prints, as for an Xid
            return
        rest = m.group(4)
        state, detail = G.sxid_report(rest)
        link = _LINK_NO.search(rest)
        at = text.find("SXid")
        self.found.append(Found(EventKind.SXID, t, seq, self.idx, sanitize(text[at:]), pci=norm_pci(m.group(2)),
                                 code=int(m.group(3)), device=m.group(1), port=int(link.group(1)) if link else None,
                                 state=state, detail=detail))

    def _mlx5(self, body: str, t: float | None, seq: int | None) -> None:
        m = _MLX_PORT.match(body)
        if m:
            dev = m.group(2) if m.group(2) and m.group(2).startswith("mlx5_") else None
            self.found.append(Found(EventKind.IB_LINK, t, seq, self.idx, sanitize(body), pci=norm_pci(m.group(1)),
                                     device=dev, port=int(m.group(3)), state=m.group(4).upper()))
            return
        m = _MLX_NETDEV.match(body)
        if m:
            state = "ACTIVE" if m.group(3) == "up" else "DOWN"
            self.found.append(Found(EventKind.IB_LINK, t, seq, self.idx, sanitize(body), pci=norm_pci(m.group(1)),
                                     port=1, state=state, detail=True))
            return
        if "Port:" in body and "Link" in body:
            self._unreadable(body)

    # ------------------------------------------------------------------ incidents

    def finish(self) -> KernelLog:
        if self.export.fields is not None:  # an export that ends without its blank line
            entry = self.export.end()
            if entry is not None:
                self._stamped(entry)
        self._flush()
        ends = [f for r in self.readers for f in (getattr(r, "finish", lambda: ())() or ())]
        if ends:  # what a reader could only tell at the end of the log, in log order
            self.found = sorted(self.found + ends, key=lambda f: f.idx)
        found = incidents(self.found)
        return KernelLog(events=[f.event() for f in found], last_time=self.last_time, last_seq=self.last_seq,
                         unparsed_lines=self.unparsed, unparsed_example=self.unparsed_example,
                         driver_version=self.driver_version, unread_lines=self.unread,
                         unread_first_line=self.unread_first, relative_unanchored=self.stamps.unanchored)


def parse_lines(lines: Iterable[str], boot_time: float | None = None, year: int | None = None,
                live: bool = False, now: float | None = None) -> KernelLog:
    """Parse kernel log lines (any shape in the module doc) into a :class:`KernelLog`.

    ``boot_time``: epoch of boot, to turn since-boot stamps into epoch (live sources).
    ``year``: the year of syslog and ``dmesg -H`` stamps, which print none; without it they are
    dated against ``now`` (a replay's time: a recording's syslog lines are of its year, not
    today's), else the clock. ``live``: the
    node's own kernel (/dev/kmsg, ``dmesg``), where only the kernel's records count: no line is
    read from behind a wrapper, a quote or text before its stamp. ``source``/``boot_id`` are the
    caller's to fill in. Never raises on any text."""
    parser = _Parser(boot_time, year, live, now)
    for line in lines:
        parser.feed(line)
    return parser.finish()
