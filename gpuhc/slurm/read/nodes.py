"""What Slurm says about a node, read from ``scontrol show node`` text in any of its spellings.

One :class:`Node` per node, whatever the source: here ``scontrol show node -o`` (one line per
node) and the multi-line blocks admins paste into tickets (Slurm 17.11 onwards);
:mod:`gpuhc.slurm.read.nodes_json` reads ``sinfo --json``, ``scontrol show node --json`` and
slurmrestd, :mod:`gpuhc.slurm.read.sinfo_text` sinfo's tables, and :mod:`gpuhc.slurm.read.dumps` picks
among them for a whole file (a mix of several, shell prompts included).

Why the text parser is careful: ``scontrol`` prints ``Key=value`` pairs separated by spaces, but
some values are free text with spaces, ``=`` and brackets in them (``Reason=``, ``OS=``,
``Comment=``, ``Extra=``). Splitting on spaces breaks them. Slurm prints the reason after every
other key but a few (Comment, Extra, ...), each key once per node, and ends the reason's first
line with `` [user@time]``; :func:`parse_record` uses exactly that to split a whole record, and
:func:`node_fields` uses it to pick the four keys a Node needs without splitting the rest
(10,000 nodes are 8 MB of text; ``gpuhc drain-report`` must stay well under a second).
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from gpuhc.errors import GpuhcError
from gpuhc.text.logtext import escape


class NodeParseError(GpuhcError):
    """Slurm node output that gpuhc cannot read; the message says which format and where."""


# Base states as Slurm prints them. DRAINED/DRAINING/FAILING are spellings of old releases and
# of sinfo's compact form; they are kept as the state and also imply the matching flag.
BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "ALLOC", "MIXED", "DOWN", "FUTURE", "UNKNOWN", "ERROR", "COMPLETING",
     "DRAINED", "DRAINING", "DRAIN", "FAIL", "FAILING", "MAINT", "REBOOT", "POWER_DOWN",
     "POWERED_DOWN", "PERFCTRS", "RESERVED", "PLANNED", "BLOCKED", "INVAL", "INVALID", "CLOUD",
     "END"}
)
# sinfo's short spellings (`%t`) next to scontrol's long ones.
_STATE_ALIASES = {"ALLOC": "ALLOCATED", "INVAL": "INVALID", "DRAIN": "DRAINED", "DRNG": "DRAINING", "MIX": "MIXED",
                  "COMP": "COMPLETING", "UNK": "UNKNOWN", "RESV": "RESERVED", "FUTR": "FUTURE", "NPC": "PERFCTRS",
                  "PLND": "PLANNED", "BLOCK": "BLOCKED", "POW_DN": "POWERED_DOWN", "POW_UP": "POWERING_UP"}
# Node names one listing may expand to (hostlists like `n[1-99999]` make a small file name
# many); the largest Slurm clusters have tens of thousands.
MAX_NODES = 200_000
KNOWN_STATES = BASE_STATES | frozenset(_STATE_ALIASES.values())
# A placeholder base state for listings that show only unavailable nodes without saying how
# they are out (`sinfo -R` has no state column): down, drained or failing, which one unknown.
UNAVAILABLE = "UNAVAILABLE"
# Single-character suffixes sinfo/scontrol append to a state (see sinfo(1), NODE STATE CODES).
_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# Flags with older or alternative spellings, folded to one name.
_FLAG_ALIASES = {"MAINT": "MAINTENANCE", "NO_RESPOND": "NOT_RESPONDING", "POWER_SAVE": "POWERED_DOWN",
                 "REBOOT": "REBOOT_REQUESTED", "POWERED_OFF": "POWERED_DOWN"}


@dataclass(frozen=True)
class Node:
    """One node as Slurm reported it. Immutable: it is a reading, not a handle."""

    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, FUTURE, UNKNOWN, ...
    flags: frozenset[str]  # upper case: DRAIN, NOT_RESPONDING, REBOOT_REQUESTED, FAIL, ...
    reason: str | None
    reason_user: str | None
    reason_time: float | None  # epoch seconds
    partitions: tuple[str, ...] = ()
    raw_state: str = ""  # as Slurm printed it, e.g. "IDLE+DRAIN"
    # Why the reason shown may not be this node's own, or "" when it is: a listing without
    # reasons (default `sinfo`), or one `sinfo --json` record whose one reason covers several
    # nodes. The drain report then names no owner for the node.
    reason_doubt: str = ""

    @property
    def drained(self) -> bool:
        """Out of the schedule on purpose (drained, or draining while jobs finish)."""
        return "DRAIN" in self.flags or self.state in ("DRAINED", "DRAINING")

    @property
    def draining(self) -> bool:
        """Drained but still running jobs: Slurm's DRAINING (ALLOCATED/MIXED/COMPLETING + DRAIN)."""
        if self.state == "DRAINING":
            return True
        return self.drained and (self.state in ("ALLOCATED", "MIXED", "COMPLETING") or "COMPLETING" in self.flags)

    @property
    def down(self) -> bool:
        return self.state == "DOWN"

    @property
    def failing(self) -> bool:
        """Marked FAIL/FAILING by an admin (``scontrol update State=FAIL``)."""
        return bool({"FAIL", "FAILING"} & self.flags) or self.state in ("FAIL", "FAILING")

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.flags

    @property
    def unavailable(self) -> bool:
        """Any of drained, down or failing: what ``gpuhc drain-report`` lists."""
        return self.drained or self.down or self.failing or self.state == UNAVAILABLE


