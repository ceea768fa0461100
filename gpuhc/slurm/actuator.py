"""The actuator: the one place where gpuhc changes a node in Slurm (drain, resume, reboot).

Every path that drains or resumes goes through here: the health check, the prolog and the epilog
(:mod:`gpuhc.slurm.entry`), ``gpuhc sweep analyze --apply`` (:mod:`gpuhc.sweep.analyze`) and the
admin's ``gpuhc quarantine`` commands (:mod:`gpuhc.slurm.admin`). The decisions stay pure (the
policy, the breaker and the quarantine rules take readings and return decisions); this module
runs the procedure around them, once, for everybody:

1. **read** the node right before acting (Slurm has no compare-and-set: the window between our
   read and our update is one round trip), asking slurmctld for this node alone;
2. **decide** (the caller's pure decision function);
3. **breaker**: a drain that takes capacity first waits the node's jitter (a storm reaches the
   controller spread out), reads the node again, then counts the nodes gpuhc holds in scope; at
   the cap the caller decides again with the breaker open;
4. **act** and **verify**: send the update and re-read the node; only a verified act counts
   (scontrol can fail after slurmctld applied part of an update, so a failure is re-read too);
5. **recount** after a drain that took capacity: wait ``settle_s`` so that concurrent drains are
   visible, count again and, when gpuhc now holds more than the cap and this node ranks past
   it, undo its own drain (see :mod:`gpuhc.slurm.breaker` for why the end state is the cap).

Failures of Slurm itself raise :class:`~gpuhc.errors.SlurmError`; the callers keep their old
memory then. See ``docs/slurm.md`` for what each step asks of slurmctld.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from gpuhc.errors import SlurmError
from gpuhc.slurm.policy import Act, Decision, Memory
from gpuhc.slurm.reason import owned

if TYPE_CHECKING:
    from gpuhc.slurm.breaker import BreakerSettings, BreakerState, Survey
    from gpuhc.slurm.nodes import Node
    from gpuhc.slurm.scontrol import Scontrol

# (node as read right before acting, breaker open?) -> the decision; pure
Decider = Callable[["Node", bool], Decision]
LogFn = Callable[..., None]

# Kept free after the post-drain settle, for the recount and a possible undo.
RECOUNT_RESERVE_S = 3.0
# Kept free after the jitter: re-read, count, drain, verify, settle, recount, undo.
JITTER_RESERVE_S = 8.0
# Between two reads of the breaker ledger while waiting for a count that saw our drain.
LEDGER_POLL_S = 0.25


def _quiet(*_a, **_k) -> None:
    return None


@dataclass
class Applied:
    """What :meth:`Actuator.apply` did."""

    decision: Decision
    node: Node  # the last reading before acting
    precount: BreakerState | None = None  # the count before a drain that takes capacity
    recount: BreakerState | None = None  # the count after it
    verified: bool = False  # the act was sent and Slurm shows it
    undone: bool = False  # drained, then undone: ranked past the cap after concurrent drains
    error: str | None = None  # Slurm failed after the act took (the recount): the act stands

    @property
    def acted(self) -> bool:
        """A drain or resume that took and stands."""
        return self.verified and not self.undone

    @property
    def breaker(self) -> BreakerState | None:
        return self.recount or self.precount


class Actuator:
    """``spread``: wait the node's jitter before a first count. Right for the node-side flows (many
    processes, one node each); a single process draining a list (the sweep) has nothing to spread."""

    def __init__(self, sc: Scontrol, breaker: BreakerSettings | None = None, log: LogFn = _quiet,
                 spread: bool = True):
        if breaker is None:
            from gpuhc.slurm.breaker import BreakerSettings

            breaker = BreakerSettings()
        self.sc, self.breaker, self.log, self.spread = sc, breaker, log, spread
        self._drained: dict[str, Node] = {}  # our verified drains, as Slurm shows them (their stamp)
        self._ledger_error: str | None = None  # why the ledger is not used this run

    # ------------------------------------------------------------------ the procedure

    def apply(self, name: str, decide: Decider, node: Node | None = None,
              on_verified: Callable[[Decision], None] | None = None) -> Applied:
        """Read, decide, breaker, act, verify, recount, for one node.

        ``node`` is a reading taken earlier (the health check's handover read): a decision that
        sends nothing uses it as is; one that sends re-reads first. ``on_verified`` runs once the
        act is verified, before the recount (a flow remembers its drain there, so that an undo
        finds the memory of the drain it undoes)."""
        fresh = node is None
        node = self.sc.node(name) if fresh else node
        decision = decide(node, False)
        if decision.act.touches_slurm and not fresh:
            node = self.sc.node(name)  # read right before acting
            decision = decide(node, False)
        if _takes_capacity(decision) and self.wait_jitter(name):
            node = self.sc.node(name)  # time passed: read again
            decision = decide(node, False)
        out = Applied(decision, node)
        if _takes_capacity(decision):
            out.precount = self.count(name, node)
            if out.precount.open:
                out.decision = decision = decide(node, True)
        if not decision.act.touches_slurm:
            return out
        out.verified = self.carry_out(name, decision)
        if not out.verified:
            return out
        if on_verified is not None:
            on_verified(decision)
        if _takes_capacity(decision) and self.breaker.enabled:
            try:
                out.recount, out.undone = self.recount(name, decision.reason, node)
            except SlurmError as e:  # the drain took and is remembered: it stands, said loudly
                out.error = str(e)
                self.log(f"recount after the drain failed ({e}): the drain stands", loud=True)
        return out

    def wait_jitter(self, name: str) -> bool:
        """Sleep this node's share of ``jitter_s``, cut to what the deadline leaves after the
        rest of the procedure; True when it slept."""
        from gpuhc.slurm.breaker import jitter_for

        if not self.spread:
            return False
        room = self.sc.remaining() - self.breaker.settle_s - JITTER_RESERVE_S
        wait = min(jitter_for(name, self.breaker.jitter_s), max(0.0, room))
        if wait <= 0:
            return False
        time.sleep(wait)
        return True

    def scope_nodes(self, node: Node) -> list[Node]:
        """The nodes the breaker counts for ``node``: its partitions', or every partition's."""
        parts = list(node.partitions) if self.breaker.scope == "partition" and node.partitions else None
        ledger_node = self.breaker.ledger_node
        return [n for n in self.sc.scope(parts) if n.name != ledger_node]  # the ledger's record is no capacity

    def count(self, name: str, node: Node) -> BreakerState:
        """Before a drain that takes capacity: the ledger's word when it has a fresh entry for the
        scope (and, when there is room, our claim on it), else a count (one query; slurmctld sends
        every node) that goes into the ledger."""
        from gpuhc.slurm import ledger

        if self._ledger_on():
            comment, entries = self._read_ledger()
            entry = entries.get(self._scope(node)[0])
            if entry is not None and self._usable(entry) and ledger.fresh(entry, time.time(), self.breaker.ledger_ttl_s):
                if not entry.open:
                    self._write_ledger(comment, ledger.claimed(entry))
                return self._state(entry, node, entry.held + entry.claims)
        return self._survey(name, node).state

    def recount(self, name: str, reason: str | None, node: Node) -> tuple[BreakerState, bool]:
        """After a drain: concurrent drains (other nodes' health checks, a sweep's analyze) may
        have overshot the cap, and the nodes ranked past it undo their own drain. The count is
        another node's, from the ledger, when one saw our drain; else our own. Returns the count
        and whether this node's drain was undone."""
        settle = min(self.breaker.settle_s, max(0.0, self.sc.remaining() - RECOUNT_RESERVE_S))
        if settle > 0:
            time.sleep(settle)
        found = self._covering_entry(name, node) if self._ledger_on() else None
        if found is not None:
            state, yield_ = found
        else:
            survey = self._survey(name, node)
            state, yield_ = survey.state, survey.past_cap(name)
        if not yield_:
            return state, False
        self.log(f"concurrent drains: {state.drained} nodes held by gpuhc > cap {state.cap}; "
                 f"{name} is ranked past the cap: undoing its drain", loud=True)
        if self.sc.node(name).reason != reason:
            self.log("reason changed meanwhile: leaving the node as it is", loud=True)
            return state, False
        return state, self.carry_out(name, Decision(Act.RESUME, "undo drain past the breaker cap", Memory()))

    # ------------------------------------------------------------------ the breaker ledger

    def _survey(self, name: str, node: Node) -> Survey:
        """Count the scope (the whole node table) and write what we saw into the ledger. With a
        ledger, the count is preceded by a clock tick: a new reason on the ledger's record, which
        slurmctld stamps, read back before the count. Every drain stamped in an earlier second
        is then in the count, whatever the nodes' own clocks say (:func:`gpuhc.slurm.ledger.covers`)."""
        from gpuhc.slurm import ledger
        from gpuhc.slurm.breaker import survey

        tick = self._tick(name) if self._ledger_on() else None
        found = survey(self.scope_nodes(node), name, self.breaker)
        if tick is not None and found.cap is not None:
            entry = ledger.snapshot(found.in_scope, found.held, self._scope(node)[0], found.cap, time.time(), tick)
            if entry is not None:
                self._write_ledger(self._read_ledger()[0], entry)
        return found

    def _tick(self, name: str) -> float | None:
        """Have slurmctld stamp the ledger's record now; the stamp, or None (no ledger this run)."""
        from gpuhc.slurm import ledger

        try:
            self.sc.stamp(self.breaker.ledger_node, ledger.tick_reason(name, time.time()))
        except SlurmError as e:
            self._ledger_off(f"not stamped ({e})")
            return None
        stamp = self._read_ledger(with_stamp=True)[2]
        if stamp is None and self._ledger_on():
            self._ledger_off("shows no reason stamp after a drain")
        return stamp

    def _covering_entry(self, name: str, node: Node) -> tuple[BreakerState, bool] | None:
        """Poll the ledger for a count that saw our drain (:func:`gpuhc.slurm.ledger.covers`), for
        this node's share of ``ledger_wait_s``; None: count ourselves."""
        from gpuhc.slurm import ledger

        mine = self._drained.get(name)
        if mine is None or mine.reason_time is None:
            return None
        room = max(0.0, self.sc.remaining() - RECOUNT_RESERVE_S)
        until = time.monotonic() + min(ledger.wait_for(name, self.breaker.ledger_wait_s), room)
        key = self._scope(node)[0]
        while self._ledger_on():
            entry = self._read_ledger()[1].get(key)
            if entry is not None and self._usable(entry) and ledger.covers(entry, mine.reason_time):
                return self._state(entry, node, entry.held), ledger.past_cap(entry, mine.reason_time, name)
            if time.monotonic() + LEDGER_POLL_S > until:
                break
            time.sleep(LEDGER_POLL_S)
        return None

    def _ledger_on(self) -> bool:
        return bool(self.breaker.ledger_node) and self.breaker.enabled and self._ledger_error is None

    def _ledger_off(self, why: str) -> None:
        """Stop using the ledger for the rest of this run (said once): the node counts instead."""
        self._ledger_error = why
        self.log(f"breaker ledger {self.breaker.ledger_node} {why}: counting instead", loud=True)

    def _read_ledger(self, with_stamp: bool = False) -> tuple:
        """The ledger's comment and entries (and its reason stamp when asked); empty when it cannot
        be read."""
        from gpuhc.slurm import ledger

        try:
            comment, stamp = self.sc.ledger(self.breaker.ledger_node)
        except SlurmError as e:
            self._ledger_off(f"unreadable ({e})")
            comment, stamp = "", None
        if ledger.foreign(comment):
            self._ledger_off("carries a comment that is not gpuhc's (left alone)")
            comment = ""
        entries = ledger.parse(comment)
        return (comment, entries, stamp) if with_stamp else (comment, entries)

    def _write_ledger(self, comment: str, entry) -> None:
        from gpuhc.slurm import ledger

        if not self._ledger_on():
            return
        try:
            self.sc.set_comment(self.breaker.ledger_node, ledger.merged(comment, entry))
        except SlurmError as e:  # a lost write costs other nodes a count, nothing more
            self.log(f"breaker ledger {self.breaker.ledger_node} not written ({e})")

    def _usable(self, entry) -> bool:
        """An entry whose cap our settings agree with (nodes with another config count alone)."""
        from gpuhc.slurm.breaker import cap_for

        return entry.total > 0 and cap_for(entry.total, self.breaker) == entry.cap

    def _scope(self, node: Node) -> tuple[str, str]:
        """The ledger key and the description of ``node``'s breaker scope."""
        from gpuhc.slurm import ledger

        if self.breaker.scope == "partition" and node.partitions:
            return ledger.scope_key(node.partitions), "partition " + ",".join(sorted(set(node.partitions)))
        return ledger.scope_key(None), "cluster"

    def _state(self, entry, node: Node, drained: int) -> BreakerState:
        from gpuhc.slurm.breaker import BreakerState

        return BreakerState(open=drained >= entry.cap, drained=drained, total=entry.total, cap=entry.cap,
                            scope=self._scope(node)[1], source="ledger")

    # ------------------------------------------------------------------ single acts

    def carry_out(self, name: str, decision: Decision) -> bool:
        """Send the decision's drain/resume, re-read the node, say whether it took. Raises
        SlurmError when scontrol fails and the re-read shows it did not take."""
        if not decision.act.touches_slurm:
            return False
        try:
            if decision.act is Act.DRAIN:
                self.sc.drain(name, decision.reason)
            else:
                self.sc.resume(name)
        except SlurmError as e:
            # scontrol may report an error after slurmctld applied part of the update (a RESUME
            # of a node that is not registered yet clears DRAIN, then fails): find out.
            self.log(f"{decision.act.value} failed: {e}; re-reading the node", loud=True)
            after = self.sc.node(name)
            if not took(decision, after):
                raise
            self.log(f"Slurm shows the {decision.act.value} applied anyway (state {after.raw_state})", loud=True)
            return True
        after = self.sc.node(name)
        ok = took(decision, after)
        if ok and decision.act is Act.DRAIN:
            self._drained[name] = after
        if not ok:
            self.log(f"after {decision.act.value}: Slurm shows state {after.raw_state} reason {after.reason!r}; "
                     "someone else changed the node in between, leaving it to them", loud=True)
        return ok

    def drain(self, name: str, reason: str, why: str) -> bool:
        """An explicit drain that takes no new capacity (a node gpuhc already holds gets a new
        quarantine tag; an admin retires a node): no breaker, verified."""
        return self.carry_out(name, Decision(Act.DRAIN, why, Memory(), reason))

    def resume(self, name: str, why: str) -> bool:
        return self.carry_out(name, Decision(Act.RESUME, why, Memory()))

    def reboot(self, nodes: str, reason: str, nextstate: str) -> None:
        """``scontrol reboot ASAP nextstate=.. reason=..``: Slurm drains, reboots, then sets
        ``nextstate``; the boot-time retest decides what comes after."""
        self.sc.reboot(nodes, reason, nextstate=nextstate)


def _takes_capacity(decision: Decision) -> bool:
    return decision.act is Act.DRAIN and decision.uses_capacity


def took(decision: Decision, after: Node) -> bool:
    """Does Slurm show the decision applied?"""
    if decision.act is Act.DRAIN:
        return after.drained and after.reason == decision.reason
    # In service is the proof, not the reason text: Slurm 24.11 puts a resumed node back to IDLE
    # and keeps its old reason (docs/slurm.md, "Slurm releases").
    return not after.drained and not after.down
