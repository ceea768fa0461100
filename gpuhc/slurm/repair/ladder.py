"""The remediation ladder: what to try next on a node gpuhc drained. Pure: no I/O, no clock.

A finding's catalog action (:class:`gpuhc.model.result.Action`) names the steps a site lets gpuhc try
by itself (``slurm.remediation.actions``), mildest first:

1. **reset**: reset the failing GPUs, then retest at once; resume only on a pass. At most
   ``reset_attempts`` per episode, and only while Slurm shows no job on the node and NVML no
   process on its GPUs (a reset kills whatever runs there). A process on a node where Slurm
   shows no job is no job's (a stray): the health check goes to the reboot rung rather than
   wait for it forever (gpuhc/slurm/repair/remediate.py, docs/campaign.md).
2. **reboot**: ``scontrol reboot ASAP``; the boot-time ``gpuhc quarantine retest`` decides. A
   reboot and its retest are one quarantine cycle (the retest tags ``[qN]`` when it fails).
3. **retire** after ``slurm.quarantine.max_cycles`` cycles.

Where the state lives, and why: the step in progress is a tag in the reason (``[reset 1/2]``,
``[reboot]``, next to ``[qN]``), so that ``gpuhc drain-report`` shows it from any host and it
survives a reboot and a slurmctld restart; the reset count and each step's deadline are in the
node's state file (``state_dir`` survives reboots), because only the node itself acts on them.

Rules an admin relies on:

- Only a node drained by gpuhc is touched: a reason someone else set (an admin's note, Slurm's
  own) ends the ladder, whatever gpuhc remembers. So does a node back in service, or retired.
- Only a FAIL keeps a node climbing; a healthy node is the policy's to resume (hysteresis).
- Every step has a deadline: a reboot that has not happened, or whose boot-time retest has not
  answered, by ``reboot_timeout_s`` counts as a failed cycle, so the ladder always ends.
- A reset is counted before it is tried (gpuhc/slurm/repair/remediate.py writes the memory and the
  ``[reset n/N]`` tag ahead): a run killed in the middle of a reset still moves the ladder on.
- The reset count belongs to one episode (a hold): a node back in service forgets it.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpuhc.model.result import Action
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.drain import Verdict, out_of_service, reboot_pending
from gpuhc.slurm.policy.reason import format_reason, parse_reason, retired_from

RESET, REBOOT = "reset", "reboot"
# Memory's step after ``scontrol reboot`` was refused (no RebootProgram, a controller error): the
# ladder waits ``reboot_timeout_s`` before asking again, rather than asking every interval.
REBOOT_REFUSED = "reboot-refused"
# The ladders a config may give an action (slurm.remediation.actions): the schema offers
# exactly these (gpuhc/slurm/settings.py repeats them as lists, which tests/slurm/repair/test_ladder.py keeps
# equal), so a typo or a reboot before a reset is refused with file and line.
LADDERS = ((RESET, REBOOT), (RESET,), (REBOOT,), ())
# slurm.remediation.actions keys, one per catalog action that drains.
ACTION_KEYS = {"reset_gpu": Action.RESET_GPU, "drain_reboot": Action.DRAIN_REBOOT,
               "drain_ticket": Action.DRAIN_TICKET}


class Do(str, enum.Enum):
    NONE = "none"  # not the ladder's node, or nothing left to try
    WAIT = "wait"  # a step is pending (reboot), or the node is busy
    RESET = "reset"
    REBOOT = "reboot"
    FAIL_CYCLE = "fail-cycle"  # a reboot overran its deadline: count the cycle as failed
    RETIRE = "retire"


@dataclass(frozen=True)
class LadderSettings:
    enabled: bool = False
    ladders: dict[Action, tuple[str, ...]] = field(default_factory=dict)
    reset_attempts: int = 2
    reset_timeout_s: float = 30.0
    reboot_timeout_s: float = 1800.0
    max_cycles: int = 3

    @classmethod
    def from_section(cls, slurm: dict[str, Any]) -> "LadderSettings":
        r = slurm["remediation"]
        return cls(bool(r["enabled"]), {a: tuple(r["actions"][k]) for k, a in ACTION_KEYS.items()},
                   int(r["reset_attempts"]), float(r["reset_timeout_s"]), float(r["reboot_timeout_s"]),
                   int(slurm["quarantine"]["max_cycles"]))


@dataclass(frozen=True)
class LadderMemory:
    """What the node remembers of the episode (its state file): resets tried, the step in
    progress and when it runs out; for a reboot, the reason it held the node with, because
    26.05 with ReturnToService=2 returns the rebooted node with no reason at all and the
    boot-time retest must still know the cycle (gpuhc/slurm/repair/retest.py, ``asked_reboot``)."""

    resets: int = 0
    step: str | None = None
    since: float | None = None
    deadline: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> "LadderMemory":
        if not isinstance(d, dict):
            return cls()
        try:
            reason = d.get("reason") if isinstance(d.get("reason"), str) else None
            return cls(int(d.get("resets") or 0), d.get("step"), _num(d.get("since")), _num(d.get("deadline")), reason)
        except (TypeError, ValueError):
            return cls()


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Finding:
    """The finding that drives the ladder: the worst failing result's action, and the GPUs
    whose results carry that action (the ones a reset would touch)."""

    action: Action
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class Step:
    do: Do
    why: str
    memory: LadderMemory = LadderMemory()
    reason: str | None = None  # the reason to set (reset tag, reboot tag, new cycle, RETIRED)
    attempt: int = 0
    of: int = 0

    @property
    def label(self) -> str:
        """What drain-report and the event log call it: ``reset 1/2``, ``reboot``, ..."""
        return f"{self.do.value} {self.attempt}/{self.of}" if self.do is Do.RESET else self.do.value


def next_step(node: Node, verdict: Verdict, finding: Finding | None, busy: str | None,
              memory: LadderMemory, now: float, s: LadderSettings, *, resets_closed: str | None = None) -> Step:
    """The ladder's next move for this node, from this run's verdict and finding, what Slurm
    shows and what the node remembers. ``busy`` says what runs on the node (a job, a GPU
    process), or None when nothing does.

    ``resets_closed`` says why the reset rung is closed for the rest of the episode, or None:
    a stray process holds a GPU (a reset cannot end it, a reboot can), NVML already hung in
    this run, or the reset procedure itself failed (a reset needs a driver that answers). The
    episode's resets then count as spent, in the memory the step carries too, so that the next
    run does not try the rung again: the ladder moves on to the reboot rung where it has one."""
    if resets_closed is not None:
        memory = replace(memory, resets=max(memory.resets, s.reset_attempts))
    mine = parse_reason(node.reason)
    if not s.enabled:
        return Step(Do.NONE, "remediation off", memory)
    if mine is None:
        return Step(Do.NONE, "not drained by gpuhc: never touched" if node.reason else "no gpuhc reason")
    if not out_of_service(node) and not reboot_pending(node):
        return Step(Do.NONE, "in service")
    if mine.retired:
        return Step(Do.NONE, "retired: `gpuhc quarantine release` only")
    if mine.step == REBOOT:
        return _after_reboot(node, mine, memory, now, s)
    if memory.step == REBOOT:  # the boot-time retest answered (a new [qN]): that cycle is over
        memory = LadderMemory(resets=memory.resets)
    if memory.step == REBOOT_REFUSED and memory.deadline is not None and now < memory.deadline:
        return Step(Do.WAIT, "scontrol reboot was refused: an admin must reboot the node (asked again "
                             f"after {s.reboot_timeout_s:.0f}s)", memory)
    if verdict is not Verdict.FAIL:
        return Step(Do.NONE, "not failing: the policy decides", memory)
    steps = s.ladders.get(finding.action, ()) if finding else ()
    if not steps:
        what = finding.action.value if finding else "no finding"
        return Step(Do.NONE, f"no remediation for {what!r}", memory)
    if mine.cycle >= s.max_cycles:
        return Step(Do.RETIRE, f"{mine.cycle} quarantine cycles: retiring", LadderMemory(),
                    retired_from(mine))
    if busy:
        return Step(Do.WAIT, f"busy ({busy}): no remediation while anything runs", memory)
    if RESET in steps and finding.gpus and memory.resets < s.reset_attempts:
        n = memory.resets + 1
        mem = LadderMemory(resets=n, step=RESET, since=now, deadline=now + s.reset_timeout_s)
        return Step(Do.RESET, f"GPU reset {n} of {s.reset_attempts} (gpu{','.join(map(str, finding.gpus))})",
                    mem, format_reason(mine.body, mine.cycle, step=f"reset {n}/{s.reset_attempts}"), n,
                    s.reset_attempts)
    if REBOOT in steps:
        reason = format_reason(mine.body, mine.cycle, step=REBOOT)
        mem = LadderMemory(resets=memory.resets, step=REBOOT, since=now, deadline=now + s.reboot_timeout_s,
                           reason=reason)
        return Step(Do.REBOOT, f"reboot for retest (cycle {mine.cycle + 1} of {s.max_cycles})", mem, reason)
    return Step(Do.NONE, f"ladder for {finding.action.value!r} exhausted: waits for an admin", memory)


def _after_reboot(node: Node, mine, memory: LadderMemory, now: float, s: LadderSettings) -> Step:
    """A reboot was asked: wait for it and its boot-time retest, up to the deadline."""
    if memory.step != REBOOT:  # the tag without our memory (state lost): start the clock now
        memory = LadderMemory(resets=memory.resets, step=REBOOT, since=now, deadline=now + s.reboot_timeout_s,
                              reason=node.reason)
    if memory.deadline is not None and now < memory.deadline:
        what = "reboot pending" if reboot_pending(node) else "rebooted: waiting for the boot-time retest"
        return Step(Do.WAIT, what, memory)
    cycle = mine.cycle + 1
    cleared = LadderMemory(resets=memory.resets)
    if cycle >= s.max_cycles:
        return Step(Do.RETIRE, f"reboot or its retest overran {s.reboot_timeout_s:.0f}s; "
                               f"cycle {cycle} of {s.max_cycles}: retiring", cleared, retired_from(mine))
    return Step(Do.FAIL_CYCLE, f"reboot or its retest overran {s.reboot_timeout_s:.0f}s: failed cycle {cycle}",
                cleared, format_reason(mine.body, cycle))
