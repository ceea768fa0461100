"""Decide what to do with a node: drain, resume, or leave it alone. Pure: no I/O, no clock.

The inputs are what Slurm said about the node (read right before deciding), the verdict of this
run, and gpuhc's memory of the node (hysteresis counters kept in the local state store). The
output is one :class:`Decision`; :mod:`gpuhc.slurm.flows.entry` carries it out, verifies it, and only
then stores the decision's memory. Everything dangerous is decided here, in one place, and the
unit tests walk every combination of node state x reason owner x verdict.

The rules (Slurm's behaviour: docs/facts.md, "Slurm"; and NHC's lessons):

- gpuhc drains only on FAIL. WARN never drains; ERROR (gpuhc could not judge) never drains and
  never resumes.
- A reason gpuhc did not write is never overwritten and never resumed, whatever the verdict.
- An identical reason is never re-sent; a node gpuhc already holds keeps its *first* reason (the
  first failure is usually the cause, later ones its echo) and its drain time.
- RESUME is sent only from states Slurm accepts it in (DOWN/DRAIN/FAIL/REBOOT); elsewhere
  scontrol exits 1, so a stale gpuhc reason on a schedulable node (quarantine and RETIRED tags
  included) is just forgotten.
- RESUME is not sent while the node's state is in flux: not registered yet (UNKNOWN), not
  responding (``*``: slurmctld does not hear from slurmd, e.g. the health check slurmd runs at its
  start), or with a reboot pending (the reboot was asked for a reason; the boot-time retest
  decides). The hold is kept and the next run decides.
- Resume needs ``resume_after`` consecutive healthy runs *and* the cool-down since the drain.
  A node drained again within ``flap_window_s`` of its last resume gets twice the previous
  cool-down (capped at ``max_cooldown_s``): drain/resume/drain flapping slows down, never loops.
- A node held for a check the health check does not run (occupancy: a stray process) is
  judged by that check too while gpuhc holds it out of service (:func:`rejudge`), so the health
  check neither resumes it while the finding stands nor holds it after the finding is gone.
- A node held for an active check (burn-in, gpu-speed: the GPU worker's measurements) is not
  resumed by a run that did not judge that check (:func:`unjudged_hold`): a passive run cannot
  see a GPU that computes wrong or slow. The boot-time retest's bootstrap stage, or a person's
  ``gpuhc quarantine retest``, runs it and decides.
- A node whose GPU reset left an undo pending (a run killed mid-reset, a service that did not
  start again) is kept, never resumed, until the undo has run: it is not whole.
- Quarantined (``[qN]``) and RETIRED nodes are not resumed by the health check: a quarantined
  node needs a ``bootstrap`` retest, a retired one an admin's ``gpuhc quarantine release``.
- Draining a node that is still in service is subject to the circuit breaker; adding our reason
  to a node that is already out of service takes no capacity, so the breaker does not apply.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable

from gpuhc.model.result import Result, Status
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.reason import owned, parse_reason


class Verdict(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"


def verdict_of(results: Iterable[Result]) -> Verdict:
    """The run's verdict: FAIL beats ERROR beats WARN; PASS and n/a are healthy."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return Verdict.FAIL
    if Status.ERROR in statuses:
        return Verdict.ERROR
    if Status.WARN in statuses:
        return Verdict.WARN
    return Verdict.PASS


class Owner(str, enum.Enum):
    NONE = "none"  # the node has no reason
    GPUHC = "gpuhc"
    OTHER = "other"  # an admin, Slurm itself, another tool


def owner_of(node: Node) -> Owner:
    if not node.reason:
        return Owner.NONE
    return Owner.GPUHC if owned(node.reason) else Owner.OTHER


def out_of_service(node: Node) -> bool:
    """Not taking new jobs because of its state: drained/draining, down, failed."""
    return node.drained or node.down or node.failing


def registered(node: Node) -> bool:
    """slurmd runs the health check once at start, before the node registers: Slurm then shows
    base state UNKNOWN. A RESUME in that state is refused after Slurm has already cleared the
    DRAIN flag (a release fact: gpuhc/slurm/read/releases.py), so gpuhc does not resume then."""
    return node.state != "UNKNOWN"


