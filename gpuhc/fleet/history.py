"""Out-of-service history: when each node was drained (or went down), why, and when it came back.

Two sources, one shape (:class:`Outage`):

- **Slurm's own node events** (``sacctmgr show event``, kept by slurmdbd): every DOWN/DRAIN/FAIL
  period of every node with its reason, start and end, whoever caused it. Authoritative for the
  end of an outage (an admin's resume shows up here, gpuhc's logs never see it).
- **gpuhc's event logs** (``output.event_log``, one JSON line per run): the verified drains and
  resumes of the Slurm flows, for sites without accounting, or to fill a gap.

Slurm starts a new event whenever a drained node's reason changes (a quarantine cycle, a
reboot's "reboot issued"), so back-to-back events of one node are merged into one outage. The
same drain seen in both sources (starts within :data:`SAME_DRAIN_S`) is counted once, with
Slurm's end.

The event logs are read line by line with a cheap byte test first: a fleet's logs are mostly
healthy runs, and only the few lines that drained or resumed are decoded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Iterable

from gpuhc.export.eventlog import read_records
from gpuhc.slurm.read.nodes import Node, parse_slurm_time, parse_state
from gpuhc.slurm.policy.reason import parse_reason
from gpuhc.slurm.report.build import classify

SAME_DRAIN_S = 300.0  # gpuhc logs its drain a moment after Slurm records it
MERGE_GAP_S = 1.0  # a reason change ends one Slurm event and starts the next in the same second
SACCTMGR_FORMAT = "NodeName,Start,End,State,Reason,User"


@dataclass(frozen=True)
class Outage:
    node: str
    start: float
    end: float | None  # None: still out of service
    reason: str
    cause: str  # the check that drained it (gpuhc), or Slurm's/the admin's cause
    owner: str  # gpuhc / slurm / admin
    retired: bool = False
    source: str = "slurm"  # slurm / eventlog

    def duration(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start

    def to_dict(self) -> dict:
        return {"node": self.node, "start": self.start, "end": self.end, "reason": self.reason, "cause": self.cause,
                "owner": self.owner, "retired": self.retired, "source": self.source}


def classify_reason(reason: str, state: str = "") -> tuple[str, str, bool]:
    """(cause, owner, retired) of an outage's reason, by drain-report's rules."""
    base, flags = parse_state(state.strip() or "IDLE+DRAIN")
    node = Node("?", base, flags, reason.strip() or None, None, None)
    cause, owner = classify(node)
    mine = parse_reason(reason)
    if mine is not None and mine.check:
        cause = mine.check  # "gpuhc: RETIRED xid ...": retired for xid, and retired is a flag
    return cause, owner, bool(mine and mine.retired)


# ---------------------------------------------------------------------------- Slurm


def sacctmgr_argv(start: float, end: float) -> list[str]:
    fmt = "%Y-%m-%dT%H:%M:%S"
    return ["sacctmgr", "--noheader", "--parsable2", "show", "event", "Event=Node",
            f"Start={time.strftime(fmt, time.localtime(start))}", f"End={time.strftime(fmt, time.localtime(end))}",
            f"Format={SACCTMGR_FORMAT}"]


def parse_sacctmgr_events(text: str) -> list[Outage]:
    """``sacctmgr -n -P show event Event=Node Format=NodeName,Start,End,State,Reason,User``.

    The reason is the fifth of six fields but may itself hold ``|``, so the user is taken from
    the right. Lines that do not parse (a cluster event, an unknown time format) are skipped."""
    out = []
    for line in text.splitlines():
        head = line.split("|", 4)
        if len(head) < 5 or not head[0].strip():
            continue
        node, start_s, end_s, state, rest = head
        reason = rest.rsplit("|", 1)[0] if "|" in rest else rest
        start = parse_slurm_time(start_s)
        if start is None:
            continue
        cause, owner, retired = classify_reason(reason, state)
        out.append(Outage(node.strip(), start, parse_slurm_time(end_s), reason.strip(), cause, owner, retired, "slurm"))
    return merge_back_to_back(out)


def merge_back_to_back(outages: Iterable[Outage]) -> list[Outage]:
    """One outage per continuous out-of-service period of a node: cause from its first event,
    retired if any event was, the end of the last. Only events of the same cause merge: a node
    resumed and drained again for something else within a second is two outages."""
    merged: list[Outage] = []
    for o in sorted(outages, key=lambda o: (o.node, o.start)):
        last = merged[-1] if merged else None
        if (last and last.node == o.node and last.end is not None and o.start - last.end <= MERGE_GAP_S
                and o.cause == last.cause):
            end = o.end if o.end is None or o.end > last.end else last.end
            merged[-1] = replace(last, end=end, retired=last.retired or o.retired)
        else:
            merged.append(o)
    return merged


# ---------------------------------------------------------------------------- gpuhc's logs


def read_event_logs(paths: Iterable[str], problems: list[str]) -> list[Outage]:
    """Outages from gpuhc event logs: a verified drain opens one, a verified resume closes it."""
    acts = [(r.time, r.node, r.slurm.action, r.slurm.reason or "")
            for r in read_records(paths, b'"acted":true', problems)
            if r.slurm.acted and r.slurm.action in ("drain", "resume") and r.time is not None]
    return outages_from_acts(acts)


def read_failures(paths: Iterable[str], since: float, problems: list[str]) -> list[tuple[str, str, float, str]]:
    """(node, check, first time, evidence) of every node whose runs since ``since`` wanted to
    drain it, the earliest per node and check: drained, kept drained, or withheld by the circuit
    breaker (which is exactly when a switch outage would otherwise go unseen)."""
    first: dict[tuple[str, str], tuple[float, str]] = {}
    for r in read_records(paths, b'"reason":"gpuhc:', problems):
        mine = parse_reason(r.slurm.reason)
        if mine is None or r.started is None or r.started < since or r.slurm.action not in ("drain", "keep", "blocked"):
            continue
        key = (r.node, mine.check)
        if key not in first or r.started < first[key][0]:
            first[key] = (r.started, mine.body)
    return sorted((n, c, t, body) for (n, c), (t, body) in first.items())


def outages_from_acts(acts: Iterable[tuple[float, str, str, str]]) -> list[Outage]:
    open_: dict[str, Outage] = {}
    out: list[Outage] = []
    for t, node, action, reason in sorted(acts):
        if action == "drain":
            if node in open_:
                continue  # a re-drain (new reason) of a node already out: same outage
            cause, owner, retired = classify_reason(reason)
            open_[node] = Outage(node, t, None, reason, cause, owner, retired, "eventlog")
        elif node in open_:
            out.append(replace(open_.pop(node), end=t))
    return sorted(out + list(open_.values()), key=lambda o: (o.node, o.start))


def combine(slurm: list[Outage], logged: list[Outage]) -> list[Outage]:
    """Slurm's outages, plus the logged ones Slurm did not record (same node, start more than
    :data:`SAME_DRAIN_S` from any of Slurm's)."""
    by_node: dict[str, list[Outage]] = {}
    for o in slurm:
        by_node.setdefault(o.node, []).append(o)
    extra = []
    for o in logged:
        if not any(abs(s.start - o.start) <= SAME_DRAIN_S for s in by_node.get(o.node, [])):
            extra.append(o)
    return sorted(slurm + extra, key=lambda o: (o.start, o.node))