@functools.lru_cache(maxsize=1024)
def parse_state(raw: str) -> tuple[str, frozenset[str]]:
    """Split ``IDLE+DRAIN``, ``DOWN*``, ``MIXED+DRAIN+REBOOT_REQUESTED``, ``drained*`` into
    (base state, flags). The first ``+`` part is the base state; symbol suffixes become flags."""
    text = raw.strip().upper()
    if not text:
        return "UNKNOWN", frozenset()
    flags: set[str] = set()
    parts = [p for p in text.split("+") if p]
    base = ""
    for i, part in enumerate(parts):
        while part and part[-1] in _SUFFIX_FLAGS:
            flags.add(_SUFFIX_FLAGS[part[-1]])
            part = part[:-1]
        if not part:
            continue
        if i == 0:
            base = _STATE_ALIASES.get(part, part)
        else:
            flags.add(_FLAG_ALIASES.get(part, part))
    base = base or "UNKNOWN"
    # Old spellings carry a flag in the state name: keep the name, add the flag, so that callers
    # only ever need to look at the flags.
    if base in ("DRAINED", "DRAINING"):
        flags.add("DRAIN")
    elif base in ("FAIL", "FAILING"):
        flags.add("FAIL")
    elif base == "MAINT":
        flags.add("MAINTENANCE")
    return base, frozenset(flags)


def parse_slurm_time(text: str) -> float | None:
    """Slurm's default time format ``2024-06-11T10:23:45`` (local time) -> epoch seconds.

    ``None`` for empty, ``Unknown``, ``None`` and shapes we do not recognise (a site may set
    SLURM_TIME_FORMAT to anything): a missing time must not make the whole dump unreadable.
    """
    text = text.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S"):
        try:
            return time.mktime(time.strptime(text, fmt))
        except ValueError:
            continue
    return None


# `Reason=<text> [<user>@<time>]`: the user/time suffix is the last bracket on the line.
_REASON_SUFFIX = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^\[\]@\s]*)@(?P<time>[^\[\]]*)\]\s*$", re.S)


_REASON_INNER_STAMP = re.compile(r"\s\[([^\[\]@\s]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]")


def split_reason(value: str) -> tuple[str | None, str | None, float | None]:
    """``memory issues? [root@2019-01-29T10:42:12]`` -> (text, user, epoch)."""
    value = value.strip()
    if not value or value in ("(null)", "None"):
        return None, None, None
    m = _REASON_SUFFIX.match(value)
    if not m:
        # A multi-line reason: Slurm stamps its first line, the others follow the stamp.
        inner = _REASON_INNER_STAMP.search(value)
        if inner:
            text = (value[:inner.start()] + value[inner.end():]).strip() or None
            return text, inner.group(1) or None, parse_slurm_time(inner.group(2))
        return value, None, None
    text = m.group("text").strip() or None
    user = m.group("user") or None
    return text, user, parse_slurm_time(m.group("time"))


