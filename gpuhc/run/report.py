"""What a run is asked to do (RunOptions) and what it found (RunReport).

Kept apart from the runner so that the Slurm flows, the CLI and the exporters can name these
types without the machinery that produces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuhc.config.load import Config
from gpuhc.errors import EXIT_INTERNAL, EXIT_OK, EXIT_UNHEALTHY
from gpuhc.model.record import Record
from gpuhc.model.result import Result, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources import SourceSpec


@dataclass(eq=False, repr=False)
class RunOptions(Record):
    """What one run of a stage is asked to do."""

    stage: str
    config: Config
    sources: SourceSpec
    state_dir: str
    gpus: list[int] | None = None  # prolog: the job's GPUs (NVML indices of the physical GPUs)
    job: Any = None  # gpuhc.node.gpumap.JobScope: what Slurm gave the job, MIG slices and shared GPUs included
    now: float | None = None  # judge as if it were this time (replay)
    budget_s: float | None = None  # default: config budget_s.<stage>
    hostname: str | None = None
    only: tuple[str, ...] = ()  # run just these check ids
    # Run these passive checks too, though the stage does not: the health check re-judges the
    # check that drained a node it holds (docs/slurm.md "Drain and resume policy").
    also: tuple[str, ...] = ()
    progress: bool = False  # active checks may show a progress bar
    timings: bool = False  # put each source's and each check's wall time in the report (gpuhc/run/timings.py)
    # Judge who holds the GPUs (the occupancy check, and a busy GPU in the active checks).
    # False in a Slurm prolog/epilog that cannot tell the job's GPUs: other jobs may hold them.
    occupancy: bool = True
    # A hook whose config did not load runs on the last good copy or the defaults
    # (gpuhc.state.config_guard.ConfigProblem): the report, the event log and the metrics say so.
    config_problem: Any = None


@dataclass(eq=False, repr=False)
class RunReport(Record):
    """What one run found: the results, and what it could not judge."""

    node: str
    stage: str
    started: float
    duration_s: float = 0.0
    results: list[Result] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    profile: str | None = None
    notes: list[str] = field(default_factory=list)  # e.g. a rebuilt state file
    snapshot: Snapshot | None = None
    replay: str | None = None  # what was replayed ("a.yaml, kernel log k.log"); None: this node, live
    config_error: dict[str, Any] | None = None  # the config in place did not load (gpuhc.state.config_guard)
    timings: dict[str, Any] | None = None  # asked for (RunOptions.timings): what each source and check cost

    @property
    def status(self) -> Status:
        worst = Status.PASS
        for r in self.results:
            if r.status.rank > worst.rank:
                worst = r.status
        return worst

    @property
    def exit_code(self) -> int:
        if self.failing():
            return EXIT_UNHEALTHY
        if any(r.status is Status.ERROR for r in self.results):
            return EXIT_INTERNAL
        return EXIT_OK

    def failing(self) -> list[Result]:
        return [r for r in self.results if r.status is Status.FAIL]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "node": self.node,
            "stage": self.stage,
            "replay": self.replay,
            "started": round(self.started, 3),
            "duration_s": round(self.duration_s, 4),
            "status": self.status.value,
            "exit_code": self.exit_code,
            "profile": self.profile,
            "timed_out": list(self.timed_out),
            "notes": list(self.notes),
            "results": [r.to_dict() for r in self.results],
            **({"config_error": self.config_error} if self.config_error else {}),
            **({"timings": self.timings} if self.timings is not None else {}),
        }


def one_line(e: BaseException) -> str:
    """An exception as a report says it: one line, at most 200 characters, its type when it has no words."""
    text = f"{type(e).__name__}: {e}" if not str(e) else str(e)
    return " ".join(text.split())[:200]