def reboot_pending(node: Node) -> bool:
    """A reboot was asked for (``scontrol reboot``) and has not completed."""
    return bool({"REBOOT_REQUESTED", "REBOOT_ISSUED"} & node.flags) or node.state == "REBOOT"


def resumable(node: Node) -> bool:
    """States in which ``State=RESUME`` is accepted (DOWN, DRAIN, FAIL, REBOOT)."""
    if not registered(node):
        return False
    return out_of_service(node) or reboot_pending(node)


class Act(str, enum.Enum):
    NONE = "none"  # nothing to do, nothing to send
    DRAIN = "drain"  # send State=DRAIN with Decision.reason
    RESUME = "resume"  # send State=RESUME
    KEEP = "keep"  # unhealthy, but the node is left as it is (already held, or not ours)
    WAIT = "wait"  # healthy, held by gpuhc until hysteresis and cool-down allow a resume
    BLOCKED = "blocked"  # would drain, but the circuit breaker is open

    @property
    def touches_slurm(self) -> bool:
        return self in (Act.DRAIN, Act.RESUME)


@dataclass(frozen=True)
class PolicySettings:
    resume_after: int = 3  # consecutive healthy runs before a resume
    cooldown_s: float = 600.0  # minimum time between our drain and our resume
    max_cooldown_s: float = 6 * 3600.0  # cap of the flap back-off
    flap_window_s: float = 6 * 3600.0  # a drain this soon after our resume counts as a flap

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> "PolicySettings":
        return cls(
            resume_after=int(section.get("resume_after", cls.resume_after)),
            cooldown_s=float(section.get("cooldown_s", cls.cooldown_s)),
            max_cooldown_s=float(section.get("max_cooldown_s", cls.max_cooldown_s)),
            flap_window_s=float(section.get("flap_window_s", cls.flap_window_s)),
        )


@dataclass(frozen=True)
class Memory:
    """What gpuhc remembers about its hold on this node (JSON-able, kept in the state store)."""

    drained_at: float | None = None  # when gpuhc drained it; None: gpuhc holds nothing
    reason: str | None = None  # the reason gpuhc set
    passes: int = 0  # consecutive healthy runs since the last failure
    flaps: int = 0  # consecutive drains that came within the flap window of a resume
    cooldown_s: float | None = None  # cool-down that applies to the current hold
    last_resume: float | None = None

    @property
    def holding(self) -> bool:
        return self.drained_at is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "Memory":
        """Tolerant: a damaged or foreign entry reads as "no memory" rather than crashing."""
        if not isinstance(data, dict):
            return cls()
        out: dict[str, Any] = {}
        for name, kind in (("drained_at", float), ("cooldown_s", float), ("last_resume", float),
                           ("passes", int), ("flaps", int)):
            v = data.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[name] = kind(v)
        if isinstance(data.get("reason"), str):
            out["reason"] = data["reason"]
        return cls(**out)


@dataclass(frozen=True)
class Decision:
    act: Act
    why: str  # one line for the log
    memory: Memory  # store this once the act is done (and verified); acts that send nothing store it at once
    reason: str | None = None  # for DRAIN
    uses_capacity: bool = False  # DRAIN of a node in service: the breaker applies
    extra: dict[str, Any] = field(default_factory=dict)


def needs_slurm(verdict: Verdict, memory: Memory) -> bool:
    """Does this run have anything to decide? Healthy runs of a node gpuhc does not hold must
    not cost Slurm a query (hundreds of nodes, every few minutes)."""
    return verdict is Verdict.FAIL or (memory.holding and verdict in (Verdict.PASS, Verdict.WARN))


def rejudge(node: Node | None) -> tuple[str, ...]:
    """The check whose finding holds this node, for the health check to run as well: without
    it, a drain by a check the health-check stage does not run (occupancy: a process left on a
    GPU, judged only around jobs) would be "healthy" at every health check and resumed after the
    cool-down while the finding stands, to be drained by the next prolog (the flapping of
    docs/campaign.md). Only out of service: on a node in service a process on a GPU is a job's.
    A job still finishing on a draining node fails the check too; that only keeps the hold
    (KEEP sends nothing), the safe side, and the ladder waits for the job (remediate.busy_of).
    Empty when ``node`` (the handover's reading) is None: gpuhc holds nothing."""
    mine = parse_reason(node.reason) if node is not None else None
    if mine is None or mine.retired or not mine.check or not out_of_service(node):
        return ()
    return (mine.check,)


