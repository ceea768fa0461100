"""Per-node lines of ``gpuhc drain-report``: named fields (``-o/--format``), ``--parsable`` and CSV.

The habits of sinfo and sacct: ``-o node,reason,age`` picks the fields, ``--parsable`` joins
them with a delimiter (``|`` by default, no trailing one, no padding) for awk and scripts,
``--noheader`` drops the header line. Values are the text Slurm gave, not shortened, made one
printable line by the one escaper (:func:`gpuhc.text.logtext.escape`: a newline, ESC or BEL in a
reason or a node name shows as ``\\x0a``, never acts), so one node is one line in every form; a
reason holding the delimiter is printed as it is, as sacct does. ``--json`` keeps the exact text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from gpuhc.text.logtext import escape
from gpuhc.slurm.report.build import DrainReport, Entry, ReportError, humanize_age, step_of


def _since(e: Entry) -> str:
    t = e.node.reason_time
    try:
        return datetime.fromtimestamp(t).isoformat(timespec="seconds") if t else ""
    except (OverflowError, OSError, ValueError):
        return ""


FIELDS: dict[str, Callable[[Entry], str]] = {
    "node": lambda e: e.node.name,
    "kind": lambda e: e.kind,
    "state": lambda e: e.node.raw_state,
    "flags": lambda e: "+".join(sorted(e.node.flags)),
    "cause": lambda e: e.cause,
    "owner": lambda e: e.owner,
    "reason": lambda e: e.node.reason or "",
    "user": lambda e: e.node.reason_user or "",
    "since": _since,
    "age": lambda e: humanize_age(e.age_s),
    "age_s": lambda e: "" if e.age_s is None else str(int(e.age_s)),
    "partitions": lambda e: ",".join(e.node.partitions),
    "doubt": lambda e: e.node.reason_doubt,
    "incident": lambda e: e.incident,  # the suspect switch, when the node's failure is one of an incident's
    "step": lambda e: step_of(e.node) or "",
}
DEFAULT_FIELDS = ("node", "kind", "owner", "cause", "age", "reason")
CSV_FIELDS = ("node", "kind", "state", "flags", "cause", "owner", "reason", "user", "since", "age_s", "partitions",
              "incident")


def parse_fields(text: str | None) -> tuple[str, ...]:
    """``node,Reason, age`` -> ("node", "reason", "age"); None or empty: the default set."""
    if not text or not text.strip():
        return DEFAULT_FIELDS
    names = tuple(f.strip().lower() for f in text.split(",") if f.strip())
    bad = [n for n in names if n not in FIELDS]
    if bad or not names:
        raise ReportError(f"unknown field {', '.join(bad) or '(none)'} for -o/--format (choose from {', '.join(FIELDS)})")
    return names


def field_value(entry: Entry, name: str) -> str:
    """The field as a person or a line-based script reads it: one printable line."""
    return escape(FIELDS[name](entry))


def render_fields(report: DrainReport, fields: tuple[str, ...], delimiter: str | None, header: bool = True) -> str:
    """One line per node: joined by ``delimiter`` (``--parsable``), else in aligned columns."""
    rows = [[field_value(e, f) for f in fields] for e in report.entries]
    head = [f.upper() for f in fields]
    if delimiter is not None:
        # A reason is anyone's text: the delimiter inside a value is written \xNN (as gpuhc
        # escapes what it cannot print), so no value shifts the fields after it.
        safe = "".join(f"\\x{ord(ch):02x}" for ch in delimiter) if delimiter else delimiter
        rows = [[v.replace(delimiter, safe) if delimiter else v for v in r] for r in rows]
        lines = ([delimiter.join(head)] if header else []) + [delimiter.join(r) for r in rows]
        return "".join(line + "\n" for line in lines)
    table = ([head] if header else []) + rows
    if not table:
        return ""
    widths = [max(len(r[i]) for r in table) for i in range(len(fields) - 1)]
    return "".join("  ".join([c.ljust(w) for c, w in zip(r, widths)] + [r[-1]]).rstrip() + "\n" for r in table)
