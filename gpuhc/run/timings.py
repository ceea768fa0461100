"""What one run cost, per source and per check (``gpuhc check --timings``, the JSON's ``timings``).

The health check runs on every node every few minutes and before every job: an admin who sees
a slow run must be able to tell which check or which source made it slow, and turn that check
off (``checks.<id>.enabled: false``) knowing what it saves. docs/checks.md lists the typical
costs.

Each source is read in its own thread (gpuhc/run/read.py); its wall time is the read's own, from
its start to its answer. A check's cost is split in two: the time it waited for sources that
had not answered yet (shared: the first check to need a slow source waits for everyone), and
its own judging. The run's phases come beside them: the time before the runner started (the
command's imports, the config, the options), the checks, the state, and the whole run.
Wall-clock, from ``time.perf_counter``; stdlib only.
"""

from __future__ import annotations

import time
from typing import Any


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class Timings:
    """Collected by the runner as it goes; cheap enough to collect on every run."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.checks: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, dict[str, Any]] = {}
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        """The end of a phase of the run: ``select`` (the checks chosen, their modules imported),
        ``start_sources`` (the state read, the sources planned and their threads started),
        ``checks`` (every check judged), ``state`` (the state written)."""
        self.marks[name] = time.perf_counter()

    def check(self, check_id: str, waited_s: float, judged_s: float | None, needs: tuple[str, ...]) -> None:
        """``judged_s`` None: the check never judged (a source timed out or failed)."""
        self.checks[check_id] = {"wait_ms": _ms(waited_s), "judge_ms": _ms(judged_s), "sources": list(needs)}

    def read_sources(self, readers: dict) -> None:
        """Each reader's wall time (None: still running, it never answered)."""
        for name, reader in readers.items():
            self.sources[name] = {"wall_ms": _ms(reader.wall_s), "error": reader.error is not None}

    def to_dict(self) -> dict[str, Any]:
        from gpuhc.run.phases import STARTED

        t0 = self.started
        phases = {"before_run_ms": _ms(t0 - STARTED)}
        last = t0
        for name, at in self.marks.items():
            phases[f"{name}_ms"] = _ms(at - last)
            last = at
        phases["run_ms"] = _ms(last - t0)
        return {"unit": "ms", "phases": phases, "sources": self.sources, "checks": self.checks}


def timing_lines(timings: dict[str, Any]) -> list[str]:
    """The ``timings`` of a report as plain columns, dearest first (sinfo-like: a header line,
    then one row each), for a person at a terminal or a Slurm log."""

    def num(value: Any) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = ["PHASE            MS"]
    lines += [f"{name[:-3]:<14} {num(ms):>8}" for name, ms in timings["phases"].items()]
    lines.append("SOURCE           WALL_MS")
    by_cost = sorted(timings["sources"].items(), key=lambda kv: -(kv[1]["wall_ms"] or float("inf")))
    for name, s in by_cost:
        lines.append(f"{name:<14} {num(s['wall_ms']):>10}" + ("  (failed)" if s["error"] else ""))
    lines.append("CHECK               JUDGE_MS  WAIT_MS  SOURCES")
    by_cost = sorted(timings["checks"].items(), key=lambda kv: -(kv[1]["judge_ms"] or 0.0))
    for cid, c in by_cost:
        lines.append(f"{cid:<18} {num(c['judge_ms']):>10} {num(c['wait_ms']):>8}  {','.join(c['sources']) or '-'}")
    return lines