def unjudged(results: Iterable[Result], active: frozenset[str]) -> frozenset[str]:
    """The ``active`` checks this run gave no verdict of health (no PASS or WARN)."""
    return active - {r.check for r in results if r.status in (Status.PASS, Status.WARN)}


def unjudged_hold(reason: str | None, unjudged_checks: frozenset[str]) -> str | None:
    """The check whose finding is ``reason`` when it is one of ``unjudged_checks`` (an active
    check this run did not judge: :func:`unjudged`); None otherwise. Passive checks are never
    in that set: the health check rejudges those (:func:`rejudge`), and one an admin has since
    disabled must not hold a node for good."""
    mine = parse_reason(reason)
    if mine is None or mine.retired or mine.check not in unjudged_checks:
        return None
    return mine.check


def cooldown_for(memory: Memory, now: float, s: PolicySettings) -> tuple[float, int]:
    """Cool-down and flap count for a drain happening now."""
    flapping = memory.last_resume is not None and now - memory.last_resume < s.flap_window_s
    flaps = memory.flaps + 1 if flapping else 0
    return min(s.cooldown_s * (2 ** flaps), max(s.cooldown_s, s.max_cooldown_s)), flaps


def decide(
    node: Node,
    verdict: Verdict,
    reason: str | None,
    memory: Memory,
    now: float,
    settings: PolicySettings,
    breaker_open: bool = False,
    unjudged_checks: frozenset[str] = frozenset(),
    undo_pending: str | None = None,
) -> Decision:
    """The one decision. ``reason`` is what gpuhc would write for this run's failures (FAIL only).

    ``breaker_open`` matters only for a drain that takes capacity: callers decide once with it
    False and, if the answer is such a drain, count the drained nodes and decide again.
    ``unjudged_checks`` (:func:`unjudged` of the run): a healthy run keeps a node held for one
    of them; the health check passes them, a caller that passes none resumes as before.
    ``undo_pending``: a GPU reset's undo not yet carried out (gpuhc/slurm/repair/undo_journal.py),
    in words: the node is not whole, so it is kept, never resumed.
    """
    owner = owner_of(node)
    mine = parse_reason(node.reason)
    if verdict is Verdict.FAIL:
        return _on_failure(node, owner, mine, reason, memory, now, settings, breaker_open)
    if verdict is Verdict.ERROR:
        return Decision(Act.NONE, "gpuhc could not judge this node: not touching it", memory)
    return _on_healthy(node, owner, mine, memory, now, settings, unjudged_checks, undo_pending)


def _on_failure(node, owner, mine, reason, memory, now, s, breaker_open) -> Decision:
    if not reason:
        raise ValueError("a FAIL verdict needs the drain reason")
    stale = ""
    if owner is Owner.OTHER:
        who = f" (set by {node.reason_user})" if node.reason_user else ""
        if out_of_service(node) or reboot_pending(node) or not registered(node):
            # Someone else's reason on a node it holds out (or one a reboot was asked for):
            # theirs to manage. Overwriting it would destroy their record, so we only shout.
            return Decision(Act.KEEP, f"node has a reason gpuhc did not set{who}: {node.reason!r}; not overwriting",
                            replace(memory, passes=0))
        # A reason on a node that takes jobs holds nothing: Slurm 24.11 and later keep it when a
        # RESUME clears the drain (NHC's node-mark-online, an admin's resume), and Slurm sets no
        # reason on a schedulable node otherwise. Kept, it would keep a failing node in service
        # for good; it is replaced, and named in the decision's words (the log keeps it).
        stale = f"; replacing the reason left on a node in service{who}: {node.reason!r}"
    if owner is Owner.GPUHC and out_of_service(node):
        held = memory if memory.holding else replace(memory, drained_at=node.reason_time or now, reason=node.reason)
        same = "same reason" if _same_evidence(node.reason, reason) else f"keeping the first reason, now also: {reason!r}"
        return Decision(Act.KEEP, f"already drained by gpuhc ({same})", replace(held, passes=0))
    # No reason at all, or a stale one (gpuhc's or another's) on a node in service: drain.
    cooldown, flaps = cooldown_for(memory, now, s)
    new = Memory(drained_at=now, reason=reason, passes=0, flaps=flaps, cooldown_s=cooldown,
                 last_resume=memory.last_resume)
    takes = not out_of_service(node)
    if takes and breaker_open:
        return Decision(Act.BLOCKED, "circuit breaker open: not draining", replace(memory, passes=0), reason,
                        uses_capacity=True)
    why = "failed checks" + (f"; flap {flaps}: cool-down {cooldown:.0f}s" if flaps else "") + stale
    return Decision(Act.DRAIN, why, new, reason, uses_capacity=takes)


