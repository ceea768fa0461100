"""Is a group's sweep healthy? Per payload class, against fixed numbers and against the fleet.

Three payload classes, because they exercise different machinery (docs/facts.md, "NCCL and the sweep"):

- small (KB): the LL/LL128 protocols, latency-bound: judged by p95 latency at ``small_bytes``;
- medium (MB): algorithm and protocol switch-overs: judged by busbw at ``medium_bytes``;
- large (GB): pipelining over every link: judged by busbw at the largest size the sweep reached.

Each class has an optional absolute bound (from the shape's thresholds) and a bound relative to
the fleet's own history for the same backend, shape, span and largest size: a group far below
its peers fails even when every absolute number is met, which is how a fleet of slower parts
(or the mpi backend on CPUs, which has no absolute numbers at all) still finds its odd one out.
The fleet median leaves the judged group itself out.

A wrong sum, or a collective that hung, fails outright. No results at all is ERROR: the job may
never have started (pending, cancelled, a launcher problem), which says nothing about the nodes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Iterable


PASS, FAIL, ERROR = "pass", "fail", "error"
METRICS = ("small_p95_us", "medium_busbw_gbs", "large_busbw_gbs")


@dataclass
class Verdict:
    status: str  # pass / fail / error
    reasons: list[str] = field(default_factory=list)  # why it failed (or could not be judged)
    metrics: dict[str, Any] = field(default_factory=dict)
    silent_nodes: list[str] = field(default_factory=list)  # nodes whose ranks hung

    @property
    def evidence(self) -> str:
        return "; ".join(self.reasons) if self.reasons else "ok"

    def to_dict(self) -> dict:
        return {"status": self.status, "reasons": self.reasons, "metrics": self.metrics, "silent_nodes": self.silent_nodes}


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _row(result: dict, nbytes: int) -> dict | None:
    for row in result.get("sizes", []):
        if row.get("bytes") == nbytes:
            return row
    return None


def nearest_size(ladder: list[int], want: int) -> int:
    """The ladder size closest to ``want`` on a log scale (the smaller one on a tie): where a
    threshold's size is not on the sweep's ladder (``sizes.factor`` 4 skips 1 KiB), its class
    is judged at the nearest size that was measured rather than not at all."""
    import math

    return min(ladder, key=lambda b: (abs(math.log(b / want)), b)) if ladder and want > 0 else want


def on_ladder(th: dict[str, Any], ladder: list[int]) -> dict[str, Any]:
    """``th`` with ``small_bytes``/``medium_bytes`` moved to the nearest size of ``ladder``;
    the configured size is kept as ``<name>_requested`` when it moved. The medium class never
    moves onto the largest size, which the large class judges already."""
    out = dict(th)
    if not ladder:
        return out
    for name, sizes in (("small_bytes", ladder), ("medium_bytes", ladder[:-1] or ladder)):
        want = int(th[name])
        got = nearest_size(sizes, want)
        if got != want:
            out[name], out[f"{name}_requested"] = got, want
    return out


def size_notes(metrics: Iterable[dict[str, Any]]) -> list[str]:
    """One line per class judged away from its configured size (see :func:`on_ladder`)."""
    moved = {}
    for m in metrics:
        for cls in ("small", "medium"):
            want = m.get(f"{cls}_bytes_requested")
            if want is not None and m.get(f"{cls}_bytes") is not None:
                moved[(cls, want)] = m[f"{cls}_bytes"]
    return [f"{cls} class judged at {human_bytes(got)}, the nearest measured size: {cls}_bytes {human_bytes(want)} "
            "is not on the size ladder" for (cls, want), got in sorted(moved.items())]


def metrics_of(result: dict, th: dict) -> dict[str, Any]:
    """The numbers the judge looks at, pulled out of one results file, and the sizes they were
    read at (``small_bytes``, ``medium_bytes``, ``large_bytes``)."""
    rows = [r for r in result.get("sizes", []) if isinstance(r, dict) and isinstance(r.get("bytes"), int)]
    out: dict[str, Any] = {"large_bytes": None, "large_busbw_gbs": None, "small_p95_us": None, "medium_busbw_gbs": None,
                           "small_bytes": int(th["small_bytes"]), "medium_bytes": int(th["medium_bytes"])}
    for name in ("small_bytes_requested", "medium_bytes_requested"):
        if name in th:
            out[name] = th[name]
    if rows:
        largest = max(rows, key=lambda r: r["bytes"])
        out["large_bytes"] = largest["bytes"]
        out["large_busbw_gbs"] = largest.get("busbw_gbs")
    small = _row(result, int(th["small_bytes"]))
    if small is not None:
        out["small_p95_us"] = small.get("p95_us", small.get("time_us"))
    medium = _row(result, int(th["medium_bytes"]))
    if medium is not None and medium["bytes"] != out["large_bytes"]:
        out["medium_busbw_gbs"] = medium.get("busbw_gbs")
    return out


class Fleet:
    """Past and present values of each metric for one fleet key, for leave-one-out medians."""

    def __init__(self, entries: Iterable[dict[str, Any]] = ()):
        self.values: dict[str, list[float]] = {m: [] for m in METRICS}
        for e in entries:
            self.add(e)

    def add(self, metrics: dict[str, Any]) -> None:
        for m in METRICS:
            v = metrics.get(m)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                bisect.insort(self.values[m], float(v))

    def reference(self, metric: str, own: Any = None) -> tuple[float | None, int]:
        """(median of the fleet without one copy of ``own``, how many values that used)."""
        vals = self.values[metric]
        skip = None  # index of the one copy of ``own`` left out
        if own is not None and isinstance(own, (int, float)):
            i = bisect.bisect_left(vals, float(own))
            if i < len(vals) and vals[i] == float(own):
                skip = i
        n = len(vals) - (skip is not None)
        if n <= 0:
            return None, 0
        # The median of the sorted list with one element left out, by index: no copy.
        def at(k: int) -> float:
            return vals[k + 1] if skip is not None and k >= skip else vals[k]

        mid = (n - 1) / 2.0
        lo = int(mid)
        value = at(lo) if lo == mid else at(lo) + (at(lo + 1) - at(lo)) * (mid - lo)
        return value, n


def judge_group(result: dict | None, th: dict[str, Any], fleet: Fleet | None = None, own_in_fleet: bool = False,
                metrics: dict[str, Any] | None = None) -> Verdict:
    """One group's verdict. ``own_in_fleet``: the fleet already holds this group's own metrics
    (the current round is part of the fleet), so leave one copy out. ``metrics``: this result's
    :func:`metrics_of`, when the caller has them already."""
    if result is None:
        return Verdict(ERROR, ["no results: the job did not run or died before writing any"])
    silent = sorted({n for t in result.get("timeouts", []) for n in t.get("silent_nodes", [])})
    m = metrics if metrics is not None else metrics_of(result, th)
    reasons: list[str] = []
    for row in result.get("sizes", []):
        if row.get("correct") is False:
            reasons.append(f"wrong sum at {human_bytes(row['bytes'])}")
            break
    for t in result.get("timeouts", []):
        where = "start-up/gather" if not t.get("bytes") else human_bytes(t["bytes"])
        who = f" (silent: {', '.join(t['silent_nodes'])})" if t.get("silent_nodes") else ""
        reasons.append(f"hung at {where}{who}")
        break
    if not result.get("sizes") and not reasons:
        return Verdict(ERROR, ["results hold no measurements: " + "; ".join(result.get("errors", []) or ["unknown error"])],
                       m, silent)
    reasons += _absolute(m, th)
    if fleet is not None:
        reasons += _relative(m, th, fleet, own_in_fleet)
    return Verdict(FAIL if reasons else PASS, reasons, m, silent)


def _absolute(m: dict, th: dict) -> list[str]:
    out = []
    p95, limit = m["small_p95_us"], th.get("small_p95_us")
    if p95 is not None and limit is not None and p95 > limit:
        out.append(f"p95 {p95:.1f} us > {limit:g} at {human_bytes(int(th['small_bytes']))}")
    bw, floor = m["medium_busbw_gbs"], th.get("medium_busbw_gbs")
    if bw is not None and floor is not None and bw < floor:
        out.append(f"busbw {bw:.1f} GB/s < {floor:g} at {human_bytes(int(th['medium_bytes']))}")
    bw, floor = m["large_busbw_gbs"], th.get("large_busbw_gbs")
    if bw is not None and floor is not None and (m["large_bytes"] or 0) >= th.get("large_min_bytes", 0):
        if bw < floor:
            out.append(f"busbw {bw:.1f} GB/s < {floor:g} at {human_bytes(m['large_bytes'])}")
    return out


def _relative(m: dict, th: dict, fleet: Fleet, own_in_fleet: bool) -> list[str]:
    out = []
    need = int(th.get("fleet_min_groups", 3))
    frac, factor = th.get("fleet_busbw_fraction"), th.get("fleet_latency_factor")
    p95 = m["small_p95_us"]
    if p95 is not None and factor:
        ref, n = fleet.reference("small_p95_us", p95 if own_in_fleet else None)
        if ref is not None and n >= need and p95 > factor * ref:
            out.append(f"p95 {p95:.1f} us > {factor:g}x fleet {ref:.1f} at {human_bytes(int(th['small_bytes']))}")
    for metric, size in (("medium_busbw_gbs", th["medium_bytes"]), ("large_busbw_gbs", m["large_bytes"])):
        bw = m[metric]
        if bw is None or not frac:
            continue
        ref, n = fleet.reference(metric, bw if own_in_fleet else None)
        if ref is not None and n >= need and bw < frac * ref:
            out.append(f"busbw {bw:.2f} GB/s < {frac:g}x fleet {ref:.2f} at {human_bytes(int(size))}")
    return out


def fleet_key(backend: str, shape: str, span: str, large_bytes: int | None, small_bytes: int | None = None,
              medium_bytes: int | None = None, profile: str | None = None) -> str:
    """Groups are only compared with groups of the same kind and GPU model, measured at the same
    sizes."""
    key = f"{backend}/{shape}/{span or 'flat'}/{large_bytes or 0}"
    if small_bytes or medium_bytes:
        key += f"/s{small_bytes or 0}/m{medium_bytes or 0}"
    if profile:
        key += f"/{profile}"
    return key
