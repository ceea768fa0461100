"""sinfo's tables, as admins paste them: default ``sinfo``, ``sinfo -N -l``, ``sinfo -R [-l]``
and ``sinfo -O/--Format`` with a node column.

A table is a header line of upper-case column names (``PARTITION AVAIL TIMELIMIT NODES STATE
NODELIST``, ``REASON USER TIMESTAMP NODELIST``, ``HOSTNAMES STATE REASON`` ...) and rows under
it. What makes the rows hard to split (sinfo(1), "-o" and "-O"):

- the reason is free text with spaces, so rows are split around it: the columns before it
  are one word each from the left, the columns after it one word each from the right, and the
  reason is the exact text between (inner spaces kept);
- ``-O`` columns are fixed width with no separator, so a value that fills its width runs into
  the next one; such a row is split again at the header's column positions;
- ``sinfo -R`` (``%20E``) and ``-N -l`` cut the reason at 20 characters: the text is kept as
  printed, and the caller is told (:attr:`Table.cut_width`);
- default ``sinfo`` shows no reason at all, and ``sinfo -R`` without ``-l`` no state.

A row whose typed columns do not read (a node list that is no hostlist, a state sinfo never
prints, a count that is no number) is not part of the table: the table ends there, and the
caller decides what that line is (a shell prompt, another command's output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuhc.slurm.read.nodes import KNOWN_STATES, parse_slurm_time, parse_state

# Header words of the columns this reader uses; any other upper-case word is a column it skips.
NODE_COLUMNS = frozenset({"NODELIST", "HOSTNAMES"})
_HEADER_WORD = re.compile(r"^[A-Z][A-Z0-9_:()/%-]*$")
_COUNT = re.compile(r"^\d+$")
_UNKNOWN_TIME = frozenset({"Unknown", "None", "N/A", "n/a", "(null)"})


@dataclass
class Row:
    """One row: the nodes it names and what it says about them (None: not in this table)."""

    nodes: list[str]
    state: str | None = None
    reason: str | None = None
    user: str | None = None
    time: float | None = None
    partition: str | None = None
    line: int = 0


@dataclass
class Table:
    header: list[tuple[int, str]]  # (column start, name)
    first_line: int
    header_len: int = 0  # the header line's length: sinfo pads the last column's name to its width
    rows: list[Row] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [name for _, name in self.header]

    @property
    def has_reason(self) -> bool:
        return "REASON" in self.names

    @property
    def has_state(self) -> bool:
        return "STATE" in self.names

    @property
    def cut_width(self) -> int | None:
        """The reason column's width, when a reason that fills it was seen (sinfo cuts reasons
        to their column: 20 characters by default, or what ``-O Reason:N`` asked for)."""
        if not self.has_reason:
            return None
        k = self.names.index("REASON")
        start = self.header[k][0]
        end = self.header[k + 1][0] if k + 1 < len(self.header) else self.header_len
        width = end - start
        longest = max((len(r.reason or "") for r in self.rows), default=0)
        return longest if width > len("REASON") and longest >= width - 1 else None


def header_of(line: str) -> list[tuple[int, str]] | None:
    """The columns of an sinfo header line that names nodes and a state or reason, else None."""
    words = [(m.start(), m.group()) for m in re.finditer(r"\S+", line)]
    names = [w for _, w in words]
    if len(words) < 2 or not all(_HEADER_WORD.match(w) for w in names):
        return None
    if not NODE_COLUMNS & set(names) or not {"STATE", "REASON"} & set(names):
        return None
    if len(set(names)) != len(names):
        return None
    return words


def read_table(lines: list[str], start: int, header: list[tuple[int, str]]) -> tuple[Table, int]:
    """The rows under the header at ``lines[start]``; returns the table and the index of the
    first line that is not one of its rows."""
    table = Table(header, start + 1, len(lines[start]))
    i = start + 1
    while i < len(lines):
        text = lines[i]
        if not text.strip():
            break
        row = parse_row(text, header)
        if row is None:
            break
        row.line = i + 1
        table.rows.append(row)
        i += 1
    return table, i


def parse_row(line: str, header: list[tuple[int, str]]) -> Row | None:
    """One row, split by words around the reason, or at the header's positions; None when
    neither reading gives typed columns that make sense."""
    for values in (_by_words(line, header), _by_position(line, header)):
        if values is not None:
            row = _typed(values)
            if row is not None:
                return row
    return None


def _by_words(line: str, header: list[tuple[int, str]]) -> dict[str, str] | None:
    words = list(re.finditer(r"\S+", line))
    names = [n for _, n in header]
    n = len(names)
    if "REASON" not in names:
        return {k: w.group() for k, w in zip(names, words)} if len(words) == n else None
    k = names.index("REASON")
    after = n - k - 1
    if len(words) < n:
        return None
    out = {names[j]: words[j].group() for j in range(k)}
    tail = words[len(words) - after:] if after else []
    out.update((names[k + 1 + j], w.group()) for j, w in enumerate(tail))
    last = words[len(words) - after - 1]
    out["REASON"] = line[words[k].start():last.end()]
    return out


def _by_position(line: str, header: list[tuple[int, str]]) -> dict[str, str] | None:
    """``-O`` columns: left-aligned, starting where their header starts."""
    out = {}
    for j, (start, name) in enumerate(header):
        end = header[j + 1][0] if j + 1 < len(header) else len(line)
        if start > len(line):
            return None
        out[name] = line[start:end].strip()
    return out


def _typed(values: dict[str, str]) -> Row | None:
    # NODELIST is the Slurm name; HOSTNAMES (-O NodeHost) the host name, which is the same on
    # most clusters. The caller is told when only the latter was there.
    nodes = expand(values.get("NODELIST") or values.get("HOSTNAMES") or "")
    if not nodes:
        return None
    row = Row(nodes)
    if "NODES" in values and not _COUNT.match(values["NODES"]):
        return None
    if "STATE" in values:
        raw = values["STATE"]
        if not raw or parse_state(raw)[0] not in KNOWN_STATES:
            return None
        row.state = raw
    if "REASON" in values:
        reason = values["REASON"].strip()
        row.reason = None if reason in ("", "none", "(null)") else reason
    if "USER" in values:
        user = values["USER"]
        row.user = None if user in ("", "(null)", "Unknown") else user
    if "TIMESTAMP" in values:
        stamp = values["TIMESTAMP"]
        if stamp not in _UNKNOWN_TIME:
            row.time = parse_slurm_time(stamp)
            if row.time is None:
                return None
    if "PARTITION" in values:
        row.partition = values["PARTITION"].rstrip("*") or None
    return row


def expand(text: str) -> list[str]:
    """A hostlist (``gpu[01-04,09],login1``) as node names; [] when it is not one."""
    text = text.strip()
    if not text or any(c.isspace() for c in text) or text.startswith(("-", "[")):
        return []
    if "[" not in text:
        names = text.split(",")
        return names if all(_plain_name(n) for n in names) else []
    import hostlist

    try:
        names = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist:
        return []
    return names if all(_plain_name(n) for n in names) else []  # hostlist refuses > 100,000 names


def _plain_name(name: str) -> bool:
    return bool(name) and name.isprintable() and not any(c in name for c in "[]=$#%>|\"'")
