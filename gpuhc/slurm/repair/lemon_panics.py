"""Lemon memory's panics: a previous boot's kernel panic that the hardware caused is one fault of
the node, counted once, though it drains nothing by itself (docs/repair.md, "Lemon memory").

A node whose kernel panicked on a machine check (or an NMI, a firmware-first hardware error) is
up again when gpuhc next runs, and the kernel-health check only warns (class ``panic-hardware``,
gpuhc/catalog/evidence.py): the machine-check check fails on the error itself where the log holds it.
No drain, so no fault: a node that panicked on a machine check three times in a month was no
lemon. Admins call it one; so the health check's flow records each such panic in the node's lemon
history (the state's ``lemons``), as a fault of check ``panic-hardware`` at the panic's own time
(the pstore record's, or the previous boot's journal line's). The panic is in every run of the
boot after it (gpuhc/sources/prev_boot.py keeps it for the boot), and in a later boot's while
pstore keeps its record: its time is its key, and a panic already in the history is not
recorded again.

- Only what the evidence table counts toward a lemon (``panic-hardware``: yes; a software
  panic, class ``kernel-health``: no). A panic without a wall-clock time cannot be keyed and is
  not counted; nor is one older than ``slurm.lemon.window_days``, one before the node's
  ``lemons.cleared_at`` (a person's word that it is mended), or one a test-mode run replays.
- Observe mode records nothing (an observed drain is no fault either); on the run whose
  kernel-health check reports the panic it says ``observe mode: would count ...``.
- The panic that makes the node a lemon (``slurm.lemon.faults`` faults within the window, drains
  and panics together) retires it as a lemon drain would, through the same gate: the caller
  (:func:`gpuhc.slurm.flows.entry.judge_and_act`) decides a drain with this evidence, the lemon
  rule turns it into a retirement, the actuator sends it (circuit breaker, observe mode, the
  decision log and the event log's fault record as for any drain). A decision that is not a
  retirement sends nothing: a panic alone never drains. A retirement the breaker withheld, or
  Slurm did not take, leaves the panic unrecorded, so that the next run decides it again.

Reads the state only when the kernel log holds a hardware panic: every other run pays nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuhc.text.limits import RELATIVE_LIMIT
from gpuhc.model.kernel import EventKind

if TYPE_CHECKING:
    from gpuhc.slurm.repair.lemon_memory import LemonCheck
    from gpuhc.slurm.repair.lemons import Fault

# The lemon modules are imported only once the log holds a hardware panic: every health check
# comes here, and a node that never panicked pays nothing for them.


@dataclass
class PanicLemon:
    """A retirement to decide: the reason a drain would carry and the lemon question it answers."""

    reason: str
    lemon: LemonCheck


def hardware_panics(snapshot, node: str, since: float) -> dict[float, tuple[Fault, str]]:
    """The kernel log's hardware-caused panics after ``since``, by their time: the fault and the line."""
    found = _panic_events(snapshot, since)
    if not found:
        return {}
    from gpuhc.catalog.evidence import by_id
    from gpuhc.slurm.repair.lemons import PANIC, Fault

    if not by_id(PANIC).lemon:
        return {}
    out: dict[float, tuple[Fault, str]] = {}
    for ev in found:
        out.setdefault(round(ev.time, 3), (Fault(ev.time, node, PANIC, (), True), ev.message))
    return out


def _panic_events(snapshot, since: float) -> list:
    """The log's panic events with a hardware cause and a wall-clock time after ``since``
    (seconds since boot say nothing of when)."""
    klog = getattr(snapshot, "kernel", None)
    return [ev for ev in (klog.events if klog is not None else ())
            if ev.kind is EventKind.HOST_KERNEL and ev.state == "panic" and ev.code and ev.time is not None
            and ev.time >= RELATIVE_LIMIT and ev.time > since]


def count_panics(flow, report) -> PanicLemon | None:
    """Record this run's unrecorded hardware panics (see the module doc); the retirement to
    decide when the newest makes the node a lemon, else None. Never raises: the lemon memory is
    bookkeeping, and the run's verdict stands whatever happens here."""
    try:
        return _count(flow, report)
    except Exception as e:  # gpuhc's own failure: said, nothing decided
        flow.log(f"lemon memory: hardware panic not counted ({type(e).__name__}: {e})", loud=True)
        return None


def _count(flow, report) -> PanicLemon | None:
    if not _panic_events(report.snapshot, 0.0):
        return None
    from gpuhc.slurm.repair.lemons import LemonSettings

    settings = LemonSettings.from_section(flow.slurm["lemon"])
    if not settings.enabled or getattr(flow.opts.sources, "test_scenario", None):
        return None
    now = flow.now()
    panics = hardware_panics(report.snapshot, flow.node, now - settings.window_s)
    if not panics:
        return None
    from gpuhc.slurm.policy.reason import format_reason
    from gpuhc.slurm.repair.lemon_memory import LemonCheck, merge
    from gpuhc.slurm.repair.lemons import PANIC, counted, judge

    newest, line = panics[max(panics)]
    check = LemonCheck(newest, settings, flow)
    known = {(f.node, round(f.time, 3)) for f in check.history}
    cleared = check.cleared_at
    new = [f for key, (f, _) in sorted(panics.items())
           if (f.node, key) not in known and (cleared is None or f.time > cleared)]
    if not new:
        return None
    observe = flow.slurm["mode"] == "observe"
    if observe and not any(r.evidence == PANIC for r in report.results):
        return None  # said once, on the run that reports the panic; nothing kept to say it again
    key = (newest.node, round(newest.time, 3))
    others = [f for f in merge(check.history, new) if (f.node, round(f.time, 3)) != key]
    lemon = newest in new and judge(newest, others, settings, cleared) is not None
    # A retirement keeps the panics once it is verified (LemonCheck.remember), or once the
    # decision sends nothing (the caller): one the breaker withheld, or Slurm refused, is
    # tried again at the next run, as a failing run's drain would be.
    check.add(new, keep=not observe and not lemon)
    mine = counted(newest, check.history, cleared)
    n = sum(1 for f in mine if f.node == flow.node and f.counts and f.time > newest.time - settings.window_s)
    head = "observe mode: would count" if observe else "counting" if lemon else "counted"
    flow.log(f"lemon memory: {head} {len(new)} hardware panic{'s' * (len(new) != 1)} of a previous boot as "
             f"{'faults' if len(new) > 1 else 'a fault'} of {flow.node} ({n} of {settings.faults} in "
             f"{settings.window_text}): {line[:160]}", loud=True)
    if not lemon:
        return None
    check.present = None  # a panic names no GPU: no replaced GPU to leave out
    return PanicLemon(format_reason(f"{PANIC} node {line}"), check)
