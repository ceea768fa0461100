"""What the kernel-log reader hands on: one record it read, the event a record is, and the one
sanitiser of kernel text. Pure; declared here, below both, so that the parser
(:mod:`gpuhc.sources.kernel_log_parse`) and the record readers it feeds
(:mod:`gpuhc.sources.kernel_log_host` and any other :class:`RecordReader`) import it and not
each other.

A record reader receives every message line of every record the parser reads, in log order,
once the record rules have been applied (docs/security.md, "Kernel log"): ``kernel`` says whether
the line's first words are the kernel's own, the only lines a reader may act on. The parser asks
:meth:`RecordReader.wants` first (a substring test: most kernel lines are no reader's), then
:meth:`RecordReader.feed`, which returns the event the line is, if any.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuhc.text.logtext import escape
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.record import FrozenRecord, Record

MAX_MESSAGE = 400  # characters kept of one message: enough to read, bounded for state files


def sanitize(text: str, cap: int = MAX_MESSAGE) -> str:
    """One printable line of at most ``cap`` characters, through the one log-text escaper.

    Messages end up in drain reasons, JSON reports, state and terminals: a stray escape
    sequence from a misbehaving driver (or a process name an Xid quotes) must act in none of
    them, and is shown as ``\\x1b`` so the evidence says something was there."""
    return escape(text.strip(), cap - len("..."))  # (escape marks a cut with "...")


@dataclass(frozen=True, eq=False, repr=False)
class KernelRecord(FrozenRecord):
    """One message line of a kernel record, as the parser read it.

    ``text``: the message, stamp and prefixes removed, stripped, not yet sanitised (quote it
    through :func:`sanitize`). ``time``: epoch seconds, or seconds on the log's own clock (see
    :mod:`gpuhc.sources.kernel_log_parse`), None when undated. ``seq``: the /dev/kmsg sequence
    number. ``line``: the parser's logical line index (what :class:`Found` keeps). ``kernel``:
    the kernel's own words (False for a line that begins with a process's name: quote it at
    most, never act on it). ``wrapped``: read from behind another tool's prefix in a recorded
    file (never on a live source)."""

    text: str
    time: float | None
    seq: int | None
    line: int
    kernel: bool = True
    wrapped: bool = False


@dataclass(eq=False, repr=False)
class Found(Record):
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


class RecordReader(Protocol):
    """Reads events out of the records the parser hands on (see the module doc). One instance
    per parse; :data:`gpuhc.sources.kernel_log_readers.READERS` lists the kinds."""

    words: tuple[str, ...]  # substrings one of its lines must hold: also what a wrapped line is searched for

    def wants(self, text: str) -> bool: ...

    def feed(self, rec: KernelRecord) -> Found | None: ...
