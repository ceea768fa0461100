"""The breaker ledger: the last count of each breaker scope, kept where every node reads it cheaply.

Why: on Slurm 22.05 to 26.05 a breaker count is the whole node table (slurmctld has no
server-side state filter: 3.25 MB at 10,000 nodes), and without help every node that drains must
count before and after. In a storm that is most of what the controller serves. The ledger is the
``Comment`` of one node record an admin dedicates to gpuhc (``slurm.breaker.ledger_node``; a
node in a hidden partition that never runs a job, docs/slurm.md "Breaker ledger"): reading it is
a one-node ``sinfo`` query (17 KB at 10,000 nodes) instead of a table. A node that counts writes
what it saw there; the others decide from it:

- **before a drain**: a fresh entry (``ledger_ttl_s``) that says the scope is at its cap opens
  the breaker without a count. One that says there is room lets the node drain, after adding
  its name to the entry's claims so the next readers see the room shrink. The claims live in the
  record's ``Extra``, apart from the counts, tied to one entry by its ``id``: a claim write never
  overwrites a count. A new count (new id) starts with no claims: the drains it saw are held,
  and the claimers it did not see drained yet keep their places as ``pending``. No fresh
  entry: count.
- **after a drain**: the node needs a count that saw its drain and cannot be changed by later
  drains. An entry qualifies when some node in its scope carries a reason stamped in a later
  second than our drain (``newest > our stamp``): slurmctld stamped that reason, then the count
  saw it, so the count ran after our drain; and every drain the count missed came later still,
  so it carries a later stamp and ranks after ours. Only slurmctld's clock is compared, never two
  nodes' clocks. The entry holds the key (stamp, name) of the held node at the cap; our drain is
  undone when our key sorts after it, which is exactly what our own recount would decide
  (:func:`gpuhc.slurm.policy.breaker.must_yield`). The node waits its share of ``ledger_wait_s``
  for such an entry (:func:`wait_for`), then counts itself and writes.
- **a count** stamps the record first and reads it back: of the nodes that stamp at once only
  the last finds its own stamp (slurmctld keeps the last reason written) and counts; the others
  wait for its entry (:mod:`gpuhc.slurm.act.ledger_client`).
- **stamps from the future** (slurmctld's clock stepped back, or a writer that lies): a reader
  knows slurmctld's time from a stamp it caused and read back, plus the time since on its own
  monotonic clock (:func:`horizon`). An entry whose ``newest`` lies beyond that covers nothing,
  and a count leaves such stamps out of what it writes (one such entry let 5 nodes
  drain with a cap of 1).

Slurm has no compare-and-set, so two writers can overwrite each other; what is lost is a claim
or an entry, and a lost claim lets one more node drain that the recount then undoes. A claim is
never counted twice (a newer count has a new id, which voids the claims on the older one). The
end state rests on the counts, not on the claims. Anything unreadable in the ledger is ignored
(the node counts, as without a ledger); a comment or extra field that is not gpuhc's is never
overwritten.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, replace
from typing import Iterable

from gpuhc.slurm.policy.breaker import tagged
from gpuhc.slurm.read.nodes import Node

PREFIX = "gpuhc-ledger/1"  # the record's Comment: the counts
CLAIMS_PREFIX = "gpuhc-claims/1"  # the record's Extra: the claims on them
MAX_ENTRIES = 32  # scopes kept, newest first; more partition sets than this just count more
MAX_BYTES = 4000
MAX_CLAIMERS = 64  # past this many claims on one entry, the next node counts (a fresh entry)
# A writer's clock ahead of ours by more than this makes its entry "not fresh" (used for the
# time-to-live only; coverage compares slurmctld's stamps).
FUTURE_SLACK_S = 5.0

_SCOPE = re.compile(r"^(cluster|p=[A-Za-z0-9._-]{1,64}(\+[A-Za-z0-9._-]{1,64}){0,63})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_INTS = ("t", "held", "total", "cap", "newest")
_ID = re.compile(r"^[0-9a-f]{8}$")


@dataclass(frozen=True)
class Entry:
    """One scope's last count."""

    scope: str  # scope_key()
    id: str  # 8 hex digits, new for each count: the claims name it
    t: int  # the writer's clock when it counted (epoch s): for the time-to-live
    held: int  # nodes in scope held by gpuhc
    total: int  # nodes in scope
    cap: int
    newest: int  # slurmctld's latest reason stamp among the scope's nodes (epoch s), 0 if none
    claimers: tuple[str, ...] = ()  # nodes that took a place on this entry's word, in order (from Extra)
    cut: tuple[int, str] | None = None  # (stamp, name) of the held node at the cap, when held > cap
    # Claimers of the entry before this one whose drains the count did not see yet: their places
    # stay theirs (without them a new count gave away again places its predecessor had promised,
    # and the claimers themselves, finding no claim on the new entry, claimed twice).
    pending: tuple[str, ...] = ()

    @property
    def taken(self) -> int:
        """Places held or promised before this entry's own claims."""
        return self.held + len(self.pending)

    @property
    def open(self) -> bool:
        return self.taken + len(self.claimers) >= self.cap

    def place(self, name: str) -> int | None:
        """The places before ``name``'s (held, then pending, then claims in order) when it has one
        under the cap; else None. (Claims past the cap, from writers that raced, do not count.)"""
        if name in self.pending:
            at = self.held + self.pending.index(name)
        elif name in self.claimers:
            at = self.taken + self.claimers.index(name)
        else:
            return None
        return at if at < self.cap else None

    def within(self, name: str) -> bool:
        """Did ``name`` claim a place under the cap?"""
        return self.place(name) is not None

    def render(self) -> str:
        fields = [f"id={self.id}"] + [f"{k}={getattr(self, k)}" for k in _INTS]
        if self.cut is not None:
            fields.append(f"cut={self.cut[0]}@{self.cut[1]}")
        if self.pending:
            fields.append(f"pending={'+'.join(self.pending)}")
        return f"{self.scope}:{','.join(fields)}"


