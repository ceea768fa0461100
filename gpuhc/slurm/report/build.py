"""Who took which nodes out of the schedule, why, and since when: the logic of ``gpuhc drain-report``.

Pure: nodes in, a :class:`DrainReport` out; rendering lives in ``gpuhc/cli/report_render.py``.

Ownership (``owner``) is decided from the reason *text*, never from the user Slurm recorded:
Slurm stamps its own reasons with SlurmUser, but admins run ``scontrol`` as root or as that
same SlurmUser (public slurmrestd samples show ``ECC memory error`` set by ``slurm``), so the
user cannot tell Slurm from a person. The rules, first match wins:

- ``gpuhc`` — the reason starts with ``gpuhc:`` (exactly, case-sensitive, as
  :mod:`gpuhc.slurm.policy.reason` decides what is gpuhc's); the cause is the check id, the first word
  after the prefix without its code (``gpuhc: xid79 gpu3 ...`` and the earlier ``gpuhc: xid Xid 79
  on gpu3`` -> ``xid``, ``gpuhc: RETIRED ...`` -> ``retired``).
- ``slurm`` — the reason is one Slurm writes itself (``Not responding``, ``Prolog error``,
  ``Epilog error``, ``Kill task failed``, ``batch job complete failure``, ``Node unexpectedly
  rebooted``, ``Low RealMemory ...``, ``gres/gpu count reported lower than configured ...``,
  ``reboot timed out``, ...), see :data:`SLURM_REASONS`. A node that is unavailable with *no*
  reason is also Slurm's: ``scontrol`` refuses DRAIN/DOWN/FAIL without a reason, so only
  Slurm (or slurm.conf's ``State=DOWN``) leaves a node out without one.
- ``admin`` — everything else, including other tools' prefixes such as LBNL NHC's ``NHC:``
  (cause ``nhc``): a site tool acting for the admins, which gpuhc must never resume.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterable

from gpuhc.errors import GpuhcError
from gpuhc.text.limits import MAX_DURATION_S
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.reason import HOOK_FAILURES, PREFIX, split_lead

GPUHC_PREFIX = PREFIX
OWNERS = ("gpuhc", "slurm", "admin", "unknown")
# "out": listed as unavailable by a listing that does not say how (`sinfo -R` without -l).
KINDS = ("down", "fail", "draining", "drained", "out")
# --state values: each names the kinds it selects.
STATE_FILTERS: dict[str, frozenset[str]] = {
    "drain": frozenset({"draining", "drained"}),
    "drained": frozenset({"drained"}),
    "draining": frozenset({"draining"}),
    "down": frozenset({"down"}),
    "fail": frozenset({"fail"}),
    "not_responding": frozenset(),  # matched on the flag, see Filters.matches
    "out": frozenset({"out"}),
}

# (lower-case prefix of a reason Slurm writes itself, cause). Checked with str.startswith.
SLURM_REASONS: tuple[tuple[str, str], ...] = (
    ("not responding", "not responding"),
    ("node unexpectedly rebooted", "unexpected reboot"),
    *HOOK_FAILURES,
    ("kill task failed", "kill task failed"),
    ("batch job complete failure", "batch job failure"),
    ("low realmemory", "config mismatch"),
    ("low socket*core*thread", "config mismatch"),
    ("low cpus", "config mismatch"),
    ("low tmpdisk", "config mismatch"),
    ("node configuration differs from hardware", "config mismatch"),
    ("gres/", "gres mismatch"),  # "gres/gpu count reported lower than configured (0 < 8)"
    ("reboot timed out", "reboot timed out"),
    ("resumetimeout reached", "power save"),
    ("duplicate jobid", "duplicate job"),
    ("slurmdspooldir is full", "spool full"),
    ("no network address found", "no address"),
)
# Site tools with their own prefix: owner admin, cause named after the tool.
TOOL_PREFIXES: tuple[tuple[str, str], ...] = (("nhc:", "nhc"), ("nhc ", "nhc"))


class ReportError(GpuhcError):
    """A bad drain-report filter (a duration that does not parse, an unknown state)."""


def classify(node: Node) -> tuple[str, str]:
    """(cause, owner) of an unavailable node, following the module's ownership rules."""
    reason = (node.reason or "").strip()
    low = reason.lower()
    if node.reason_doubt:
        # The reason shown may not be this node's (docs/slurm.md, drain-report): no owner.
        return ("reason not shown" if not reason else "shared reason"), "unknown"
    if reason.startswith(GPUHC_PREFIX):
        words = re.findall(r"[a-z0-9][a-z0-9_.-]*", low[len(GPUHC_PREFIX):])
        return (split_lead(words[0].rstrip("."))[0] if words else "gpuhc"), "gpuhc"  # xid79 -> xid
    if not reason:
        return ("not responding" if node.not_responding else "no reason"), "slurm"
    for prefix, cause in SLURM_REASONS:
        if low.startswith(prefix):
            return cause, "slurm"
    for prefix, cause in TOOL_PREFIXES:
        if low.startswith(prefix):
            return cause, "admin"
    return "admin", "admin"