def _on_healthy(node, owner, mine, memory, now, s, unjudged_checks, undo_pending=None) -> Decision:
    if owner is not Owner.GPUHC:
        why = "healthy"
        if memory.holding:
            why = "healthy; node no longer carries a gpuhc reason (resumed or taken over): forgetting our hold"
        return Decision(Act.NONE, why, Memory(flaps=memory.flaps, last_resume=memory.last_resume))
    if not registered(node):
        return Decision(Act.NONE, "node not registered with slurmctld yet (state UNKNOWN): deciding next run",
                        memory)
    if reboot_pending(node):
        # Someone (``gpuhc quarantine retest --reboot``, an admin) asked for a reboot; a RESUME
        # now would put the node back before it and skip the boot-time retest.
        return Decision(Act.KEEP, f"reboot pending (state {node.raw_state or node.state}): "
                                  "the boot-time retest decides", memory)
    if not out_of_service(node):
        # Slurm refuses RESUME here; the stale reason (quarantine and RETIRED tags included)
        # does not hold the node, so forget it.
        return Decision(Act.NONE, f"healthy; state {node.raw_state or node.state} takes no RESUME",
                        Memory(flaps=memory.flaps, last_resume=memory.last_resume))
    if undo_pending:
        return Decision(Act.KEEP, f"{undo_pending}: not resuming until it has run", memory)
    if mine is not None and mine.retired:
        return Decision(Act.KEEP, "retired by gpuhc: only `gpuhc quarantine release` returns it", memory)
    if mine is not None and mine.quarantined:
        return Decision(Act.KEEP, f"in quarantine (cycle {mine.cycle}): needs `gpuhc quarantine retest`", memory)
    if node.not_responding:
        return Decision(Act.NONE, f"slurmctld does not hear from this node (state {node.raw_state or node.state}): "
                                  "deciding next run", memory)
    active = unjudged_hold(node.reason, unjudged_checks)
    if active is not None:
        return Decision(Act.KEEP, f"held for {active}, an active check this run does not judge: the boot-time "
                                  "retest (bootstrap stage) or `gpuhc quarantine retest` decides", memory)
    held = memory if memory.holding else replace(memory, drained_at=node.reason_time or now, reason=node.reason)
    passes = held.passes + 1
    cooldown = held.cooldown_s if held.cooldown_s is not None else s.cooldown_s
    since = now - (held.drained_at or now)
    if passes >= s.resume_after and since >= cooldown:
        after = Memory(flaps=held.flaps, last_resume=now)
        return Decision(Act.RESUME, f"resuming: {passes} healthy runs, {since:.0f}s since the drain", after)
    waits = []
    if passes < s.resume_after:
        waits.append(f"{passes}/{s.resume_after} healthy runs")
    if since < cooldown:
        waits.append(f"cool-down {since:.0f}/{cooldown:.0f}s")
    return Decision(Act.WAIT, "healthy, holding: " + ", ".join(waits), replace(held, passes=passes))


def _same_evidence(held: str | None, reason: str | None) -> bool:
    """The same failure, whatever tags the held reason carries (a quarantine cycle, the
    remediation ladder's step, Slurm's reboot notes)."""
    if held == reason:
        return True
    a, b = parse_reason(held), parse_reason(reason)
    return a is not None and b is not None and a.body == b.body