def scope_key(partitions: Iterable[str] | None) -> str:
    parts = sorted(set(partitions or ()))
    return "p=" + "+".join(parts) if parts else "cluster"


def foreign(text: str | None, prefix: str = PREFIX) -> bool:
    """A comment (or extra field) someone else wrote: gpuhc leaves it alone."""
    text = (text or "").strip()
    return bool(text) and text != "(null)" and not text.startswith(prefix)


def parse(comment: str | None) -> dict[str, Entry]:
    """The ledger's entries by scope; malformed entries are skipped, a foreign comment is empty."""
    text = (comment or "").strip()
    if not text.startswith(PREFIX) or len(text) > MAX_BYTES:
        return {}
    out: dict[str, Entry] = {}
    for item in text[len(PREFIX):].split()[:MAX_ENTRIES]:
        entry = _entry(item)
        if entry is not None and entry.scope not in out:
            out[entry.scope] = entry
    return out


def _entry(item: str) -> Entry | None:
    scope, sep, rest = item.rpartition(":")
    if not sep or not _SCOPE.match(scope):
        return None
    values: dict[str, str] = {}
    for pair in rest.split(","):
        key, eq, value = pair.partition("=")
        if not eq or key in values:
            return None
        values[key] = value
    try:
        ints = {k: int(values[k]) for k in _INTS}
    except (KeyError, ValueError):
        return None
    if any(v < 0 for v in ints.values()) or ints["held"] > ints["total"] or ints["cap"] > ints["total"]:
        return None
    if not _ID.match(values.get("id", "")):
        return None
    cut = None
    if "cut" in values:
        stamp, at, name = values["cut"].partition("@")
        if not at or not (stamp.isascii() and stamp.isdigit()) or not _NAME.match(name):
            return None
        cut = (int(stamp), name)
    pending = tuple(values["pending"].split("+")) if "pending" in values else ()
    if (len(pending) > min(MAX_CLAIMERS, ints["total"] - ints["held"]) or len(set(pending)) != len(pending)
            or not all(map(_NAME.match, pending))):
        return None
    if set(values) - set(_INTS) - {"cut", "id", "pending"} or (cut is not None) != (ints["held"] > ints["cap"]):
        return None  # unknown fields, or a cut that does not match the count (a count writes both)
    return Entry(scope=scope, id=values["id"], cut=cut, pending=pending, **ints)