# Keys scontrol prints for a node (17.11 to 25.11). Used to find where a free-text value ends.
KNOWN_KEYS = frozenset(
    """NodeName Arch CoresPerSocket CPUAlloc CPUEfctv CPUErr CPUTot CPULoad CPUSpecList
    AvailableFeatures ActiveFeatures Features Gres GresDrain GresUsed GpuSpec NodeAddr NodeHostName
    BcastAddr Port Version OS RealMemory AllocMem FreeMem Sockets Boards MemSpecLimit
    CoreSpecCount State ThreadsPerCore TmpDisk Weight Owner MCS_label NextState Partitions
    BootTime SlurmdStartTime LastBusyTime ResumeAfterTime CfgTRES AllocTRES CapWatts
    CurrentWatts AveWatts LowestJoules ConsumedJoules ExtSensorsJoules ExtSensorsWatts
    ExtSensorsTemp Reason Comment Extra ReservationName InstanceId InstanceType Topology
    ResCoresPerGPU RestrictedCoresPerGPU CertFlags TLSCertLastRenewal Power PowerConsumption
    TresWeights SocketsPerBoard CPUs Cores Threads Boards""".split()
)
# Free text: may hold spaces and `Word=`.
FREE_TEXT_KEYS = frozenset({"Reason", "Comment", "Extra"})
# Slurm prints the reason after every other key but these (node_info.c: Reason, then Comment,
# Extra, InstanceId/InstanceType, ReservationName), so only they can end a free-text value.
TRAILING_KEYS = frozenset({"Reason", "Comment", "Extra", "InstanceId", "InstanceType", "ReservationName"})
# Keys whose value may hold spaces but never `Word=` (OS=Linux 6.1.0 #1 SMP ...).
_SPACED_KEYS = frozenset({"OS"})

_KEY_AT = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_]*)=")
# The ` [user@time]` Slurm appends to a reason, where a key or the end of the record follows.
# Its last occurrence ends the reason, whatever `Key=` the reason text itself contains.
_REASON_STAMP = re.compile(r"\s\[[^\[\]@\s]*@[^\[\]]*\](?=\s*$|\s+[A-Za-z][A-Za-z0-9_]*=)")


def parse_record(text: str, where: str = "") -> dict[str, str]:
    """Split one node record (all its lines joined) into ``{key: value}``.

    Values keep their inner spaces; surrounding whitespace is stripped.
    """
    starts = [(m.start(), m.end(), m.group(1)) for m in _KEY_AT.finditer(text)]
    if not starts or starts[0][0] != len(text) - len(text.lstrip()):
        raise NodeParseError(f"{where}expected Key=value pairs, got {text.strip()[:60]!r}")
    out: dict[str, str] = {}
    cur_key: str | None = None
    cur_from = 0
    hold_until = -1  # no key may start before this offset (inside a stamped reason)
    for start, end, key in starts:
        if cur_key is not None:
            if start < hold_until or key in out or key == cur_key:
                continue  # Slurm prints each key once: a repeat is text inside a value
            if cur_key in FREE_TEXT_KEYS and key not in TRAILING_KEYS:
                continue  # human text may say `foo=bar` or `State=x`; only a later key ends it
            if cur_key in _SPACED_KEYS and key not in KNOWN_KEYS and not key[:1].isupper():
                continue
            # A plain value has no spaces, so any `Word=` after a space starts the next key,
            # known or not (a newer Slurm adds keys); `a=b` inside CfgTRES=cpu=1,mem=2 is not
            # preceded by a space and never matches.
            out[cur_key] = text[cur_from:start].strip()
        cur_key, cur_from = key, end
        if key == "Reason":
            stamps = list(_REASON_STAMP.finditer(text, end))
            hold_until = stamps[-1].end() if stamps else -1
    if cur_key is not None:
        out[cur_key] = text[cur_from:].strip()
    return out


_TRAILING_AT = re.compile(r"\s(?:Comment|Extra|InstanceId|InstanceType|ReservationName)=")


def _plain_value(head: str, key: str) -> str | None:
    """The space-free value after `` Key=`` (str.find: a regex starting with ``\\s`` costs 10x)."""
    j = head.find(key)
    if j < 0:
        return None
    j += len(key)
    k = head.find(" ", j)
    return head[j:] if k < 0 else head[j:k]


