"""The actuator's side of the breaker ledger: read it, claim a place, publish a count, wait for a
count that saw our drain. The format and the pure rules are :mod:`gpuhc.slurm.policy.ledger` (its
docstring says why each rule holds); docs/slurm.md ("Breaker ledger") says what it costs.

Every Slurm error here is survivable: the ledger is a shortcut, and a run that cannot use it
says so once and counts the whole table, as it would without a ledger.
"""

from __future__ import annotations

import os
import random
import time
from typing import TYPE_CHECKING, Callable

from gpuhc.errors import SlurmError
from gpuhc.slurm.policy import ledger

if TYPE_CHECKING:
    from gpuhc.slurm.policy.breaker import BreakerSettings, BreakerState, Survey
    from gpuhc.slurm.read.nodes import Node
    from gpuhc.slurm.act.scontrol import Scontrol

# Between two reads of the ledger while waiting: the first pause, growing to POLL_MAX_S (each
# read is a one-node query, 17 KB at 10,000 nodes: cheap, but 200 nodes polling add up).
POLL_S = 0.25
POLL_MAX_S = 1.0
# A count under way (the ledger's record was stamped for it) gets this long to write its entry
# before a waiting node counts itself. A count reads and parses the whole node table: in a storm
# of 200 processes on 2 cores it took several seconds, and a 2 s wait turned one count into many
# (docs/verification.md).
PENDING_S = 8.0
# A claim lost to a racing writer (no compare-and-set) is made again after a random pause (binary
# exponential back-off, up to CLAIM_PAUSE_MAX_S), for as long as the deadline leaves room; after
# CLAIM_TRIES the node counts.
# In a storm dozens of nodes claim in the same seconds and most first claims are lost: with 5
# tries and then a drain on the entry's word, a third of one storm's drains went past the cap
# and were undone, each costing a recount (docs/verification.md).
CLAIM_TRIES = 40
CLAIM_PAUSE_MAX_S = 4.0
# Ticks that lost to a later node's tick before this node counts anyway.
ELECTIONS = 2
# Kept free after waiting, for a count of our own (stamp, read back, table, publish), the drain
# or the undo: seven Slurm calls, each slow under a storm's load.
RESERVE_S = 10.0


