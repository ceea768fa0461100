"""From "this group is slow" to "this node is bad": follow-up rounds that name the culprit.

A failing group says only that one of its members (or a link between them) is bad. Evidence is
read from every judged group of the sweep so far, all rounds together:

- a node in any passing group is **cleared**: a bad node slows every collective it is part of;
- in a failing group, the members not cleared are **accused**;
- a node is a **culprit** when it failed at least twice and at least once as the only accused
  member of a failing group (every other member was cleared). Two failures, so that a single
  noisy measurement never drains a good node;
- a failing group whose members are all cleared points at the links between them (or at a
  transient): it is re-run once as it was (**confirm**); failing again makes the group a
  **link** culprit, named but not drained (no single node to blame); passing clears it.

The next round tests every accused node that is not yet a culprit:

- **isolate**: the suspect with ``size - 1`` known-good helpers (same leaf switch where
  possible, so the group keeps its shape and span and is judged against the same fleet);
- **bisect** (when helpers are short, or by choice): the accused set of a failing group is
  split in halves, each filled up with helpers; the failing half is split again next round.

Pure: the caller runs the groups and hands back the verdicts. ``gpuhc sweep simulate`` drives
this very code against a synthetic cluster; ``gpuhc sweep analyze`` against Slurm jobs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from gpuhc.sweep.judge import FAIL, PASS
from gpuhc.sweep.plan import Group, group_id


@dataclass
class Outcome:
    """A judged group."""

    group: Group
    status: str  # pass / fail / error
    evidence: str = ""


@dataclass
class Culprit:
    kind: str  # "node" or "link"
    nodes: list[str]
    evidence: str
    group: str  # the group whose result named it

    def to_dict(self) -> dict:
        return {"kind": self.kind, "nodes": self.nodes, "evidence": self.evidence, "group": self.group}


@dataclass
class Findings:
    cleared: set[str] = field(default_factory=set)
    culprits: list[Culprit] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)  # accused, not yet culprits
    to_confirm: list[Group] = field(default_factory=list)  # all-cleared failing groups seen once
    transient: list[str] = field(default_factory=list)  # group ids whose failure did not repeat

    @property
    def culprit_nodes(self) -> set[str]:
        return {n for c in self.culprits if c.kind == "node" for n in c.nodes}


def assess(outcomes: Sequence[Outcome]) -> Findings:
    f = Findings()
    f.cleared = {n for o in outcomes if o.status == PASS for n in o.group.nodes}
    fails = [o for o in outcomes if o.status == FAIL]
    fail_count = Counter(n for o in fails for n in o.group.nodes)
    isolated: dict[str, Outcome] = {}
    accused_order: list[str] = []
    for o in fails:
        accused = [n for n in o.group.nodes if n not in f.cleared]
        for n in accused:
            if n not in accused_order:
                accused_order.append(n)
        if len(accused) == 1:
            isolated.setdefault(accused[0], o)
            # Prefer the latest isolated failure as evidence: it is the cleanest measurement.
            if o.group.round >= isolated[accused[0]].group.round:
                isolated[accused[0]] = o
    for n in accused_order:
        if n in isolated and fail_count[n] >= 2:
            o = isolated[n]
            f.culprits.append(Culprit("node", [n], o.evidence, o.group.id))
        else:
            f.suspects.append(n)
    f.culprits += _links(outcomes, fails, f)
    return f


def _links(outcomes: Sequence[Outcome], fails: list[Outcome], f: Findings) -> list[Culprit]:
    """Failing groups that no member explains: confirm once, then name the link."""
    passed_sets = {frozenset(o.group.nodes) for o in outcomes if o.status == PASS}
    by_set: dict[frozenset, list[Outcome]] = {}
    for o in fails:
        if all(n in f.cleared for n in o.group.nodes):
            by_set.setdefault(frozenset(o.group.nodes), []).append(o)
    out = []
    for members, group_fails in by_set.items():
        if members in passed_sets:
            f.transient.extend(o.group.id for o in group_fails)
        elif len(group_fails) >= 2:
            last = group_fails[-1]
            out.append(Culprit("link", sorted(members), last.evidence, last.group.id))
        else:
            f.to_confirm.append(group_fails[0].group)
    return out


@dataclass
class RoundPlan:
    groups: list[Group]
    deferred: list[str]  # suspects that could not be tested this round (no helpers)


def next_round(
    outcomes: Sequence[Outcome],
    findings: Findings,
    round_no: int,
    helpers: Iterable[str],
    strategy: str = "auto",
    leaf_of: dict[str, str] | None = None,
) -> RoundPlan:
    """Groups for round ``round_no``; ``helpers`` are nodes free to join (idle, in order of
    preference); only cleared, unaccused ones are used."""
    leaf_of = leaf_of or {}
    busy: set[str] = set()
    groups: list[Group] = []

    def add(nodes: list[str], purpose: str, like: Group, suspects: list[str]) -> None:
        span = like.span
        if span and leaf_of:  # helpers from another leaf turn a leaf group into a cross one
            span = "leaf" if len({leaf_of.get(n) for n in nodes}) == 1 else "cross"
        groups.append(Group(group_id(round_no, len(groups)), nodes, round_no, purpose, span,
                            like.ranks_per_node, suspects=suspects))
        busy.update(nodes)

    for g in findings.to_confirm:
        add(list(g.nodes), "confirm", g, [])
    culprits = findings.culprit_nodes
    pool = [h for h in dict.fromkeys(helpers) if h in findings.cleared and h not in culprits and h not in busy
            and h not in findings.suspects]
    home = _home_groups(outcomes, findings.suspects)
    pending = [s for s in findings.suspects if s not in busy]
    need_isolate = sum(len(home[s].nodes) - 1 for s in pending)
    use_bisect = strategy == "bisect" or (strategy == "auto" and need_isolate > len(pool))
    deferred: list[str] = []
    if use_bisect:
        batches = _bisect_batches(outcomes, findings, pending)
    else:
        batches = [[s] for s in pending]
    for batch in batches:
        like = home[batch[0]]
        want = len(like.nodes) - len(batch)
        if want < 0:  # a half larger than the group size cannot happen; keep the shape anyway
            batch, want = batch[: len(like.nodes)], 0
        fill = _pick(pool, want, leaf_of.get(batch[0]) if like.span == "leaf" else None, leaf_of)
        if fill is None:
            deferred.extend(batch)
            continue
        for h in fill:
            pool.remove(h)
        purpose = "isolate" if len(batch) == 1 else "bisect"
        add(list(batch) + fill, purpose, like, list(batch))
    return RoundPlan(groups, deferred)


def _home_groups(outcomes: Sequence[Outcome], suspects: Iterable[str]) -> dict[str, Group]:
    """Each suspect's first failing group: its size and span are what the follow-up copies."""
    home: dict[str, Group] = {}
    for o in outcomes:
        if o.status == FAIL:
            for n in o.group.nodes:
                home.setdefault(n, o.group)
    return {s: home[s] for s in suspects}


def _bisect_batches(outcomes: Sequence[Outcome], findings: Findings, pending: list[str]) -> list[list[str]]:
    """Halves of each failing group's accused set (latest failing group per suspect wins)."""
    latest: dict[str, tuple[int, list[str]]] = {}
    for o in outcomes:
        if o.status != FAIL:
            continue
        accused = [n for n in o.group.nodes if n in pending]
        for n in accused:
            if n not in latest or o.group.round >= latest[n][0]:
                latest[n] = (o.group.round, accused)
    batches, seen = [], set()
    for n in pending:
        if n in seen:
            continue
        accused = [m for m in latest[n][1] if m not in seen]
        seen.update(accused)
        half = (len(accused) + 1) // 2
        batches.extend(b for b in (accused[:half], accused[half:]) if b)
    return batches


def _pick(pool: list[str], want: int, leaf: str | None, leaf_of: dict[str, str]) -> list[str] | None:
    """``want`` helpers, from ``leaf`` first when the group should stay inside one switch."""
    if want == 0:
        return []
    if leaf is not None:
        same = [h for h in pool if leaf_of.get(h) == leaf]
        if len(same) >= want:
            return same[:want]
    if len(pool) < want:
        return None
    return pool[:want]