def node_fields(text: str) -> dict[str, str]:
    """The four keys a :class:`Node` needs, without splitting the whole record.

    Same answers as :func:`parse_record` for those keys, about ten times faster (a 10,000-node
    dump is 8 MB of text): everything before `` Reason=`` is plain values and ``OS=`` (no free
    text that could hold `` State=``), and the reason ends at its ``[user@time]`` stamp or, when
    Slurm printed none, at the first key that Slurm prints after it.
    """
    i = text.find(" Reason=")
    head = text if i < 0 else text[:i]
    fields: dict[str, str] = {"NodeName": ""}
    head = head.lstrip()
    if head.startswith("NodeName="):
        k = head.find(" ")
        fields["NodeName"] = head[9:] if k < 0 else head[9:k]
    for key in ("State", "Partitions"):
        value = _plain_value(head, f" {key}=")
        if value is not None:
            fields[key] = value
    if i >= 0:
        tail = text[i + len(" Reason="):]
        end = len(tail)
        stamp = None
        for stamp in _REASON_STAMP.finditer(tail):
            pass
        # A reason's later lines follow its stamp (scontrol -o joins them with spaces): the
        # reason runs on to the first key Slurm prints after it, as in parse_record.
        m = _TRAILING_AT.search(tail, stamp.end() if stamp is not None else 0)
        if m:
            end = m.start()
        fields["Reason"] = tail[:end].strip()
    return fields


def node_from_record(fields: dict[str, str], where: str = "") -> Node:
    """Build a :class:`Node` from ``parse_record`` (or ``node_fields``) output."""
    name = fields.get("NodeName", "").strip()
    if not name:
        raise NodeParseError(f"{where}record has no NodeName")
    raw_state = fields.get("State", "")
    state, flags = parse_state(raw_state)
    reason_text = fields.get("Reason")
    reason, user, when = split_reason(reason_text) if reason_text else (None, None, None)
    return Node(name, state, flags, reason, user, when, _partitions(fields.get("Partitions", "")), raw_state.strip())


@functools.lru_cache(maxsize=1024)
def _partitions(text: str) -> tuple[str, ...]:
    # Cached: a cluster has a handful of distinct partition lists over thousands of nodes.
    return tuple(p for p in text.strip().split(",") if p and p != "(null)")


def lines_of(text: str) -> list[str]:
    """Slurm's lines: split at ``\\n`` alone. A reason may hold a ``\\r``, a form feed or a
    U+2028 that ``str.splitlines`` would also split at (docs/slurm.md, "Reading Slurm's
    output"); a ``\\r\\n`` of a Windows paste still ends a line."""
    out = text.split("\n")
    return [line[:-1] if line.endswith("\r") else line for line in out]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _records(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, its lines) per record. A record starts at a line beginning with
    ``NodeName=`` no more indented than the first record's; every other line continues it:
    Slurm prints a reason's later lines indented under it (``-o`` on the same line), and a
    reason's ``NodeName=fake`` line or a stray line of free text must neither start a record
    nor end the listing (docs/slurm.md, "Reading Slurm's output")."""
    start, lines, base = 0, [], -1
    for lineno, line in enumerate(lines_of(text), 1):
        stripped = line.strip()
        if stripped.startswith("NodeName=") and (base < 0 or _indent(line) <= base):
            if lines:
                yield start, lines
            start, lines, base = lineno, [stripped], _indent(line) if base < 0 else base
        elif lines and stripped:
            lines.append(stripped)
    if lines:
        yield start, lines


def _read(text: str, what: str, oneline: bool, warn: Callable[[str], None] | None) -> list[Node]:
    nodes = []
    for lineno, lines in _records(text):
        where = f"{what}, {'line' if oneline else 'record at line'} {lineno}: "
        try:
            nodes.append(node_from_record(node_fields(" ".join(lines)), where))
        except NodeParseError as e:
            if warn is None:
                raise
            warn(f"skipped unreadable node record: {e}")
    return nodes


def parse_show_node_oneline(text: str, warn: Callable[[str], None] | None = None) -> list[Node]:
    """``scontrol show node -o`` output: one line per node. Text before the first record is an
    error (this is no node listing); a record that does not read is skipped through ``warn``
    (naming it), or raised without one."""
    first = next((line.strip() for line in lines_of(text) if line.strip()), None)
    if first is not None and not first.startswith("NodeName="):
        raise NodeParseError(f"scontrol show node -o, line 1: expected a line starting with NodeName=, "
                             f"got {escape(first, 60)!r}")
    return _read(text, "scontrol show node -o", True, warn)


def parse_show_node(text: str, warn: Callable[[str], None] | None = None) -> list[Node]:
    """``scontrol show node`` output, one- or multi-line records, as pasted into a ticket.

    A record starts at a line beginning with ``NodeName=``; the lines after it continue it
    (indented ones are how a multi-line reason is printed). Lines before the first record (a
    shell prompt, the command itself) are ignored.
    """
    if not any(line.strip().startswith("NodeName=") for line in lines_of(text)):
        raise NodeParseError("scontrol show node text: no line starts with NodeName=")
    return _read(text, "scontrol show node text", False, warn)
