"""From "this group is slow" to "this node is bad": follow-up rounds that name the culprit.

A failing group says only that one of its members (or a link between them) is bad, and one
failure may be a transient (someone else's traffic, a hiccup). Evidence is read from every
judged group of the sweep so far, all rounds together, per distinct member set:

- a node in any passing group is **cleared**: a bad node slows every collective it is part of;
- a member set that both failed and passed (the same nodes, run again) was a **transient**:
  its failures count against nobody;
- a failure counts against node ``n`` only when every *other* member of that group is cleared.
  A group that also holds another bad (never cleared) node is explained by that node, so it
  never counts against its mates: that is how a good node sharing a group with a culprit stays
  safe;
- a node is a **culprit** when such failures add up to at least ``NODE_MIN_FAILURES`` (3) in at
  least ``NODE_MIN_SETS`` (2) different member sets. Two sets: one pair failing twice may be
  the link between them, not the node. Three failures: two independent transients on the same
  node (rare, but a sweep of 1,024 nodes has ~500 groups) must not drain it;
- a failing set whose members are all cleared points at the links between them (or at a
  transient): it is re-run (**confirm**) until it has failed ``LINK_MIN_FAILURES`` (3) times,
  which names it a **link** culprit (named, never drained: no single node to blame), or
  passes once, which makes it a transient.

The next round tests every suspect (accused, not cleared, not yet a culprit) so that a bad
node is named by the end of it:

- a suspect with no failure of its own yet (all its groups held other suspects) is **isolated**
  twice: two groups, each the suspect with ``size - 1`` known-good helpers (same leaf switch
  where possible, so the group keeps its shape and span and is judged against the same fleet).
  A bad node then has three failures in three sets (its first group, once its mates pass, and
  the two isolates) after one follow-up round; a good node that meets one transient in them
  is still cleared by the other;
- a suspect that already has failures of its own gets each set that failed only once re-run
  (confirm), plus a fresh isolate while it has fewer than two sets;
- **bisect** (when helpers are short, or by choice): the accused set of a failing group is
  split in halves, each filled up with helpers; the failing half is split again next round,
  and a half of one is isolated as above.

A suspect may be in more than one group of a round (its two isolates, its re-runs): Slurm runs
jobs that share a node one after the other, and the round is judged when all have ended.
Helpers serve in at most ``MAX_HELPER_JOBS`` groups per round, preferably one.

Pure: the caller runs the groups and hands back the verdicts. ``gpuhc sweep simulate`` drives
this very code against a synthetic cluster; ``gpuhc sweep analyze`` against Slurm jobs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from gpuhc.sweep.judge import FAIL, PASS
from gpuhc.sweep.plan import Group, group_id

NODE_MIN_FAILURES = 3
NODE_MIN_SETS = 2
LINK_MIN_FAILURES = 3
MAX_HELPER_JOBS = 2


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
class MemberSet:
    """Every run of one set of nodes, whatever round or purpose it had."""

    group: Group  # the first group with these members: reruns copy it
    fails: list[Outcome] = field(default_factory=list)
    passes: int = 0

    @property
    def nodes(self) -> list[str]:
        return list(self.group.nodes)


@dataclass
class Findings:
    cleared: set[str] = field(default_factory=set)
    culprits: list[Culprit] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)  # accused, not yet culprits
    to_confirm: list[Group] = field(default_factory=list)  # all-cleared failing sets, not yet links
    transient: list[str] = field(default_factory=list)  # group ids whose failure did not repeat
    # Per suspect: the failing sets that count against it (every other member cleared).
    evidence: dict[str, list[MemberSet]] = field(default_factory=dict)
    # Per set still to confirm (key: sorted member tuple): how often it failed so far.
    confirm_fails: dict[tuple, int] = field(default_factory=dict)

    @property
    def culprit_nodes(self) -> set[str]:
        return {n for c in self.culprits if c.kind == "node" for n in c.nodes}


def member_sets(outcomes: Sequence[Outcome]) -> dict[frozenset, MemberSet]:
    """Judged runs grouped by member set, in the order the sets first ran (errors left out:
    they measured nothing)."""
    sets: dict[frozenset, MemberSet] = {}
    for o in outcomes:
        if o.status not in (PASS, FAIL):
            continue
        entry = sets.setdefault(frozenset(o.group.nodes), MemberSet(o.group))
        if o.status == PASS:
            entry.passes += 1
        else:
            entry.fails.append(o)
    return sets


def assess(outcomes: Sequence[Outcome]) -> Findings:
    f = Findings()
    f.cleared = {n for o in outcomes if o.status == PASS for n in o.group.nodes}
    sets = member_sets(outcomes)
    live: list[MemberSet] = []
    for s in sets.values():
        if s.fails and s.passes:
            f.transient.extend(o.group.id for o in s.fails)
        elif s.fails:
            live.append(s)
    accused_order: list[str] = []
    for s in sorted(live, key=lambda s: _first_seen(s, outcomes)):
        for n in s.nodes:
            if n not in f.cleared and n not in accused_order:
                accused_order.append(n)
    for n in accused_order:
        own = [s for s in live if n in s.group.nodes and all(m in f.cleared for m in s.nodes if m != n)]
        if len(own) >= NODE_MIN_SETS and sum(len(s.fails) for s in own) >= NODE_MIN_FAILURES:
            o = _best_evidence([x for s in own for x in s.fails])
            f.culprits.append(Culprit("node", [n], o.evidence, o.group.id))
        else:
            f.suspects.append(n)
            f.evidence[n] = own
    for s in live:
        if all(n in f.cleared for n in s.nodes):
            if len(s.fails) >= LINK_MIN_FAILURES:
                last = s.fails[-1]
                f.culprits.append(Culprit("link", sorted(s.nodes), last.evidence, last.group.id))
            else:
                f.to_confirm.append(s.group)
                f.confirm_fails[tuple(sorted(s.nodes))] = len(s.fails)
    return f


def _first_seen(s: MemberSet, outcomes: Sequence[Outcome]) -> int:
    return next(i for i, o in enumerate(outcomes) if o is s.fails[0])


def _best_evidence(fails: list[Outcome]) -> Outcome:
    """The latest failure is the cleanest measurement (its mates were known good)."""
    return max(fails, key=lambda o: o.group.round)


@dataclass
class RoundPlan:
    groups: list[Group]
    deferred: list[str]  # suspects that could not be tested this round (no helpers)


class _Helpers:
    """Known-good nodes free to join follow-up groups: least used first, at most
    ``MAX_HELPER_JOBS`` groups each, from the suspect's leaf switch when the group is a leaf one."""

    def __init__(self, pool: list[str], leaf_of: dict[str, str]):
        self.pool, self.leaf_of = pool, leaf_of
        self.used: Counter = Counter()

    def capacity(self) -> int:
        return len(self.pool) * MAX_HELPER_JOBS

    def pick(self, want: int, leaf: str | None, avoid: set[str], exclude_sets: set[frozenset] = frozenset(),
             with_node: str | None = None) -> list[str] | None:
        """``want`` helpers not in ``avoid``; with ``exclude_sets``, never a choice that together
        with ``with_node`` makes one of those sets again."""
        if want == 0:
            return []
        chosen = None
        if leaf is not None:
            chosen = self._take(want, avoid, lambda h: self.leaf_of.get(h) == leaf)
        if chosen is None:
            chosen = self._take(want, avoid, lambda h: True)
        if chosen is not None and frozenset([with_node, *chosen]) in exclude_sets:
            chosen = None
        if chosen is not None:
            self.used.update(chosen)
        return chosen

    def _take(self, want: int, avoid: set[str], ok) -> list[str] | None:
        """The first ``want`` acceptable helpers, unused ones before those used once."""
        out: list[str] = []
        for level in range(MAX_HELPER_JOBS):
            for h in self.pool:
                if self.used[h] == level and h not in avoid and h not in out and ok(h):
                    out.append(h)
                    if len(out) == want:
                        return out
        return None


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
    groups: list[Group] = []

    def add(nodes: list[str], purpose: str, like: Group, suspects: list[str]) -> None:
        span = like.span
        if span and leaf_of:  # helpers from another leaf turn a leaf group into a cross one
            span = "leaf" if len({leaf_of.get(n) for n in nodes}) == 1 else "cross"
        groups.append(Group(group_id(round_no, len(groups)), nodes, round_no, purpose, span,
                            like.ranks_per_node, suspects=suspects))

    for g in findings.to_confirm:  # re-run until it failed LINK_MIN_FAILURES times or passed
        for _ in range(LINK_MIN_FAILURES - findings.confirm_fails.get(tuple(sorted(g.nodes)), 1)):
            add(list(g.nodes), "confirm", g, [])
    culprits = findings.culprit_nodes
    in_reruns = {n for g in groups for n in g.nodes}
    pending = list(findings.suspects)
    reruns: dict[str, list[MemberSet]] = {}
    fresh: dict[str, int] = {}
    for s in pending:
        own = findings.evidence.get(s, [])
        reruns[s] = [m for m in own if len(m.fails) == 1]
        fresh[s] = max(0, NODE_MIN_SETS - len(own))
        in_reruns.update(n for m in reruns[s] for n in m.nodes)
    pool = _Helpers([h for h in dict.fromkeys(helpers) if h in findings.cleared and h not in culprits
                     and h not in pending and h not in in_reruns], leaf_of)
    home = _home_groups(outcomes, pending)
    need = sum(fresh[s] * (len(home[s].nodes) - 1) for s in pending)
    use_bisect = strategy == "bisect" or (strategy == "auto" and need > pool.capacity())
    batches = _bisect_batches(outcomes, findings, pending) if use_bisect else [[s] for s in pending]
    deferred: list[str] = []
    for batch in batches:
        like = home[batch[0]]
        if len(batch) > 1:
            want = max(0, len(like.nodes) - len(batch))
            batch = batch[: len(like.nodes)]  # a half larger than the group cannot happen; keep the shape
            fill = pool.pick(want, _leaf(like, batch[0], leaf_of), set())
            if fill is None:
                deferred.extend(batch)
            else:
                add(list(batch) + fill, "bisect", like, list(batch))
            continue
        s = batch[0]
        for m in reruns[s]:
            add(m.nodes, "confirm", m.group, [s])
        # New partners where there are enough, so that each isolate is a member set of its own
        # (a second run of an old set would say nothing new about s versus a link).
        tried = {frozenset(o.group.nodes) for o in outcomes if s in o.group.nodes}
        partners = {n for group in tried for n in group}
        for _ in range(fresh[s]):
            want, leaf = len(like.nodes) - 1, _leaf(like, s, leaf_of)
            fill = pool.pick(want, leaf, partners) or pool.pick(want, leaf, {s}, exclude_sets=tried, with_node=s)
            if fill is None:
                break
            partners.update(fill)
            tried.add(frozenset([s, *fill]))
            add([s] + fill, "isolate", like, [s])
        if not reruns[s] and not any(s in g.nodes for g in groups):
            deferred.append(s)
    return RoundPlan(groups, deferred)


def _leaf(like: Group, node: str, leaf_of: dict[str, str]) -> str | None:
    return leaf_of.get(node) if like.span == "leaf" else None


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