class LedgerClient:
    def __init__(self, sc: Scontrol, settings: BreakerSettings, log: Callable[..., None]):
        self.sc, self.settings, self.log = sc, settings, log
        self.record = settings.ledger_node
        self.error: str | None = None  # why the ledger is not used for the rest of this run
        self.checked = False  # the record was read this run and is out of service
        self.ticked: float | None = None  # the stamp of a tick this run won, for its count
        self.last_tick: float | None = None  # the record's stamp as this run's latest election read it
        self.seen: tuple[float, float] | None = None  # (slurmctld's stamp read back, monotonic then)
        self.future_said = False
        self.placed = False  # this run's claim was read back under the cap: the place is ours

    @property
    def on(self) -> bool:
        return self.error is None

    # ------------------------------------------------------------------ slurmctld's clock

    def saw(self, stamp: float | None) -> None:
        """slurmctld just stamped something for this run (our drain, our tick) and we read it
        back: the latest such stamp is its clock as we know it (:func:`horizon`)."""
        if stamp is not None:
            self.seen = (stamp, time.monotonic())

    def horizon(self) -> int | None:
        """slurmctld's time now at the latest; None before this run saw any of its stamps."""
        if self.seen is None:
            return None
        return ledger.horizon(self.seen[0], time.monotonic() - self.seen[1])

    def _future(self, entry: ledger.Entry) -> None:
        if not self.future_said:
            self.future_said = True
            self.log(f"breaker: count {entry.id} in the ledger carries a stamp from the future ({entry.newest} > "
                     f"slurmctld's time {self.horizon()}): not trusted, counted as absent", loud=True)

    # ------------------------------------------------------------------ before a drain

    def before_drain(self, name: str, node: Node) -> BreakerState | None:
        """The breaker's state from a fresh entry, with our claim added (and read back) when it has
        room; None: count. Without a fresh entry but with a count under way, wait for that count's
        entry; before counting, stamp the record, and wait instead when another node's stamp
        landed after ours (its count is under way: one count, not two)."""
        key = scope_of(node, self.settings)[0]
        until = None  # the end of a wait for a count under way
        claims = elections = polls = 0
        wrote, wrote_at = False, 0.0
        while self.on:
            _, extra, entries, tick = self.read()
            entry = entries.get(key)
            if entry is not None and self.usable(entry) and ledger.fresh(entry, time.time(), self.settings.ledger_ttl_s):
                at = entry.place(name)
                if at is not None:
                    self.log(f"breaker: room in the ledger ({entry.held} held + {at - entry.held} claimed before this "
                             f"node < cap {entry.cap}, count {entry.id} of {int(time.time()) - entry.t}s ago): "
                             "claimed a place")
                    self.placed = True
                    return state_of(entry, node, self.settings, at)
                if entry.open:
                    return state_of(entry, node, self.settings, entry.taken + len(entry.claimers))
                if wrote:  # our claim was overwritten by a racing writer: step aside, read again
                    wrote = False
                    if self._room() <= 0:
                        # No place and no time: the entry's word, without a place of our own,
                        # which the actuator does not drain on this late (too little time left to
                        # verify the drain, and draining on it overshot the cap).
                        return state_of(entry, node, self.settings, entry.taken + len(entry.claimers))
                    if claims >= CLAIM_TRIES:
                        return None  # claims that never stick: a count decides
                    # Exponential back-off, random and in units of what our claim took to write and
                    # read back: the writers that raced must not race again, and the more often we
                    # lost, the more writers there are (one storm lost 512 claims with pauses that
                    # began at a quarter of a second).
                    unit = max(POLL_S, time.monotonic() - wrote_at)
                    time.sleep(min(CLAIM_PAUSE_MAX_S, unit * random.uniform(0, 2 ** min(claims, 4))))
                    continue
                text = ledger.claimed(extra, entry, name)
                if text is None:
                    return None  # the entry takes no more claims: a fresh count
                wrote_at = time.monotonic()
                self.write("Extra", text)
                claims, wrote = claims + 1, True
                continue  # read it back: kept, lost, or past the cap by a racing claim
            now = time.monotonic()
            if until is None and tick is not None and 0 <= time.time() - tick <= PENDING_S + 1:
                # A stamp this recent is another node's count under way: its entry comes soon.
                until = now + min(max(PENDING_S - (time.time() - tick), POLL_S), self._room())
            if until is not None and now + POLL_S <= until:
                time.sleep(self._pause(name, polls))
                polls += 1
                continue
            if elections >= ELECTIONS or self.elect(name):
                return None
            elections += 1
            until, polls = time.monotonic() + min(PENDING_S, self._room()), 0
        return None

    # ------------------------------------------------------------------ a count

    def elect(self, name: str) -> bool:
        """Stamp the record for our count and read it back. True: the stamp is ours (or the ledger
        is off), count now on it; False: another node stamped after us, its count is under way.
        slurmctld keeps the last reason written, so of the nodes that stamp at once the last one
        counts (Slurm has no compare-and-set; last-writer-wins is what it offers)."""
        if not (self.on and self.checked):  # the stamp is a drain: never of a record in service
            return True
        reason = ledger.tick_reason(name, time.time())
        try:
            self.sc.stamp(self.record, reason)
            rec = self.sc.node(self.record)
        except SlurmError as e:
            self.off(f"not stamped ({e})")
            return True
        if rec.reason_time is None:
            self.off("shows no reason stamp after a drain")
            return True
        self.saw(rec.reason_time)
        self.last_tick = rec.reason_time
        if rec.reason != reason and ledger.is_tick(rec.reason):
            return False
        self.ticked = rec.reason_time
        return True

    def tick(self, name: str) -> float | None:
        """The stamp this count stands on: the one this run's election won; else the record's
        stamp that an election of this run lost to (slurmctld set it before our count began, so
        it bounds what the count saw just as well, and the count is written down rather than
        wasted); else a new one."""
        if self.ticked is None and self.last_tick is None:
            if not self.checked:
                self.read()
            self.elect(name)
        stamp = self.ticked if self.ticked is not None else self.last_tick
        self.ticked = self.last_tick = None
        return stamp if self.on else None

    def publish(self, found: Survey, node: Node, tick: float) -> None:
        """Write what a count saw (``tick``: the stamp set before it) into the ledger; stamps past
        slurmctld's time as we just saw it are left out, and the claims on the entry it replaces
        whose drains it did not see keep their places (:func:`gpuhc.slurm.policy.ledger.snapshot`)."""
        if found.cap is None:
            return
        key = scope_of(node, self.settings)[0]
        comment, _, entries, _ = self.read()
        before = entries.get(key)
        entry = ledger.snapshot(found.in_scope, found.held, key, found.cap, time.time(), os.urandom(4).hex(), tick,
                                self.horizon(), claimed=before.claimers if before is not None else ())
        if entry is not None:
            self.write("Comment", ledger.merged(comment, entry))

    # ------------------------------------------------------------------ after a drain

    def after_drain(self, name: str, node: Node, drained: Node | None) -> tuple[BreakerState, bool] | None:
        """(state, past the cap?) from a count that saw our drain (:func:`gpuhc.slurm.policy.ledger.covers`);
        None: count ourselves. The node reads the ledger once, sleeps its share of
        ``ledger_wait_s`` and reads it again; a count stamped after our drain and still running
        gets ``PENDING_S`` more to write its entry (read every POLL_S to POLL_MAX_S), and so does
        the count of a node whose stamp landed after ours. Then it counts itself."""
        if drained is None or drained.reason_time is None:
            return None
        stamp = drained.reason_time
        key = scope_of(node, self.settings)[0]
        own_count_at = time.monotonic() + min(ledger.wait_for(name, self.settings.ledger_wait_s), self._room())
        pending_until = None
        elections = polls = 0
        while self.on:
            _, _, entries, tick = self.read()
            entry = entries.get(key)
            if entry is not None and self.usable(entry) and ledger.covers(entry, stamp):
                if ledger.covers(entry, stamp, self.horizon()):
                    self.log(f"breaker: count {entry.id} in the ledger saw this drain: {entry.held} held, cap {entry.cap}")
                    return (state_of(entry, node, self.settings, entry.held), ledger.past_cap(entry, stamp, name))
                self._future(entry)
            now = time.monotonic()
            if tick is not None and tick > stamp and pending_until is None:
                pending_until, polls = now + min(PENDING_S, self._room()), 0
            if pending_until is not None and now + POLL_S <= pending_until:
                time.sleep(self._pause(name, polls))  # a count under way: its entry comes soon
                polls += 1
                continue
            if pending_until is None and now + POLL_S <= own_count_at:
                # Sleep, not poll: the reads of 200 waiting nodes were a third of a storm's bytes,
                # and a count that could cover us shows first as a stamp, which the read at the
                # end of the wait sees (docs/verification.md).
                time.sleep(own_count_at - now)
                continue
            if elections >= ELECTIONS or self.elect(name):
                return None
            elections += 1
            pending_until, polls = time.monotonic() + min(PENDING_S, self._room()), 0
        return None

    def _pause(self, name: str, i: int) -> float:
        """The i-th pause between two reads while a count is awaited: growing, and spread by the
        node's name so that the waiting nodes do not read at the same instant."""
        return min(POLL_MAX_S, POLL_S * 1.5 ** i) * (0.75 + ledger.wait_for(name, 0.5))

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
        from gpuhc.slurm.policy.breaker import cap_for

        return entry.total > 0 and cap_for(entry.total, self.settings) == entry.cap

    def _room(self) -> float:
        return max(0.0, self.sc.remaining() - RESERVE_S)


def scope_of(node: Node, settings: BreakerSettings) -> tuple[str, str]:
    """The ledger key and the description of ``node``'s breaker scope (as the count words it)."""
    if settings.scope == "partition" and node.partitions:
        return ledger.scope_key(node.partitions), "partition " + ",".join(sorted(set(node.partitions)))
    return ledger.scope_key(None), "cluster"


def state_of(entry: ledger.Entry, node: Node, settings: BreakerSettings, drained: int) -> BreakerState:
    from gpuhc.slurm.policy.breaker import BreakerState

    return BreakerState(open=drained >= entry.cap, drained=drained, total=entry.total, cap=entry.cap,
                        scope=scope_of(node, settings)[1], source="ledger")
