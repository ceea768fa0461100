"""Node readings through ``sinfo``: the cheap way to ask slurmctld about one node or one scope.

Why not ``scontrol show node NAME``: on Slurm 22.05 it fetches *every* node record from the
controller and filters on the client (measured: 3.25 MB served per call on a 10,000-node
controller, for a 650-byte answer). ``sinfo -n NAME`` with a single node name asks for that node
alone (REQUEST_NODE_INFO_SINGLE) plus the partition table: 17 KB on the same controller. The
state filters of sinfo (``-t``, ``-p``) are applied on the client, so a breaker count costs one
full node table whatever the query; sinfo's grouped output at least keeps the answer gpuhc
parses to one line per distinct (partition, state, reason) instead of 5 MB of text.
``docs/slurm.md`` ("Slurm traffic") has the measurements.

Output format (``-O``, sinfo 20.11 onwards): node list, partition, complete state, reason time,
reason user, reason, then :data:`END`. The reason goes last and is split off with a bounded
split, so a ``|`` in an admin's reason cannot shift the other fields. sinfo prints ``none`` for
a node without a reason, ``Unknown`` for a missing time or user, and marks the default partition
with ``*``.

A reason is other people's bytes: sinfo prints it raw, a newline, a carriage return, escape
sequences, bytes that are not UTF-8 and 64 KiB of text included (measured on 22.05, 24.11 and
26.05: docs/slurm.md, "Reading Slurm's output"). So a record is not a line: it ends where sinfo
printed the reason's suffix :data:`END` and then a newline, and only the reason may hold a
newline. A record that still does not read is skipped with one warning naming it; it never
makes the other nodes' records unreadable (docs/security.md, "Slurm output").
"""

from __future__ import annotations

import re
from typing import Callable

from gpuhc.text.logtext import escape
from gpuhc.slurm.read.nodes import Node, NodeParseError, parse_slurm_time, parse_state

# Each record's end: sinfo prints a field's suffix (what follows its width in -O) right after the
# value, so this comes after the reason and before sinfo's newline. No reason typed by a person
# holds it followed by a newline; the fields before the reason hold no newline at all.
END = "|gpuhc-eor"
# Field order matters: the reason is last (free text, unbounded width with ":0").
FIELDS = "NodeList:|,Partition:|,StateComplete:|,Timestamp:|,User:|,Reason:0" + END
_NFIELDS = 6
Warn = Callable[[str], None]
PARTITION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def one_node_argv(binary: str, name: str) -> list[str]:
    """One node by name (a single name makes sinfo ask for that node only); hidden partitions too."""
    return [binary, "-h", "-a", "-N", "-n", name, "-O", FIELDS]


def ledger_argv(binary: str, name: str) -> list[str]:
    """The breaker ledger's record (:mod:`gpuhc.slurm.policy.ledger`), asked of it alone: its reason
    stamp, its ``Extra`` (the claims) and its ``Comment`` (the counts)."""
    return [binary, "-h", "-a", "-N", "-n", name, "-O", "NodeList:|,StateComplete:|,Timestamp:|,Extra:|,Comment:0"]


def parse_ledger(text: str, name: str) -> tuple[str, str, float | None, str] | None:
    """(comment, extra, reason stamp, state) of ``name`` from :func:`ledger_argv`'s answer; None
    when sinfo did not list it (a node in no partition). sinfo prints ``(null)`` for an empty
    field. gpuhc's own extra field holds no ``|``; someone else's that does shifts the comment,
    which then reads as someone else's too (and the ledger is left alone)."""
    for line in text.split("\n"):  # not splitlines: a \r or \x1c in a field is not a line end
        parts = line.split("|", 4)
        if len(parts) == 5 and parts[0].strip() == name:
            comment, extra = (_field(p) for p in (parts[4], parts[3]))
            return comment, extra, parse_slurm_time(parts[2]), parts[1].strip()
    return None


def _field(text: str) -> str:
    text = text.strip()
    return "" if text in ("(null)", "none") else text


def scope_argv(binary: str, partitions: list[str] | None) -> list[str]:
    """Every node of these partitions (all partitions, hidden ones too, when None), grouped by
    identical rows. sinfo refuses ``-a`` with ``-p``; a partition named in ``-p`` is shown even
    when hidden."""
    if partitions:
        return [binary, "-h", "-O", FIELDS, "-p", ",".join(partitions)]
    return [binary, "-h", "-a", "-O", FIELDS]


def records(text: str) -> tuple[list[str], str]:
    """The records of an answer in :data:`FIELDS` order (their :data:`END` cut off), and what
    followed the last one (empty for a whole answer)."""
    chunks = text.split(END + "\n")
    return chunks[:-1], chunks[-1]


def parse(text: str, warn: Warn | None = None) -> list[Node]:
    """sinfo records in :data:`FIELDS` order -> one Node per node name, its partitions merged
    (sinfo lists a node once per partition). Node lists are hostlists (grouped output).

    A record that does not read is skipped and said through ``warn``, once, naming it (escaped:
    its text is Slurm's); without ``warn`` it is a :class:`NodeParseError`. Either way no other
    record is lost to it."""
    import hostlist

    rows: dict[str, dict] = {}
    found, rest = records(text)
    items: list[tuple[str, str | None]] = [(r, None) for r in found]
    if rest.strip():  # an answer cut short: its last record has no END
        items.append((rest, f"no end of record ({END!r} and a newline)"))
    for record, problem in items:
        parts = record.split("|", _NFIELDS - 1)
        if problem is None and len(parts) != _NFIELDS:
            problem = f"{len(parts)} fields, expected {_NFIELDS}"
        if problem is None and any(c in p for p in parts[:5] for c in "\r\n"):
            problem = "a line break before the reason"
        if problem is None:
            names = parts[0].strip()
            try:
                expanded = hostlist.expand_hostlist(names)
            except hostlist.BadHostlist as e:
                problem = f"node list {escape(names, 60)}: {escape(e, 80)}"
        if problem is not None:
            what = f"sinfo record {escape(record.lstrip(), 60)!r}: {problem}"
            if warn is None:
                raise NodeParseError(what)
            warn(f"skipped unreadable {what}")
            continue
        partition, state, stamp, user = (p.strip() for p in parts[1:5])
        reason = parts[5].rstrip()
        for name in expanded:
            row = rows.get(name)
            if row is None:
                rows[name] = row = {"state": state, "stamp": stamp, "user": user, "reason": reason, "parts": []}
            part = partition.rstrip("*")
            if part and part not in row["parts"]:
                row["parts"].append(part)
    return [_node(name, row) for name, row in rows.items()]


def _node(name: str, row: dict) -> Node:
    base, flags = parse_state(row["state"])
    reason = None if row["reason"] in ("", "none", "(null)") else row["reason"]
    user = None if row["user"] in ("", "Unknown", "(null)") else row["user"]
    return Node(name=name, state=base, flags=flags, reason=reason, reason_user=user if reason else None,
                reason_time=parse_slurm_time(row["stamp"]) if reason else None, partitions=tuple(row["parts"]),
                raw_state=row["state"].upper())
