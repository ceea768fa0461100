"""The canary's cadence and verdict rules as plain functions of time, declared once: the fleet
state (:mod:`gpuhc.canary.fleet`) follows them on real clocks, and a model of the fleet (the
campaign) calls the same ones on simulated hours.

A GPU's standing moves only here: ``ok`` -> ``suspect`` on one mismatch the immediate retest did
not reproduce (short cadence for ``suspect_days``) -> ``ok`` again once that window passes clean;
any standing -> ``failed`` on a mismatch the retest reproduced (drained RETIRED; it never comes
back by itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, SUSPECT, FAILED = "ok", "suspect", "failed"


@dataclass(frozen=True)
class Cadence:
    period_h: float = 24.0  # every GPU at least this often
    suspect_period_h: float = 2.0  # after an unconfirmed mismatch
    suspect_days: float = 7.0
    epilog_slice: bool = True  # a node that never idles runs a short canary at a job's end once due

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> "Cadence":
        return cls(float(section["period_h"]), float(section["suspect_period_h"]), float(section["suspect_days"]),
                   bool((section.get("epilog") or {}).get("enabled", True)))


def period_h(status: str, suspect_until_h: float | None, now_h: float, c: Cadence) -> float:
    if status == SUSPECT and suspect_until_h is not None and now_h < suspect_until_h:
        return c.suspect_period_h
    return c.period_h


def next_due_h(last_run_h: float | None, status: str, suspect_until_h: float | None, now_h: float, c: Cadence) -> float:
    """When the GPU's next canary is due (hours, same clock as ``now_h``); a GPU that never ran is
    due at once, a failed one never (it is out of service)."""
    if status == FAILED:
        return float("inf")
    if last_run_h is None:
        return 0.0
    return last_run_h + period_h(status, suspect_until_h, now_h, c)


def outcome(first_run_off: bool, retest_off: bool) -> str:
    """A run's verdict on one GPU: ``fail`` (confirmed), ``warn`` (once), ``pass``. The retest runs
    only when the first run was off."""
    if not first_run_off:
        return "pass"
    return "fail" if retest_off else "warn"


def step(status: str, suspect_until_h: float | None, verdict: str, now_h: float,
         c: Cadence) -> tuple[str, float | None]:
    """The standing after a run with ``verdict`` at ``now_h``: (status, suspect_until_h)."""
    if status == FAILED or verdict == "fail":
        return FAILED, suspect_until_h
    if verdict == "warn":
        return SUSPECT, now_h + c.suspect_days * 24.0
    if status == SUSPECT and (suspect_until_h is None or now_h >= suspect_until_h):
        return OK, None
    return status, suspect_until_h
