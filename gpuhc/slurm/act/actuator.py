"""The actuator: the one place where gpuhc changes a node in Slurm (drain, resume, reboot).

Every path that drains or resumes goes through here: the health check, the prolog and the epilog
(:mod:`gpuhc.slurm.flows.entry`), ``gpuhc sweep analyze --apply`` (:mod:`gpuhc.sweep.analyze`) and the
admin's ``gpuhc quarantine`` commands (:mod:`gpuhc.slurm.repair.admin`). The decisions stay pure (the
policy, the breaker and the quarantine rules take readings and return decisions); this module
runs the procedure around them, once, for everybody:

1. **read** the node right before acting (Slurm has no compare-and-set: the window between our
   read and our update is one round trip), asking slurmctld for this node alone; a drain that
   takes capacity reads it after its jitter (next step) instead;
2. **decide** (the caller's pure decision function);
3. **breaker**: a drain that takes capacity first waits the node's jitter (a storm reaches the
   controller spread out), reads the node, then counts the nodes gpuhc holds in scope; at
   the cap the caller decides again with the breaker open, and so it does when too little of
   the deadline is left to verify the drain (docs/slurm.md, "Time to verify");
4. **act** and **verify**: send the update and re-read the node; only a verified act counts
   (scontrol can fail after slurmctld applied part of an update, so a failure is re-read too);
5. **recount** after a drain that took capacity: wait ``settle_s`` so that concurrent drains are
   visible, count again and, when gpuhc now holds more than the cap and this node ranks past
   it, undo its own drain (see :mod:`gpuhc.slurm.policy.breaker` for why the end state is the cap).

With a breaker ledger (``slurm.breaker.ledger_node``), steps 3 and 5 take another node's count
from the ledger when it has one that will do, and every count of this node goes into it
(:mod:`gpuhc.slurm.policy.ledger` says when a count will do, :mod:`gpuhc.slurm.act.ledger_client` how).

In observe mode (``slurm.mode: observe``, docs/repair.md "Observe mode") steps 1-3 run as
always, reads only, so the decision is the one enforce mode would take; step 4 is replaced by a
"would drain / resume / retire / reboot" log line, and nothing is sent (no update, no reboot).

Failures of Slurm itself raise :class:`~gpuhc.errors.SlurmError`; the callers keep their old
memory then. See ``docs/slurm.md`` for what each step asks of slurmctld.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from gpuhc.errors import SlurmError
from gpuhc.slurm.policy.drain import Act, Decision, Memory
from gpuhc.slurm.policy.reason import owned

if TYPE_CHECKING:
    from gpuhc.slurm.policy.breaker import BreakerSettings, BreakerState, Survey
    from gpuhc.slurm.read.nodes import Node
    from gpuhc.slurm.act.scontrol import Scontrol

# (node as read right before acting, breaker open?) -> the decision; pure
Decider = Callable[["Node", bool], Decision]
LogFn = Callable[..., None]

# Kept free after the post-drain settle, for the recount and a possible undo.
RECOUNT_RESERVE_S = 3.0
# A drain that takes capacity is sent only with this much time left after ``settle_s``: its
# recount (a wait for another node's count, or a count of the whole table, and an undo). A drain
# that cannot be verified stands, past the cap if others raced it; in one 200-node storm on a
# loaded box 53 drains came too late to be verified and 75 nodes ended held for a cap of 40
# (docs/verification.md). The next run (minutes later) decides again. A place claimed
# in the ledger is drained whatever time is left (the claim was read back: it is ours, and an
# unused one would hold a node back); so the count or claim is begun only with CLAIM_NEEDS_S more.
# A short stage gets a share of its deadline instead (the prolog's 20 s: 5 s and 2 s).
VERIFY_NEEDS_S = 10.0
CLAIM_NEEDS_S = 5.0
VERIFY_SHARE, CLAIM_SHARE = 0.25, 0.1
# A controller slower than these bounds assume (a storm's load) is measured, not guessed: a drain
# is sent only with time for this many of its slowest answers so far in the run (the drain, its
# verifying read, the recount, the re-read and the resume of an undo), and a count or claim is
# begun only with time for one more. With a fixed 5 s in the prolog and scontrol answering in
# 4 s, drains were sent that could not be read back, stood uncounted, and 5 nodes ended held
# for a cap of 4 (CI, 2026-12-07; tests/slurm_real/test_prolog_storm.py).
CALLS_TO_VERIFY = 5
# Kept free after the jitter. Less than a long stage's VERIFY_NEEDS_S + CLAIM_NEEDS_S on purpose:
# a node whose wait the deadline cut (its checks took most of the run, as under a storm's load)
# ends too late to take a place, and sheds its load from the storm. Leaving the whole 15 s made
# those late nodes claim and drain, and a storm cost up to 114 MB where it had cost 77-89 MB
# (docs/verification.md). In the prolog (20 s) it is exactly what a place and a
# drain need there.
JITTER_RESERVE_S = 8.0


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
    observed: bool = False  # observe mode: the act was decided and logged, not sent

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
                 spread: bool = True, observe: bool = False, stage_s: float | None = None):
        if breaker is None:
            from gpuhc.slurm.policy.breaker import BreakerSettings

            breaker = BreakerSettings()
        self.sc, self.breaker, self.log, self.spread = sc, breaker, log, spread
        self.observe = observe  # slurm.mode: observe
        # (time to verify a drain, time to get a place first): see VERIFY_NEEDS_S
        share = stage_s if stage_s is not None else float("inf")
        self.needs = (min(VERIFY_NEEDS_S, VERIFY_SHARE * share), min(CLAIM_NEEDS_S, CLAIM_SHARE * share))
        self._drained: dict[str, Node] = {}  # our verified drains, as Slurm shows them (their stamp)
        self.ledger = None
        # Observe mode counts from its own read of the scope: the ledger is written as it is read
        # (ticks, claims, counts), and observe mode writes nothing (gpuhc/slurm/act/command.py's gate).
        if breaker.ledger_node and breaker.enabled and not observe:
            from gpuhc.slurm.act.ledger_client import LedgerClient

            self.ledger = LedgerClient(sc, breaker, log)

    # ------------------------------------------------------------------ the procedure

    def apply(self, name: str, decide: Decider, node: Node | None = None,
              on_verified: Callable[[Decision], None] | None = None) -> Applied:
        """Read, decide, breaker, act, verify, recount, for one node.

        ``node`` is a reading taken earlier (the health check's handover read): a decision that
        sends nothing uses it as is; one that sends re-reads first (after the jitter, for a drain
        that waits one: one read of 17 KB per node in a storm, not two). ``on_verified`` runs once the
        act is verified, before the recount (a flow remembers its drain there, so that an undo
        finds the memory of the drain it undoes)."""
        fresh = node is None
        node = self.sc.node(name) if fresh else node
        decision = decide(node, False)
        if _takes_capacity(decision) and self.wait_jitter(name):
            node = self.sc.node(name)  # read right before acting, after the wait
            decision = decide(node, False)
        elif decision.act.touches_slurm and not fresh:
            node = self.sc.node(name)  # read right before acting
            decision = decide(node, False)
        out = Applied(decision, node)
        if _takes_capacity(decision) and self._too_late(claim=True):
            # Not even a claim: a place taken in the ledger and never drained holds a node back.
            out.decision = decision = self._blocked_too_late(decide, node)
        if _takes_capacity(decision):
            out.precount = self.count(name, node)
            if out.precount.open:
                out.decision = decision = decide(node, True)
            elif not (self.ledger is not None and self.ledger.placed) and self._too_late():
                out.decision = decision = self._blocked_too_late(decide, node)
        if not decision.act.touches_slurm:
            return out
        if self.observe:
            out.observed = self.would(name, decision)
            return out
        out.verified = self.carry_out(name, decision)
        if not out.verified:
            return out
        if on_verified is not None:
            on_verified(decision)
        if _takes_capacity(decision) and self.breaker.enabled:
            try:
                out.recount, out.undone = self.recount(name, decision.reason, node)
            except Exception as e:  # the drain took and is remembered: it stands, said loudly
                out.error = str(e) if isinstance(e, SlurmError) else f"{type(e).__name__}: {e}"
                self.log(f"recount after the drain failed ({e}): the drain stands", loud=True)
        return out

    def _too_late(self, claim: bool = False) -> bool:
        """Too little time left to drain and verify the drain against the cap (``claim``: and to
        get a place first)? Both needs grow with the slowest answer slurmctld gave this run."""
        slowest = self.sc.slowest_s
        need = self.breaker.settle_s + max(self.needs[0], CALLS_TO_VERIFY * slowest)
        if claim:
            need += max(self.needs[1], slowest)
        return self.breaker.enabled and self.sc.remaining() < need

    def _blocked_too_late(self, decide: Decider, node: Node) -> Decision:
        """The caller's blocked decision, saying why: too late, not the cap."""
        left = max(0.0, self.sc.remaining())
        slow = f", slurmctld answering in up to {self.sc.slowest_s:.1f}s" if self.sc.slowest_s >= 1.0 else ""
        return replace(decide(node, True), why=f"not draining this run: {left:.0f}s left before the deadline{slow}, "
                       "too little to verify the drain against the breaker's cap (the next run decides)")

    def wait_jitter(self, name: str) -> bool:
        """Sleep this node's share of ``jitter_s``, cut to what the deadline leaves after the
        rest of the procedure; True when it slept."""
        from gpuhc.slurm.policy.breaker import jitter_for

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
        scope (docs/slurm.md "Breaker ledger"), else a count (one query; slurmctld sends every
        node) that goes into the ledger."""
        if self.ledger is not None:
            state = self._ledger_said(self.ledger.before_drain, name, node)
            if state is not None:
                return state
        try:
            return self._survey(name, node, "before the drain").state
        except Exception as e:  # no drain that takes capacity without the breaker: said, FAIL kept
            why = str(e) if isinstance(e, SlurmError) else f"{type(e).__name__}: {e}"
            raise SlurmError(f"the breaker's count failed ({why}): not draining without it") from None

    def recount(self, name: str, reason: str | None, node: Node) -> tuple[BreakerState, bool]:
        """After a drain: concurrent drains (other nodes' health checks, a sweep's analyze) may
        have overshot the cap, and the nodes ranked past it undo their own drain. The count is
        another node's, from the ledger, when one saw our drain; else our own. Returns the count
        and whether this node's drain was undone."""
        settle = min(self.breaker.settle_s, max(0.0, self.sc.remaining() - RECOUNT_RESERVE_S))
        if settle > 0:
            time.sleep(settle)
        found = None
        if self.ledger is not None:
            found = self._ledger_said(self.ledger.after_drain, name, node, self._drained.get(name))
        if found is not None:
            state, yield_ = found
        else:
            survey = self._survey(name, node, "after the drain")
            state, yield_ = survey.state, survey.past_cap(name)
        if not yield_:
            return state, False
        self.log(f"concurrent drains: {state.drained} nodes held by gpuhc > cap {state.cap}; "
                 f"{name} is ranked past the cap: undoing its drain", loud=True)
        if self.sc.node(name).reason != reason:
            self.log("reason changed meanwhile: leaving the node as it is", loud=True)
            return state, False
        return state, self.carry_out(name, Decision(Act.RESUME, "undo drain past the breaker cap", Memory()))

    def _survey(self, name: str, node: Node, when: str) -> Survey:
        """Count the scope (the whole node table). With a ledger, the count is preceded by a clock
        tick (slurmctld stamps the ledger's record) and what it saw is written into the ledger."""
        from gpuhc.slurm.policy.breaker import survey

        tick = self._ledger_said(self.ledger.tick, name) if self.ledger is not None and self.ledger.on else None
        found = survey(self.scope_nodes(node), name, self.breaker)
        if tick is not None:
            self._ledger_said(self.ledger.publish, found, node, tick)
            self.log(f"breaker: counted {found.scope} {when} (the ledger had no count that would do)")
        return found

    def _ledger_said(self, call: Callable, *args):
        """One step of the ledger client. Slurm's failures it handles itself; any other failure
        (a bug, bytes nobody expected) turns the ledger off for this run and the node counts, as
        without a ledger: the ledger is bookkeeping, never a reason to leave a failing node
        alone (docs/slurm.md "Bookkeeping failures")."""
        try:
            return call(*args)
        except Exception as e:
            self.ledger.off(f"failed ({type(e).__name__}: {e})")
            return None

    # ------------------------------------------------------------------ single acts

    def would(self, name: str, decision: Decision) -> bool:
        """Observe mode: say what enforce mode would send, send nothing."""
        what = would_do(decision.act.value, decision.reason)
        self.log(f"observe mode: would {what} {name}: {decision.why}"
                 + (f": {decision.reason}" if decision.reason else ""), loud=True)
        return True

    def carry_out(self, name: str, decision: Decision) -> bool:
        """Send the decision's drain/resume, re-read the node, say whether it took. Raises
        SlurmError when scontrol fails and the re-read shows it did not take. In observe mode:
        logged, not sent, and False (nothing took)."""
        if not decision.act.touches_slurm:
            return False
        if self.observe:
            self.would(name, decision)
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
            if self.ledger is not None:
                self.ledger.saw(after.reason_time)  # slurmctld's clock, for the ledger's horizon
        if not ok:
            self.log(f"after {decision.act.value}: Slurm shows state {after.raw_state} reason {after.reason!r}; "
                     "someone else changed the node in between, leaving it to them", loud=True)
        return ok

    def drain(self, name: str, reason: str, why: str) -> bool:
        """An explicit drain meant to take no new capacity (a node gpuhc already holds gets a new
        quarantine or ladder tag; an admin retires a node), verified. A re-tag that would make a
        node count under the cap where it did not (a retired node tagged ``[q1]`` again, a node
        out with no reason) does take capacity: it passes the breaker like a drain, and at the
        cap it is not sent (False, said)."""
        from gpuhc.slurm.policy.breaker import counted

        if self.breaker.enabled and self.breaker_matters(name, reason):
            node = self.sc.node(name)
            after = replace(node, reason=reason, flags=node.flags | {"DRAIN"})
            if not counted(node) and counted(after):
                state = self.count(name, node)
                if state.open:
                    self.log(f"{state.message}; NOT re-tagging {name} ({reason}): the new reason would take a "
                             "place under the cap", loud=True)
                    return False
        return self.carry_out(name, Decision(Act.DRAIN, why, Memory(), reason))

    def breaker_matters(self, name: str, reason: str) -> bool:
        """Could this reason count under the cap at all (gpuhc's, not RETIRED)? Saves a read otherwise."""
        from gpuhc.slurm.policy.reason import owned, parse_reason

        mine = parse_reason(reason)
        return owned(reason) and not (mine is not None and mine.retired)

    def resume(self, name: str, why: str) -> bool:
        return self.carry_out(name, Decision(Act.RESUME, why, Memory()))

    def reboot(self, nodes: str, reason: str, nextstate: str) -> None:
        """``scontrol reboot ASAP nextstate=.. reason=..``: Slurm drains, reboots, then sets
        ``nextstate``; the boot-time retest decides what comes after."""
        if self.observe:
            self.log(f"observe mode: would reboot {nodes} (nextstate={nextstate}): {reason}", loud=True)
            return
        self.sc.reboot(nodes, reason, nextstate=nextstate)


def would_do(act: str, reason: str | None) -> str:
    """The verb of an observed act: a drain with a RETIRED reason is a retirement."""
    from gpuhc.slurm.policy.reason import parse_reason

    mine = parse_reason(reason)
    return "retire" if act == "drain" and mine is not None and mine.retired else act


def _takes_capacity(decision: Decision) -> bool:
    return decision.act is Act.DRAIN and decision.uses_capacity


def took(decision: Decision, after: Node) -> bool:
    """Does Slurm show the decision applied?"""
    if decision.act is Act.DRAIN:
        return after.drained and after.reason == decision.reason
    # In service is the proof, not the reason text: a release may keep a resumed node's old reason
    # (gpuhc/slurm/read/releases.py, "scontrol update State=RESUME").
    return not after.drained and not after.down
