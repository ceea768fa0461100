"""Numbers of a collective sweep: size ladders, percentiles, and nccl-tests' bandwidth formulas.

Kept free of numpy so the analyze side (an admin host) and the simulator need nothing beyond
the standard library. The formulas follow NVIDIA nccl-tests (docs/facts.md, "NCCL and the sweep"):

- algbw = bytes / seconds, in decimal GB/s (1e9), the rate one rank sees its buffer reduced at;
- busbw = algbw * 2 (n - 1) / n for all-reduce: the rate at which the busiest link carries data
  in a ring all-reduce, so that it can be compared with the hardware's link speed whatever n is.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

ELEMENT_BYTES = 4  # float32: small integers sum exactly, see backends.pattern


def size_ladder(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """``min, min*f, min*f^2 ...`` up to and including ``max``; every size a multiple of 4 bytes."""
    if min_bytes < ELEMENT_BYTES or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"bad size range {min_bytes}..{max_bytes} x{factor}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size - size % ELEMENT_BYTES)
        size *= factor
    return sorted(set(sizes))


def algbw_gbs(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in decimal GB/s."""
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_factor(nranks: int) -> float:
    """All-reduce bus-bandwidth factor 2(n-1)/n; 1.0 for two ranks, approaching 2 for many."""
    return 2.0 * (nranks - 1) / nranks if nranks > 0 else 0.0


def busbw_gbs(nbytes: int, seconds: float, nranks: int) -> float:
    return algbw_gbs(nbytes, seconds) * busbw_factor(nranks)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    return _percentile_sorted(sorted(values), q)


def _percentile_sorted(ordered: Sequence[float], q: float) -> float:
    if not ordered:
        return math.nan
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def median(values: Iterable[float]) -> float:
    return percentile(list(values), 50.0)


def slowest_per_iteration(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """A collective ends for the group when its slowest rank ends: per iteration, the max over
    ranks. Ranks with fewer samples (a partial run) bound the length."""
    if not per_rank:
        return []
    if len(per_rank) == 1:
        return list(per_rank[0])
    return list(map(max, zip(*per_rank)))  # zip stops at the shortest rank


def summarize_size(
    nbytes: int,
    nranks: int,
    mean_s_per_rank: Sequence[float],
    iter_s_per_rank: Sequence[Sequence[float]] | None = None,
) -> dict:
    """One row of a results file from the ranks' timings of one size.

    The group's time is the slowest rank's: every rank leaves an all-reduce only once all
    have contributed, so the slowest rank's clock is the one a training job would feel.
    """
    mean_s = max(mean_s_per_rank) if mean_s_per_rank else math.nan
    row = {
        "bytes": nbytes,
        "time_us": round(mean_s * 1e6, 3),
        "algbw_gbs": round(algbw_gbs(nbytes, mean_s), 4),
        "busbw_gbs": round(busbw_gbs(nbytes, mean_s, nranks), 4),
        "rank_time_us": [round(t * 1e6, 3) for t in mean_s_per_rank],
    }
    if iter_s_per_rank:
        group = sorted(slowest_per_iteration(iter_s_per_rank))
        for q in (50, 95, 99):
            row[f"p{q}_us"] = round(_percentile_sorted(group, q) * 1e6, 3)
        row["iters"] = len(group)
    return row
