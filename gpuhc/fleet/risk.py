"""The failure math of a large job: how likely it is to be interrupted, and what that costs. Pure.

Model (docs/repair.md, "The failure math"): every GPU fails independently with probability
``p`` in any one hour. A job on N GPUs for H hours is interrupted unless all N·H GPU-hours pass
without a failure::

    P(interrupted) = 1 - (1 - p)^(N·H)

so the risk compounds with the job's size: at the per-GPU rate that gives 19 % for 256 GPUs over
30 days, 1,024 GPUs face 1 - 0.81^4 = 57 %. Computed as ``-expm1(N·H·log1p(-p))`` so that rates
of 1e-7 do not vanish in rounding.

Cost: the job fails about N·H·p times (it is restarted and goes on); each failure throws away the
work since the last checkpoint, on average half the interval C, plus the restart, on all N GPUs::

    lost GPU-hours ≈ N·H·p · N · (C/2 + restart)

With the cost of writing one checkpoint known, Young's rule gives the interval that minimises
checkpoint cost plus lost work: ``sqrt(2 · cost · MTBF_job)`` with ``MTBF_job = 1 / (N·p)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def interruption_probability(p: float, gpus: int, hours: float) -> float:
    """P(at least one failure) for ``gpus`` GPUs over ``hours`` at ``p`` per GPU-hour."""
    _check(p, gpus, hours)
    if p == 1.0:
        return 1.0 if gpus * hours > 0 else 0.0
    return -math.expm1(gpus * hours * math.log1p(-p))


def rate_for(probability: float, gpus: int, hours: float) -> float:
    """The per-GPU-hour rate at which ``gpus`` GPUs over ``hours`` fail with ``probability``."""
    if not 0.0 <= probability < 1.0:
        raise ValueError(f"probability must be in [0, 1), got {probability}")
    _check(0.0, gpus, hours)
    return -math.expm1(math.log1p(-probability) / (gpus * hours))


def _check(p: float, gpus: int, hours: float) -> None:
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"rate must be a probability per GPU-hour in [0, 1], got {p}")
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    if not hours > 0 or math.isinf(hours):
        raise ValueError(f"hours must be a positive number, got {hours}")


@dataclass(frozen=True)
class Risk:
    gpus: int
    hours: float
    rate: float  # per GPU-hour
    source: str  # "given" or where the history came from
    checkpoint_min: float | None
    restart_min: float
    checkpoint_cost_min: float | None

    @property
    def probability(self) -> float:
        return interruption_probability(self.rate, self.gpus, self.hours)

    @property
    def expected_failures(self) -> float:
        return self.gpus * self.hours * self.rate

    @property
    def job_mtbf_h(self) -> float | None:
        return 1.0 / (self.gpus * self.rate) if self.rate > 0 else None

    @property
    def lost_gpu_hours(self) -> float | None:
        if self.checkpoint_min is None:
            return None
        per_failure_h = self.checkpoint_min / 2.0 / 60.0 + self.restart_min / 60.0
        return self.expected_failures * self.gpus * per_failure_h

    @property
    def young_interval_min(self) -> float | None:
        mtbf = self.job_mtbf_h
        if self.checkpoint_cost_min is None or mtbf is None:
            return None
        return math.sqrt(2.0 * self.checkpoint_cost_min * mtbf * 60.0)

    def to_dict(self) -> dict:
        lost = self.lost_gpu_hours
        return {
            "gpus": self.gpus, "hours": self.hours, "rate_per_gpu_hour": self.rate, "rate_source": self.source,
            "interruption_probability": self.probability, "expected_failures": self.expected_failures,
            "job_mtbf_hours": self.job_mtbf_h, "checkpoint_min": self.checkpoint_min,
            "restart_min": self.restart_min, "expected_lost_gpu_hours": lost,
            "expected_lost_fraction": None if lost is None else lost / (self.gpus * self.hours),
            "checkpoint_cost_min": self.checkpoint_cost_min, "young_interval_min": self.young_interval_min,
        }


def scaling_table(rate: float, gpus: int, hours: float) -> list[tuple[int, float]]:
    """P(interrupted) for the job at a quarter, half, 1x, 2x and 4x its GPU count: what scaling
    the job up or down does to its odds."""
    sizes = sorted({max(1, gpus // 4), max(1, gpus // 2), gpus, gpus * 2, gpus * 4})
    return [(n, interruption_probability(rate, n, hours)) for n in sizes]
