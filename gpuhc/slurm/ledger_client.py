"""The actuator's side of the breaker ledger: read it, claim a place, publish a count, wait for a
count that saw our drain. The format and the pure rules are :mod:`gpuhc.slurm.ledger` (its
docstring says why each rule holds); docs/slurm.md ("Breaker ledger") says what it costs.

Every Slurm error here is survivable: the ledger is a shortcut, and a run that cannot use it
says so once and counts the whole table, as it would without a ledger.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable

from gpuhc.errors import SlurmError
from gpuhc.slurm import ledger

if TYPE_CHECKING:
    from gpuhc.slurm.breaker import BreakerSettings, BreakerState, Survey
    from gpuhc.slurm.nodes import Node
    from gpuhc.slurm.scontrol import Scontrol

# Between two reads of the ledger while waiting for a count.
POLL_S = 0.25
# A count under way (the ledger's record was stamped for it) gets this long to write its entry
# before the waiting node counts itself.
PENDING_S = 2.0
# Kept free after waiting, for a count of our own, the drain or the undo.
RESERVE_S = 6.0


class LedgerClient:
    def __init__(self, sc: Scontrol, settings: BreakerSettings, log: Callable[..., None]):
        self.sc, self.settings, self.log = sc, settings, log
        self.record = settings.ledger_node
        self.error: str | None = None  # why the ledger is not used for the rest of this run
        self.checked = False  # the record was read this run and is out of service

    @property
    def on(self) -> bool:
        return self.error is None

    # ------------------------------------------------------------------ before a drain

    def before_drain(self, name: str, node: Node) -> BreakerState | None:
        """The breaker's state from a fresh entry, with our claim added when it has room; None:
        count. Without a fresh entry but with a count under way, wait for that count's entry."""
        key = scope_of(node, self.settings)[0]
        until = None
        while self.on:
            _, extra, entries, tick = self.read()
            entry = entries.get(key)
            ttl = self.settings.ledger_ttl_s
            if entry is not None and self.usable(entry) and ledger.fresh(entry, time.time(), ttl):
                return self._claim(extra, entry, name, node)
            # A stamp this recent is another node's count under way: its entry comes in a moment.
            if until is None and tick is not None and time.time() - tick <= PENDING_S + 1:
                until = time.monotonic() + min(PENDING_S, self._room())
            if until is None or time.monotonic() + POLL_S > until:
                return None
            time.sleep(POLL_S)
        return None

    def _claim(self, extra: str, entry: ledger.Entry, name: str, node: Node) -> BreakerState | None:
        """Open when the entry says the cap is taken; else add our name to its claims (one write;
        a claim lost to a racing writer lets one more node drain, which the recount undoes)."""
        if entry.within(name):
            return state_of(entry, node, self.settings, entry.held + entry.claimers.index(name))
        if entry.open:
            return state_of(entry, node, self.settings, entry.held + len(entry.claimers))
        claims = ledger.claimed(extra, entry, name)
        if claims is None:
            return None  # the entry takes no more claims: a fresh count
        self.write("Extra", claims)
        self.log(f"breaker: room in the ledger ({entry.held} held + {len(entry.claimers)} claimed < cap {entry.cap}, "
                 f"count {entry.id} of {int(time.time()) - entry.t}s ago): claimed a place")
        return state_of(entry, node, self.settings, entry.held + len(entry.claimers))

    # ------------------------------------------------------------------ a count

    def tick(self, name: str) -> float | None:
        """Have slurmctld stamp the ledger's record now (before a count); its stamp, or None."""
        if not self.checked:  # the stamp is a drain: never of a record that is in service
            self.read()
        if not self.on:
            return None
        try:
            self.sc.stamp(self.record, ledger.tick_reason(name, time.time()))
        except SlurmError as e:
            self.off(f"not stamped ({e})")
            return None
        stamp = self.read()[3]
        if stamp is None and self.on:
            self.off("shows no reason stamp after a drain")
        return stamp

    def publish(self, found: Survey, node: Node, tick: float) -> None:
        """Write what a count saw (``tick``: the stamp set before it) into the ledger."""
        if found.cap is None:
            return
        entry = ledger.snapshot(found.in_scope, found.held, scope_of(node, self.settings)[0], found.cap,
                                time.time(), os.urandom(4).hex(), tick)
        if entry is not None:
            self.write("Comment", ledger.merged(self.read()[0], entry))

    # ------------------------------------------------------------------ after a drain

    def after_drain(self, name: str, node: Node, drained: Node | None) -> tuple[BreakerState, bool] | None:
        """(state, past the cap?) from a count that saw our drain (:func:`gpuhc.slurm.ledger.covers`);
        None: count ourselves. We wait this node's share of ``ledger_wait_s`` for one; a count
        stamped after our drain and still running gets ``PENDING_S`` more to write its entry."""
        if drained is None or drained.reason_time is None:
            return None
        stamp = drained.reason_time
        key = scope_of(node, self.settings)[0]
        own_count_at = time.monotonic() + min(ledger.wait_for(name, self.settings.ledger_wait_s), self._room())
        pending_until = None
        while self.on:
            _, _, entries, tick = self.read()
            entry = entries.get(key)
            if entry is not None and self.usable(entry) and ledger.covers(entry, stamp):
                self.log(f"breaker: count {entry.id} in the ledger saw this drain: {entry.held} held, cap {entry.cap}")
                return (state_of(entry, node, self.settings, entry.held), ledger.past_cap(entry, stamp, name))
            now = time.monotonic()
            if tick is not None and tick > stamp and pending_until is None:
                pending_until = now + min(PENDING_S, self._room())
            until = pending_until if pending_until is not None else own_count_at
            if now + POLL_S > until:
                return None
            time.sleep(POLL_S)
        return None

    # ------------------------------------------------------------------ the record

    def read(self) -> tuple[str, str, dict[str, ledger.Entry], float | None]:
        """(comment, extra, entries with their claims, reason stamp) of the ledger's record;
        empty when unreadable."""
        try:
            comment, extra, stamp, state = self.sc.ledger(self.record)
        except SlurmError as e:
            self.off(f"unreadable ({e})")
            return "", "", {}, None
        if not ledger.out_of_service(state):
            # A ledger_node naming a real compute node by mistake: its clock tick is a drain.
            self.off(f"is a node in service (state {state[:40]}), not a record for gpuhc alone")
            return "", "", {}, None
        self.checked = True
        if ledger.foreign(comment) or ledger.foreign(extra, ledger.CLAIMS_PREFIX):
            self.off("carries a comment or extra field that is not gpuhc's (left alone)")
            return "", "", {}, None
        return comment, extra, ledger.with_claims(ledger.parse(comment), extra), stamp

    def write(self, field: str, text: str) -> None:
        """Set the record's Comment (the counts) or Extra (the claims)."""
        if not self.on:
            return
        try:
            self.sc.set_comment(self.record, text, field)
        except SlurmError as e:  # a lost write costs other nodes a count, nothing more
            self.log(f"breaker ledger {self.record} not written ({e})")

    def off(self, why: str) -> None:
        """Stop using the ledger for the rest of this run (said once): the node counts instead."""
        if self.error is None:
            self.error = why
            self.log(f"breaker ledger {self.record} {why}: counting instead", loud=True)

    def usable(self, entry: ledger.Entry) -> bool:
        """An entry whose cap our settings agree with (nodes with another config count alone)."""
        from gpuhc.slurm.breaker import cap_for

        return entry.total > 0 and cap_for(entry.total, self.settings) == entry.cap

    def _room(self) -> float:
        return max(0.0, self.sc.remaining() - RESERVE_S)


def scope_of(node: Node, settings: BreakerSettings) -> tuple[str, str]:
    """The ledger key and the description of ``node``'s breaker scope (as the count words it)."""
    if settings.scope == "partition" and node.partitions:
        return ledger.scope_key(node.partitions), "partition " + ",".join(sorted(set(node.partitions)))
    return ledger.scope_key(None), "cluster"


def state_of(entry: ledger.Entry, node: Node, settings: BreakerSettings, drained: int) -> BreakerState:
    from gpuhc.slurm.breaker import BreakerState

    return BreakerState(open=drained >= entry.cap, drained=drained, total=entry.total, cap=entry.cap,
                        scope=scope_of(node, settings)[1], source="ledger")