def render(entries: Iterable[Entry]) -> str:
    """The comment to write: newest entries first, bounded in count and bytes."""
    text = PREFIX
    for entry in sorted(entries, key=lambda e: -e.t)[:MAX_ENTRIES]:
        item = " " + entry.render()
        if len(text) + len(item) > MAX_BYTES:
            break
        text += item
    return text


def merged(comment: str | None, entry: Entry) -> str:
    """The ledger with ``entry`` in place of its scope's old one."""
    entries = parse(comment)
    entries[entry.scope] = entry
    return render(entries.values())


def snapshot(in_scope: list[Node], held: list[Node], scope: str, cap: int, now: float, id: str,
             tick: float | None = None, horizon: int | None = None, claimed: Iterable[str] = ()) -> Entry | None:
    """What a count saw, as an entry (None when it cannot be written down: a cap of 0, where
    nothing may drain anyway, or a held node at the cap without a reason stamp).
    ``held``: the scope's nodes held by gpuhc, in rank order. ``tick``: slurmctld's stamp on the
    ledger's record, set and read back before the count (it counts as a reason the count saw).
    ``horizon``: slurmctld's time as the counter last saw it (:func:`horizon`); a reason stamped
    later than that is from the future (a clock stepped back, or a hostile writer) and is left
    out of ``newest``, so it cannot make the entry cover drains it never saw. ``claimed``: the
    claimers of the entry this one replaces; those the count did not see held are still on their
    way to a drain, and keep their places as ``pending``."""
    cut = None
    if cap <= 0:
        return None
    if len(held) > cap:
        at = held[cap - 1]
        if tagged(at):  # tagged nodes rank before every fresh drain (breaker.rank_key): all of those are past
            cut = (0, at.name)
        elif at.reason_time is None:
            return None
        else:
            cut = (int(at.reason_time), at.name)
    stamps = [int(n.reason_time) for n in in_scope if n.reason_time is not None]
    if tick is not None:
        stamps.append(int(tick))
    if horizon is not None:
        stamps = [s for s in stamps if s <= horizon]
    seen = {n.name for n in held}
    pending = tuple(dict.fromkeys(c for c in claimed if c not in seen))[:min(MAX_CLAIMERS, len(in_scope) - len(held))]
    return Entry(scope=scope, id=id, t=int(now), held=len(held), total=len(in_scope), cap=cap,
                 newest=max(stamps, default=0), cut=cut, pending=pending)


def out_of_service(state: str) -> bool:
    """Can this record be the ledger? Only a node that takes no jobs: down, drained, failed, or
    one whose slurmd never answered (sinfo's complete state, e.g. ``down+not_responding``).
    gpuhc stamps the ledger with a drain, so a node in service is refused, never drained."""
    words = set(state.lower().replace("*", "+not_responding").split("+"))
    return bool(words & {"down", "drain", "drained", "draining", "fail", "failing", "unknown", "future",
                         "not_responding"})


def fresh(entry: Entry, now: float, ttl_s: float) -> bool:
    return -FUTURE_SLACK_S <= now - entry.t <= ttl_s


def covers(entry: Entry, stamp: float | None, horizon: int | None = None) -> bool:
    """Did the count behind ``entry`` see a drain stamped ``stamp``, with no later drain able to
    rank before it? (See the module docstring.) An entry whose ``newest`` lies past ``horizon``
    (slurmctld's time as the reader last saw it) is from the future and covers nothing: it would
    otherwise cover every drain, and a cap of 1 let 5 nodes drain."""
    if stamp is None or entry.newest <= int(stamp):
        return False
    return horizon is None or entry.newest <= horizon


