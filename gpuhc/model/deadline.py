"""One run's hard end, as one object handed down to everything the run does.

Slurm kills a hook at its timeout (HealthCheckProgram at 60 s, or HealthCheckTimeout on
26.05; Prolog and Epilog at PrologEpilogTimeout, or their own PrologTimeout/EpilogTimeout):
whatever gpuhc has not finished by then is lost, a drain half-verified or a reset half-undone
(docs/slurm.md, "Deadlines"). The flow makes one :class:`Deadline` at its entry
(``gpuhc.slurm.flows.frame.Flow.deadline``) and every act and probe asks it what is left, so a
slow step leaves the steps after it only what remains instead of each one counting its own
budget from its own start.

A point on the monotonic clock, not the wall clock: an NTP step during a run must neither
stretch nor cut it.
"""

import time
from typing import Callable


class Deadline:
    """A point on ``clock`` (``time.monotonic`` unless a test gives its own) past which nothing
    of the run may go. ``left()`` is what remains (negative once passed); ``cap(seconds)`` is a
    step's own timeout cut to what remains; ``less(seconds)`` is an earlier deadline for a step
    that must leave time after it (the scontrol calls after the checks, the log line after a
    command). Immutable: a step that needs an earlier end makes its own with ``less``."""

    __slots__ = ("at", "clock")

    def __init__(self, at: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.at = float(at)
        self.clock = clock

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> "Deadline":
        """``seconds`` from now."""
        return cls(clock() + float(seconds), clock)

    def left(self, keep: float = 0.0) -> float:
        """Seconds until the deadline, less ``keep`` (kept back for what must follow); negative
        once it has passed."""
        return self.at - keep - self.clock()

    def cap(self, seconds: float, keep: float = 0.0) -> float:
        """``seconds``, cut to what is left after ``keep``; never below 0."""
        return max(0.0, min(float(seconds), self.left(keep)))

    def less(self, seconds: float) -> "Deadline":
        """A deadline ``seconds`` earlier on the same clock."""
        return Deadline(self.at - float(seconds), self.clock)

    def passed(self) -> bool:
        return self.left() <= 0.0

    def __repr__(self) -> str:
        return f"Deadline({self.left():.1f}s left)"
