"""gpuhc's memory of the Slurm side, in the node's state document (gpuhc/state/node.py). This module
owns three keys, and every read and write of them goes through it:

- ``slurm.nodes.<node>``: the drain policy's :class:`~gpuhc.slurm.policy.drain.Memory` (the hold,
  clean runs, flaps, gpuhc's last resume);
- ``slurm.ladder.<node>``: the remediation ladder's :class:`~gpuhc.slurm.repair.ladder.LadderMemory`;
- ``slurm.last.<node>``: the last decision a flow stored (stage, time, act, why), for a person;
- ``slurm.wedged.<node>``: health checks in a row whose NVML hung or failed, and when the first
  of them was (gpuhc/slurm/flows/wedged.py);
- ``slurm.breaker.<node>``: the breaker's last count any run of this node saw (with its time),
  so that a run that cannot get its turn with Slurm still knows the breaker's state
  (docs/slurm.md, "No exit 1 without the breaker").

The document functions (``doc`` in, nothing read from disk) serve callers already inside a
transaction (:mod:`gpuhc.slurm.flows.handover`); the flow functions open one. A state that cannot be
read or written never changes a verdict: said in the flow's log, and the next run re-reads Slurm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuhc.slurm.policy.drain import Decision, Memory

if TYPE_CHECKING:
    from gpuhc.slurm.policy.breaker import BreakerState
    from gpuhc.slurm.flows.frame import Flow
    from gpuhc.slurm.repair.ladder import LadderMemory  # loaded by the ladder's own calls: not on the prolog's path

SLURM, NODES, LADDER, LAST, BREAKER, WEDGED = "slurm", "nodes", "ladder", "last", "breaker", "wedged"
# An earlier run's count of the breaker speaks for it this long (a few health-check intervals);
# older, the breaker's state is unknown.
BREAKER_KNOWN_S = 900.0


# ---------------------------------------------------------------------------- in a document


def _mine(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return doc.setdefault(SLURM, {}).setdefault(key, {})


def policy_memory(doc: dict[str, Any], node: str) -> Memory:
    return Memory.from_dict(doc.get(SLURM, {}).get(NODES, {}).get(node))


def set_policy_memory(doc: dict[str, Any], node: str, memory: Memory) -> None:
    _mine(doc, NODES)[node] = memory.to_dict()


def forget_hold(doc: dict[str, Any], node: str) -> None:
    """Someone else resumed the node: the hold goes, its flap count and gpuhc's last resume stay
    (docs/slurm.md, "An admin's resume is an acknowledgement")."""
    old = policy_memory(doc, node)
    set_policy_memory(doc, node, Memory(flaps=old.flaps, last_resume=old.last_resume))


# ---------------------------------------------------------------------------- a flow's


def load_memory(flow: Flow) -> Memory:
    """The drain policy's memory of this node; empty (said) when the state cannot be read."""
    from gpuhc.state.node import StateStore

    try:
        doc = StateStore(flow.opts.state_dir).read()
    except Exception as e:
        flow.log(f"state unreadable ({e}): deciding without memory", loud=True)
        return Memory()
    return policy_memory(doc, flow.node)


def save_memory(flow: Flow, memory: Memory, decision: Decision | None) -> None:
    """Store the policy's memory and, with ``decision``, the flow's last decision."""
    from gpuhc.state.node import StateStore

    try:
        with StateStore(flow.opts.state_dir).transaction() as doc:
            set_policy_memory(doc, flow.node, memory)
            if decision is not None:
                _mine(doc, LAST)[flow.node] = {"stage": flow.stage, "time": flow.now(),
                                               "act": decision.act.value, "why": decision.why}
    except Exception as e:  # the node's verdict stands; the next run re-reads Slurm
        flow.log(f"state not saved ({e})", loud=True)


def note_resumed(flow: Flow) -> None:
    """gpuhc itself resumed the node after a retest (the ladder's reset, the boot-time retest):
    the hold and its clean-run count go, the flaps stay, and the resume's time starts the
    flap window (docs/slurm.md, "Hysteresis and cool-down")."""
    save_memory(flow, Memory(flaps=load_memory(flow).flaps, last_resume=flow.now()), None)


def load_ladder(flow: Flow) -> LadderMemory:
    """The ladder's memory of this node; empty when the state cannot be read."""
    from gpuhc.slurm.repair.ladder import LadderMemory
    from gpuhc.state.node import StateStore

    try:
        doc = StateStore(flow.opts.state_dir).read()
    except Exception:
        return LadderMemory()
    return LadderMemory.from_dict(doc.get(SLURM, {}).get(LADDER, {}).get(flow.node))


def save_ladder(flow: Flow, memory: LadderMemory) -> None:
    from gpuhc.state.node import StateStore

    try:
        with StateStore(flow.opts.state_dir).transaction() as doc:
            _mine(doc, LADDER)[flow.node] = memory.to_dict()
    except Exception as e:
        flow.log(f"remediation state not saved ({e})", loud=True)


def last_breaker(flow: Flow) -> BreakerState | None:
    """The breaker's last count this node saw, if recent enough to speak for it; None: unknown."""
    from gpuhc.slurm.policy.breaker import BreakerState
    from gpuhc.state.node import StateStore

    try:
        d = StateStore(flow.opts.state_dir).read().get(SLURM, {}).get(BREAKER, {}).get(flow.node)
    except Exception:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("time"), (int, float)):
        return None
    if not 0 <= flow.now() - d["time"] <= BREAKER_KNOWN_S:
        return None
    return BreakerState.from_dict(d)


def save_breaker(flow: Flow, state: BreakerState) -> None:
    """Keep a count this run saw (its own, the ledger's) for the runs that cannot count."""
    from gpuhc.state.node import StateStore

    try:
        with StateStore(flow.opts.state_dir).transaction() as doc:
            _mine(doc, BREAKER)[flow.node] = {**state.to_dict(), "time": flow.now()}
    except Exception as e:
        flow.log(f"breaker count not saved ({e})", loud=True)


def count_wedged(flow: Flow, trouble: bool) -> tuple[int, float]:
    """(the health checks in a row whose NVML hung or failed, this one counted, the time of the
    first of them), or (0, now) once a clean read sets the count back. Kept as
    ``{"runs": n, "first": t}``; a count an older gpuhc kept (a bare number) starts its span now.
    A run without trouble and nothing counted only reads."""
    from gpuhc.state.node import StateStore

    store = StateStore(flow.opts.state_dir)
    now = flow.now()
    kept = store.read().get(SLURM, {}).get(WEDGED, {}).get(flow.node)
    runs, first = _wedged_entry(kept, now)
    if not trouble:
        if kept is not None and kept != 0:
            with store.transaction() as doc:
                _mine(doc, WEDGED)[flow.node] = 0
        return 0, now
    runs, first = runs + 1, (first if runs else now)
    with store.transaction() as doc:
        _mine(doc, WEDGED)[flow.node] = {"runs": runs, "first": first}
    return runs, first


def _wedged_entry(kept: Any, now: float) -> tuple[int, float]:
    def number(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x

    if isinstance(kept, dict) and number(kept.get("runs")) and number(kept.get("first")) and kept["runs"] >= 0 \
            and kept["first"] <= now:
        return int(kept["runs"]), float(kept["first"])
    if number(kept) and kept > 0:
        return int(kept), now  # an older release's bare count: its span starts again
    return 0, now
