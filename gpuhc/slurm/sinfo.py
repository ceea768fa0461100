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
reason user, reason. The reason goes last and is split off with a bounded split, so a ``|`` in
an admin's reason cannot shift the other fields. sinfo prints ``none`` for a node without a
reason, ``Unknown`` for a missing time or user, and marks the default partition with ``*``.
"""

from __future__ import annotations

import re

from gpuhc.slurm.nodes import Node, NodeParseError, parse_slurm_time, parse_state

# Field order matters: the reason is last (free text, unbounded width with ":0").
FIELDS = "NodeList:|,Partition:|,StateComplete:|,Timestamp:|,User:|,Reason:0"
_NFIELDS = 6
PARTITION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def one_node_argv(binary: str, name: str) -> list[str]:
    """One node by name (a single name makes sinfo ask for that node only); hidden partitions too."""
    return [binary, "-h", "-a", "-N", "-n", name, "-O", FIELDS]


def ledger_argv(binary: str, name: str) -> list[str]:
    """The breaker ledger's record (:mod:`gpuhc.slurm.ledger`), asked of it alone: its reason
    stamp, its ``Extra`` (the claims) and its ``Comment`` (the counts)."""
    return [binary, "-h", "-a", "-N", "-n", name, "-O", "NodeList:|,StateComplete:|,Timestamp:|,Extra:|,Comment:0"]


def parse_ledger(text: str, name: str) -> tuple[str, str, float | None, str] | None:
    """(comment, extra, reason stamp, state) of ``name`` from :func:`ledger_argv`'s answer; None
    when sinfo did not list it (a node in no partition). sinfo prints ``(null)`` for an empty
    field. gpuhc's own extra field holds no ``|``; someone else's that does shifts the comment,
    which then reads as someone else's too (and the ledger is left alone)."""
    for line in text.splitlines():
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


def parse(text: str) -> list[Node]:
    """sinfo lines in :data:`FIELDS` order -> one Node per node name, its partitions merged
    (sinfo lists a node once per partition). Node lists are hostlists (grouped output)."""
    import hostlist

    rows: dict[str, dict] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", _NFIELDS - 1)
        if len(parts) != _NFIELDS:
            raise NodeParseError(f"sinfo line {lineno}: {len(parts)} fields, expected {_NFIELDS}: {line[:80]!r}")
        names, partition, state, stamp, user = (p.strip() for p in parts[:5])
        reason = parts[5].rstrip()
        try:
            expanded = hostlist.expand_hostlist(names)
        except hostlist.BadHostlist as e:
            raise NodeParseError(f"sinfo line {lineno}: node list {names[:60]!r}: {e}") from None
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
