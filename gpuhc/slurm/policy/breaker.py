"""The circuit breaker: stop draining when gpuhc already holds too many nodes. Pure.

Why: a wrong threshold in a new release, a kernel-log pattern that suddenly matches a harmless
driver message, or a fabric-wide event would otherwise let gpuhc drain the whole cluster in one
HealthCheckInterval. Past the cap, a systemic problem is far likelier than that many simultaneous
hardware failures, and a person should look before more capacity goes.

What counts: every way out of service that gpuhc takes, under one cap. Nodes that are out of
service (drained, down, failed) *with a gpuhc reason*, including quarantined ones (a quarantine
ends within ``quarantine.max_cycles`` reboots, in a release or a retirement); and nodes that
Slurm drained itself because a prolog or an epilog exited non-zero ("Prolog error", "Epilog
error": :data:`~gpuhc.slurm.policy.reason.HOOK_FAILURES`), since gpuhc's hooks are how a node gets
that reason (a FAIL's exit 1, a hook slurmd killed at its timeout). Those rank first: gpuhc
cannot undo them, so its own drains give way to them. Admin drains do not count: they are not
gpuhc's doing. Retired nodes
do not count toward the drain cap: they never come back by themselves, so in a partition of 10
nodes or fewer (a cap of 1) one retirement would switch draining off there for good, and every
later sick node would keep taking jobs. They have a small cap of their own
(``max_retired_percent``): at it, the breaker says so loudly in every count (an alert for a
person: retirements at that rate are a pattern, not hardware), and draining goes on.

Counting first and draining after is a race: a systemic false positive strikes every node in the
same minute, all of them count 0 and all of them drain. So a node that drained re-counts after a
short settle time; when the count is over the cap, the held nodes are ranked by when gpuhc first
held them (:func:`rank_key`), which every node sees identically, and those ranked past the cap
undo their own drain. The overshoot is transient and the end state is the cap, whatever the
interleaving of the reads.

The rank is gpuhc's own record, not Slurm's reason time alone: gpuhc re-tags nodes it already
holds (``[reset n/N]``, ``[qN]``, ``[reboot]``, and Slurm appends to a reboot's reason), and each
re-tag re-stamps the reason. Ranked by that stamp, a node held for days would rank after a
fresh storm's drains, past the cap, and never recount, so the cap+1 end state stayed. A reason
with a ladder tag or a quarantine cycle past the first is gpuhc's mark that the node was held
before any untagged drain (only a held node is ever so tagged), so such nodes rank first.

Spreading the storm: before its first count, a node waits a jitter derived from its name
(:func:`jitter_for`: the same node always waits the same, different nodes spread evenly over
``jitter_s``), so that a same-minute storm reaches slurmctld as a stream of counts rather than a
wall, and the nodes that count after the cap was reached find the breaker open and stop there
(one count each, no drain, no recount). The recount logic above does not depend on the order, so
the end state is still the cap. On large clusters a count is the whole node table; the breaker
ledger (:mod:`gpuhc.slurm.policy.ledger`) lets the nodes of one storm share their counts.

The scope is the partitions of the node being judged (a GPU partition should not be compared
against a large CPU partition) or the whole cluster. The cap is the stricter of an absolute
count and a percentage of the nodes in scope; a percentage cap is rounded up so that a small
cluster can still drain one node. The breaker is open when the count is at or over the cap.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Iterable

from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.reason import hook_failure, owned, parse_reason


@dataclass(frozen=True)
class BreakerSettings:
    enabled: bool = True
    max_drained: int | None = None
    max_drained_percent: float | None = 10.0
    max_retired_percent: float = 10.0  # the retirements' own cap (an alert, never a stop to draining)
    scope: str = "partition"  # "partition" or "cluster"
    settle_s: float = 1.0  # wait before the post-drain recount, so concurrent drains are seen
    jitter_s: float = 10.0  # spread of the per-node wait before the first count
    ledger_node: str | None = None  # the node record whose Comment and Extra are the ledger (gpuhc.slurm.policy.ledger)
    ledger_ttl_s: float = 30.0  # an entry this old no longer decides before a drain
    ledger_wait_s: float = 2.0  # after a drain, poll the ledger up to this long before counting

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> "BreakerSettings":
        return cls(
            enabled=bool(section.get("enabled", True)),
            max_drained=section.get("max_drained"),
            max_drained_percent=section.get("max_drained_percent", 10.0),
            max_retired_percent=float(section.get("max_retired_percent", 10.0)),
            scope=section.get("scope", "partition"),
            settle_s=float(section.get("settle_s", 1.0)),
            jitter_s=float(section.get("jitter_s", 10.0)),
            ledger_node=section.get("ledger_node") or None,
            ledger_ttl_s=float(section.get("ledger_ttl_s", 30.0)),
            ledger_wait_s=float(section.get("ledger_wait_s", 2.0)),
        )


@dataclass(frozen=True)
class BreakerState:
    open: bool
    drained: int  # nodes in scope held by gpuhc
    total: int  # nodes in scope
    cap: int | None  # None: no cap configured (or breaker disabled)
    scope: str  # "partition gpu,debug" or "cluster"
    source: str = "count"  # "count": this run counted; "ledger": another node's count; "last": an earlier run's
    retired: int = 0  # retired nodes in scope: not in ``drained``, they have their own cap
    retired_cap: int | None = None
    hooks: int = 0  # of ``drained``: drained by Slurm for a failed prolog or epilog

    @property
    def retired_alert(self) -> bool:
        return self.retired_cap is not None and self.retired >= self.retired_cap > 0

    @property
    def message(self) -> str:
        if self.cap is None:
            return f"circuit breaker disabled: {self.drained}/{self.total} nodes drained by gpuhc ({self.scope})"
        word = "open" if self.open else "closed"
        cmp = ">=" if self.open else "<"
        via = {"ledger": "; from the ledger", "last": "; this node's last count"}.get(self.source, "")
        alert = (f"; ALERT: {self.retired} retired nodes >= their cap {self.retired_cap}, a person should look"
                 if self.retired_alert else "")
        hooks = f" ({self.hooks} by Slurm after a failed prolog or epilog)" if self.hooks else ""
        return (f"circuit breaker {word}: {self.drained}/{self.total} nodes drained by gpuhc{hooks} "
                f"{cmp} cap {self.cap} ({self.scope}{via}){alert}")

    def to_dict(self) -> dict[str, Any]:
        return {"open": self.open, "drained": self.drained, "total": self.total, "cap": self.cap,
                "scope": self.scope, "source": self.source, "retired": self.retired,
                "retired_cap": self.retired_cap}

    @classmethod
    def from_dict(cls, d: Any) -> "BreakerState | None":
        """A stored count (this node's last, gpuhc/slurm/flows/memory.py); None when it does not read."""
        try:
            cap = d["cap"]
            return cls(bool(d["open"]), int(d["drained"]), int(d["total"]), None if cap is None else int(cap),
                       str(d["scope"]), "last", int(d.get("retired") or 0))
        except (TypeError, KeyError, ValueError):
            return None


def jitter_for(node_name: str, jitter_s: float) -> float:
    """The node's wait before its first count, in [0, jitter_s): from a hash of its name, so
    deterministic per node and uniform over the nodes (a sequential naming scheme does not
    bunch up)."""
    if jitter_s <= 0:
        return 0.0
    digest = hashlib.sha256(node_name.encode()).digest()
    return jitter_s * int.from_bytes(digest[:8], "big") / 2 ** 64


def held_by_gpuhc(node: Node) -> bool:
    """Out of service with gpuhc's reason, retired or not."""
    return owned(node.reason) and _out(node)


def hook_drained(node: Node) -> bool:
    """Out of service with Slurm's reason for a failed prolog or epilog (module docstring)."""
    return hook_failure(node.reason) and _out(node)


def counted(node: Node) -> bool:
    """Does this node take a place under the drain cap?"""
    return hook_drained(node) or (held_by_gpuhc(node) and not retired(node))


def _out(node: Node) -> bool:
    return node.drained or node.down or node.failing


def retired(node: Node) -> bool:
    mine = parse_reason(node.reason)
    return mine is not None and mine.retired


def tagged(node: Node) -> bool:
    """Does the reason carry a tag that only a node gpuhc already held gets: a ladder step, or a
    quarantine cycle past the first? A ``[q1]`` is no such mark: the sweep's and a retest's drain
    carry it on the node's first hold (gpuhc/sweep/analyze.py), a fresh drain like any other."""
    mine = parse_reason(node.reason)
    return mine is not None and (mine.cycle > 1 or mine.step is not None)


def rank_key(node: Node) -> tuple:
    """The held nodes' order, alike on every node: Slurm's hook drains and tagged nodes first
    (gpuhc cannot undo the one; the other was held before any fresh drain), then Slurm's reason
    stamp, then the name (module docstring)."""
    t = node.reason_time if node.reason_time is not None else float("inf")
    return (0 if hook_drained(node) or tagged(node) else 1, t, node.name)


def scope_nodes(nodes: list[Node], node_name: str, scope: str) -> tuple[list[Node], str]:
    """The nodes the cap is measured against, and a description of the scope."""
    if scope == "partition":
        me = next((n for n in nodes if n.name == node_name), None)
        mine = set(me.partitions) if me else set()
        if mine:
            return [n for n in nodes if mine & set(n.partitions)], "partition " + ",".join(sorted(mine))
    return list(nodes), "cluster"


def cap_for(total: int, settings: BreakerSettings) -> int | None:
    caps = []
    if settings.max_drained is not None:
        caps.append(int(settings.max_drained))
    if settings.max_drained_percent is not None:
        caps.append(math.ceil(total * float(settings.max_drained_percent) / 100.0 - 1e-9))
    return min(caps) if caps else None


@dataclass(frozen=True)
class Survey:
    """One count of a scope: its nodes, the nodes gpuhc holds there (retired ones apart) in rank
    order (:func:`rank_key`: the order every node sees alike), the cap, and the retired nodes."""

    in_scope: list[Node]
    held: list[Node]
    cap: int | None
    scope: str
    retired: int = 0
    retired_cap: int | None = None

    @property
    def state(self) -> BreakerState:
        cap = self.cap
        return BreakerState(open=cap is not None and len(self.held) >= cap, drained=len(self.held),
                            total=len(self.in_scope), cap=cap, scope=self.scope, retired=self.retired,
                            retired_cap=self.retired_cap, hooks=sum(1 for n in self.held if hook_drained(n)))

    def past_cap(self, node_name: str) -> bool:
        """Is ``node_name`` held and ranked past the cap?"""
        if self.cap is None or len(self.held) <= self.cap:
            return False
        rank = next((i for i, n in enumerate(self.held) if n.name == node_name), None)
        return rank is not None and rank >= self.cap


def survey(nodes: Iterable[Node], node_name: str, settings: BreakerSettings) -> Survey:
    in_scope, desc = scope_nodes(list(nodes), node_name, settings.scope)
    gone = sum(1 for n in in_scope if held_by_gpuhc(n) and retired(n))
    held = sorted((n for n in in_scope if counted(n)), key=rank_key)
    cap = cap_for(len(in_scope), settings) if settings.enabled else None
    retired_cap = math.ceil(len(in_scope) * settings.max_retired_percent / 100.0 - 1e-9) if settings.enabled else None
    return Survey(in_scope, held, cap, desc, gone, retired_cap)


def evaluate(nodes: Iterable[Node], node_name: str, settings: BreakerSettings) -> BreakerState:
    return survey(nodes, node_name, settings).state


def must_yield(nodes: Iterable[Node], node_name: str, settings: BreakerSettings) -> tuple[BreakerState, bool]:
    """After our drain: is the cap exceeded, and are we ranked past it (so we undo our drain)?"""
    s = survey(nodes, node_name, settings)
    return s.state, s.past_cap(node_name)