def step_of(node: Node) -> str | None:
    """The remediation ladder's step a gpuhc reason carries (gpuhc/slurm/repair/ladder.py), as the
    report says it: ``remediating: reset 1/2``, ``reboot pending``, ``rebooted: retest pending``."""
    from gpuhc.slurm.policy.reason import parse_reason

    mine = parse_reason(node.reason)
    if mine is None or mine.step is None:
        return None
    if mine.step != "reboot":
        return f"remediating: {mine.step}"
    pending = {"REBOOT_REQUESTED", "REBOOT_ISSUED"} & node.flags or node.state == "REBOOT"
    return "reboot pending" if pending else "rebooted: retest pending"


def kind_of(node: Node) -> str:
    """The one word the report shows for how a node is out: down beats fail beats draining."""
    if node.down:
        return "down"
    if node.failing:
        return "fail"
    if node.draining:
        return "draining"
    if node.drained:
        return "drained"
    return "out"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(d|h|m|s)?", re.I)
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d12h``, ``1h30m`` -> seconds."""
    s = text.strip().replace(" ", "")
    if not s:
        raise ReportError("empty duration (use e.g. 30m, 2h, 1d)")
    total, pos = 0.0, 0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2).lower() if m.group(2) else None]
        pos = m.end()
    if pos != len(s):
        raise ReportError(f"cannot read duration {text!r} (use e.g. 90s, 30m, 2h, 1d12h)")
    if not total <= MAX_DURATION_S:  # also False for inf/NaN; past it, date arithmetic overflows
        raise ReportError(f"duration {text!r} is longer than {MAX_DURATION_S / 86400 / 365:.0f} years")
    return total


@dataclass(frozen=True)
class Filters:
    """What ``--partition/--state/--owner/--older-than/--newer-than`` ask for; empty = all.

    A node whose reason carries no time has no age: age filters leave it out, because
    "older than 2h" cannot be claimed for it.
    """

    partitions: frozenset[str] = frozenset()
    states: frozenset[str] = frozenset()
    owners: frozenset[str] = frozenset()
    older_than_s: float | None = None
    newer_than_s: float | None = None

    def __post_init__(self) -> None:
        bad = sorted(self.states - set(STATE_FILTERS))
        if bad:
            raise ReportError(f"unknown --state {', '.join(bad)} (choose from {', '.join(STATE_FILTERS)})")
        bad = sorted(self.owners - set(OWNERS))
        if bad:
            raise ReportError(f"unknown --owner {', '.join(bad)} (choose from {', '.join(OWNERS)})")

    def matches(self, entry: "Entry") -> bool:
        if self.partitions and not self.partitions.intersection(entry.node.partitions):
            return False
        if self.states:
            kinds = set().union(*(STATE_FILTERS[s] for s in self.states))
            if entry.kind not in kinds and not ("not_responding" in self.states and entry.node.not_responding):
                return False
        if self.owners and entry.owner not in self.owners:
            return False
        if self.older_than_s is not None and (entry.age_s is None or entry.age_s < self.older_than_s):
            return False
        if self.newer_than_s is not None and (entry.age_s is None or entry.age_s > self.newer_than_s):
            return False
        return True


@dataclass(frozen=True)
class Entry:
    """One unavailable node with its verdict."""

    node: Node
    kind: str
    cause: str
    owner: str
    age_s: float | None  # now - reason_time; None when Slurm gave no time
    incident: str = ""  # the suspect switch this node's failure is grouped under (with_incidents)

    def to_dict(self) -> dict:
        n = self.node
        return {
            "node": n.name, "kind": self.kind, "state": n.raw_state, "flags": sorted(n.flags),
            "cause": self.cause, "owner": self.owner, "reason": n.reason, "user": n.reason_user,
            "since": n.reason_time, "age_s": self.age_s, "partitions": list(n.partitions),
            "reason_doubt": n.reason_doubt or None, "incident": self.incident or None, "step": step_of(n),
        }


@dataclass
class Row:
    """Nodes out for the very same reason text, in the same kind of state."""

    names: list[str]
    kind: str
    owner: str
    reason: str | None
    users: list[str]
    since: float | None  # the oldest reason time among the nodes
    age_s: float | None
    doubt: str = ""  # why the reason may not be these nodes' own (Node.reason_doubt)
    step: str | None = None  # the remediation step the reason carries (step_of)

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def hostlist(self) -> str:
        return compress(self.names)

    def to_dict(self) -> dict:
        return {"nodes": self.hostlist, "count": self.count, "kind": self.kind, "owner": self.owner,
                "reason": self.reason, "users": self.users, "since": self.since, "age_s": self.age_s,
                "reason_doubt": self.doubt or None, "step": self.step}


@dataclass
class Group:
    """All nodes out for one cause (a gpuhc check id, a Slurm reason, or admin)."""

    cause: str
    owner: str
    rows: list[Row] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(r.count for r in self.rows)

    def to_dict(self) -> dict:
        return {"cause": self.cause, "owner": self.owner, "count": self.count, "rows": [r.to_dict() for r in self.rows]}


@dataclass
class DrainReport:
    now: float
    total_nodes: int
    entries: list[Entry]  # after filtering, sorted by node name
    groups: list[Group]  # biggest first
    partitions: dict[str, tuple[int, int]]  # name -> (unavailable shown, nodes in partition)
    filters: Filters
    incidents: list = field(default_factory=list)  # gpuhc.fleet.switches.Incident, by with_incidents

    @property
    def by_kind(self) -> dict[str, int]:
        counts = Counter(e.kind for e in self.entries)
        return {k: counts[k] for k in KINDS if counts[k]}

    @property
    def by_owner(self) -> dict[str, int]:
        counts = Counter(e.owner for e in self.entries)
        return {k: counts[k] for k in OWNERS if counts[k]}

    def to_dict(self) -> dict:
        return {
            "generated_at": self.now,
            "total_nodes": self.total_nodes,
            "unavailable": len(self.entries),
            "by_kind": self.by_kind,
            "by_owner": self.by_owner,
            "partitions": {p: {"unavailable": u, "total": t} for p, (u, t) in self.partitions.items()},
            "incidents": [i.to_dict() for i in self.incidents],
            "groups": [g.to_dict() for g in self.groups],
            "nodes": [e.to_dict() for e in self.entries],
        }


def build_report(nodes: Iterable[Node], now: float, filters: Filters | None = None) -> DrainReport:
    """Classify every unavailable node, filter, and group by cause, then by identical reason."""
    filters = filters or Filters()
    all_nodes = list(nodes)
    entries: list[Entry] = []
    part_total: Counter[str] = Counter()
    # Nodes share a handful of partition lists: count the lists, then spread (10x fewer updates).
    for parts, k in Counter(node.partitions for node in all_nodes).items():
        for p in parts:
            part_total[p] += k
    for node in all_nodes:
        if not node.unavailable:
            continue
        cause, owner = classify(node)
        age = max(0.0, now - node.reason_time) if node.reason_time else None
        entry = Entry(node, kind_of(node), cause, owner, age)
        if filters.matches(entry):
            entries.append(entry)
    entries.sort(key=lambda e: e.node.name)
    ordered = _group(entries)

    shown: Counter[str] = Counter()
    for e in entries:
        shown.update(e.node.partitions)
    wanted = filters.partitions or set(part_total)
    partitions = {p: (shown[p], part_total[p]) for p in sorted(part_total) if p in wanted}
    return DrainReport(now, len(all_nodes), entries, ordered, partitions, filters)


def _group(entries: list[Entry]) -> list[Group]:
    """By cause, then by identical reason; biggest cause first."""
    groups: dict[tuple[str, str], Group] = {}
    rows: dict[tuple, Row] = {}
    for e in entries:
        g = groups.get((e.cause, e.owner))
        if g is None:
            g = groups[(e.cause, e.owner)] = Group(e.cause, e.owner)
        step = step_of(e.node)
        key = (e.cause, e.owner, e.kind, e.node.reason, e.node.reason_doubt, step)
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row([], e.kind, e.owner, e.node.reason, [], None, None, e.node.reason_doubt, step)
            g.rows.append(row)
        row.names.append(e.node.name)
        if e.node.reason_user and e.node.reason_user not in row.users:
            row.users.append(e.node.reason_user)
        t = e.node.reason_time
        if t and (row.since is None or t < row.since):
            row.since, row.age_s = t, e.age_s
    for g in groups.values():
        g.rows.sort(key=lambda r: (-r.count, -(r.age_s or 0.0), r.reason or ""))
    return sorted(groups.values(), key=lambda g: (-g.count, g.cause))


def with_incidents(report: DrainReport, incidents: list) -> DrainReport:
    """The report with its suspect-switch incidents (:func:`gpuhc.fleet.switches.group_by_switch`
    over the nodes it shows; docs/repair.md). An incident's nodes leave the per-cause groups
    (one switch is not N unrelated failures); every entry stays, naming its incident."""
    switch_of = {node: inc.switch for inc in incidents for node in inc.nodes}
    entries = [replace(e, incident=switch_of[e.node.name]) if e.node.name in switch_of else e for e in report.entries]
    return replace(report, entries=entries, incidents=list(incidents),
                   groups=_group([e for e in entries if not e.incident]))


def compress(names: list[str]) -> str:
    """Hostlist-compress node names (``gpu[001-004,009]``).

    python-hostlist's ``collect_hostlist`` sorts and removes duplicates, and it may also treat
    names that differ in zero padding as one range; the caller passes each node once, and we
    fall back to a plain comma list if it cannot make sense of the names.
    """
    if not names:
        return ""
    if len(names) == 1:
        return names[0]
    import hostlist

    try:
        return hostlist.collect_hostlist(names)
    except Exception:  # a name hostlist cannot parse (odd brackets): still show every node
        return ",".join(sorted(set(names)))


def humanize_age(seconds: float | None) -> str:
    """``3d04h``, ``2h05m``, ``45m``, ``30s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h"
    if h:
        return f"{h}h{m:02d}m"
    if m:
        return f"{m}m"
    return f"{s}s"