def horizon(seen: float, elapsed_s: float) -> int:
    """slurmctld's time now at the latest, from a stamp it set that we read back (``seen``, e.g.
    our drain's or our clock tick's) ``elapsed_s`` ago on our monotonic clock. The stamp is cut to
    the second and the read took a moment: one second of slack, never more, since only
    slurmctld's clock and our own monotonic one are compared."""
    return int(seen) + math.ceil(max(0.0, elapsed_s)) + 1


def past_cap(entry: Entry, stamp: float, name: str) -> bool:
    """Is the node drained at ``stamp`` ranked past the cap by this (covering) count?"""
    return entry.cut is not None and (int(stamp), name) > entry.cut


def parse_claims(extra: str | None) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The claims by scope: (the id of the entry they were made on, the claimers in order)."""
    text = (extra or "").strip()
    if not text.startswith(CLAIMS_PREFIX) or len(text) > MAX_BYTES:
        return {}
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for item in text[len(CLAIMS_PREFIX):].split()[:MAX_ENTRIES]:
        head, sep, names = item.partition(":")
        scope, at, id_ = head.rpartition("@")
        claimers = tuple(names.split("+"))
        if (not sep or not at or not _SCOPE.match(scope) or not _ID.match(id_) or scope in out
                or len(claimers) > MAX_CLAIMERS or len(set(claimers)) != len(claimers)
                or not all(map(_NAME.match, claimers))):
            continue
        out[scope] = (id_, claimers)
    return out


def with_claims(entries: dict[str, Entry], extra: str | None) -> dict[str, Entry]:
    """The entries with the claims made on them (claims on an older entry of a scope are void:
    the newer count saw their drains)."""
    claims = parse_claims(extra)
    out = {}
    for scope, entry in entries.items():
        id_, claimers = claims.get(scope, ("", ()))
        out[scope] = replace(entry, claimers=claimers) if id_ == entry.id else entry
    return out


def claimed(extra: str | None, entry: Entry, name: str) -> str | None:
    """The extra field with ``name``'s claim on ``entry`` added (after the claims already made on
    it; claims on an older entry of the scope are dropped); None when the entry takes no more
    claims (the node counts then)."""
    claims = parse_claims(extra)
    id_, claimers = claims.get(entry.scope, ("", ()))
    claimers = claimers if id_ == entry.id else ()
    if name not in claimers:
        if len(claimers) >= MAX_CLAIMERS:
            return None
        claimers += (name,)
    claims[entry.scope] = (entry.id, claimers)
    text = CLAIMS_PREFIX
    for scope, (id_, names) in claims.items():
        item = f" {scope}@{id_}:{'+'.join(names)}"
        if len(text) + len(item) > MAX_BYTES:
            break
        text += item
    return text


TICK = "breaker ledger of gpuhc (not a compute node), count by "


def tick_reason(node_name: str, now: float) -> str:
    """The ledger record's reason for a clock tick: new text each time (slurmctld re-stamps a
    reason only when its text changes), and plainly not a gpuhc drain reason."""
    return f"{TICK}{node_name} at {now:.3f}"


def is_tick(reason: str | None) -> bool:
    """Is this reason another count's clock tick (a count under way)?"""
    return (reason or "").startswith(TICK)


def wait_for(node_name: str, wait_s: float) -> float:
    """How long a node polls the ledger after its drain before it counts itself: a share of
    ``wait_s`` from a hash of its name (salted apart from the breaker's jitter), so that the
    nodes of one storm do not all count at once."""
    if wait_s <= 0:
        return 0.0
    digest = hashlib.sha256(b"ledger:" + node_name.encode()).digest()
    return wait_s * int.from_bytes(digest[:8], "big") / 2 ** 64
