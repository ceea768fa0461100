"""Fleet statistics from the out-of-service history: drains, MTBF, MTTR, retirements, trend. Pure.

Definitions (docs/repair.md, "Fleet statistics"), over a window [start, end):

- **drains**: outages that began inside the window;
- **MTBF**: the nodes' time *in service* inside the window divided by the drains, the maximum
  likelihood estimate of the mean time between failures when failures come at a steady rate
  (time spent drained is not time at risk, so it is left out);
- **MTTR**: mean drain-to-resume time of the outages that began in the window and ended;
  outages still open are counted apart (``open``), never as zero or as the window's end;
- **retired**: nodes whose outage in the window carries gpuhc's RETIRED reason;
- **trend**: drains in the window's first half against its second half. Under a steady rate each
  drain falls in either half with probability 1/2, so the split is binomial; the two-sided
  p-value says whether the change is more than chance.

A cause row measures against the whole fleet's time in service: "MTBF for Xid 79" is how
long the fleet runs, on average, between two drains for that cause.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable

from gpuhc.fleet.history import Outage

TREND_ALPHA = 0.05


@dataclass
class Row:
    kind: str  # fleet / partition / node / cause
    key: str
    nodes: int
    drains: int
    node_hours_up: float
    mttr_h: float | None
    median_ttr_h: float | None
    open: int
    retired: int
    first_half: int
    second_half: int
    trend_p: float

    @property
    def mtbf_h(self) -> float | None:
        return self.node_hours_up / self.drains if self.drains else None

    @property
    def trend(self) -> str:
        if self.trend_p >= TREND_ALPHA:
            return "steady"
        return "rising" if self.second_half > self.first_half else "falling"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "key": self.key, "nodes": self.nodes, "drains": self.drains,
                "mtbf_hours": self.mtbf_h, "mttr_hours": self.mttr_h, "median_ttr_hours": self.median_ttr_h,
                "open": self.open, "retired": self.retired, "node_hours_in_service": self.node_hours_up,
                "trend": self.trend, "drains_first_half": self.first_half, "drains_second_half": self.second_half,
                "trend_p": self.trend_p}


@dataclass
class FleetStats:
    start: float
    end: float
    rows: list[Row]
    daily: dict[str, list[int]]  # cause -> drains per day of the window
    notes: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Row]:
        return [r for r in self.rows if r.kind == kind]

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "rows": [r.to_dict() for r in self.rows],
                "daily_drains": self.daily, "notes": list(self.notes)}


def binomial_two_sided(k: int, n: int) -> float:
    """P-value of ``k`` of ``n`` in one half under p = 1/2 (twice the smaller tail, capped at 1)."""
    if n == 0:
        return 1.0
    lo = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(lo + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def downtime(outages: Iterable[Outage], start: float, end: float) -> float:
    """Seconds inside [start, end) covered by the outages (overlaps counted once)."""
    spans = sorted((max(start, o.start), min(end, o.end if o.end is not None else end)) for o in outages)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def compute(outages: Iterable[Outage], partitions: dict[str, tuple[str, ...]], start: float, end: float,
            per_node: bool = True) -> FleetStats:
    """Statistics for the fleet ``partitions`` describes ({node: its partitions}); nodes seen in
    the history but not in ``partitions`` are added under partition ``?``."""
    if not end > start:
        raise ValueError("the window must end after it starts")
    outages = [o for o in outages if o.start < end and (o.end is None or o.end > start)]
    nodes = dict(partitions)
    notes = []
    unknown = sorted({o.node for o in outages} - set(nodes))
    if unknown:
        notes.append(f"{len(unknown)} node(s) in the history are not in the node list (gone or renamed): "
                     "counted under partition ?")
        for n in unknown:
            nodes[n] = ("?",)
    by_node: dict[str, list[Outage]] = {n: [] for n in nodes}
    for o in outages:
        by_node[o.node].append(o)
    up_h = {n: ((end - start) - downtime(by_node[n], start, end)) / 3600.0 for n in nodes}
    began = [o for o in outages if start <= o.start < end]
    mid = start + (end - start) / 2.0

    def row(kind: str, key: str, members: Iterable[str], chosen: list[Outage]) -> Row:
        members = list(members)
        ttr = [(o.end - o.start) / 3600.0 for o in chosen if o.end is not None]
        first = sum(1 for o in chosen if o.start < mid)
        return Row(kind, key, len(members), len(chosen), sum(up_h[n] for n in members),
                   statistics.fmean(ttr) if ttr else None, statistics.median(ttr) if ttr else None,
                   sum(1 for o in chosen if o.end is None), len({o.node for o in chosen if o.retired}),
                   first, len(chosen) - first, binomial_two_sided(first, len(chosen)))

    rows = [row("fleet", "all", nodes, began)]
    parts = sorted({p for ps in nodes.values() for p in ps})
    for p in parts:
        members = [n for n, ps in nodes.items() if p in ps]
        rows.append(row("partition", p, members, [o for o in began if p in nodes[o.node]]))
    for cause in sorted({o.cause for o in began}):
        rows.append(row("cause", cause, nodes, [o for o in began if o.cause == cause]))
    if per_node:
        for n in sorted(nodes):
            mine = [o for o in began if o.node == n]
            if mine or by_node[n]:
                rows.append(row("node", n, [n], mine))
    days = max(1, math.ceil((end - start) / 86400.0))
    daily: dict[str, list[int]] = {}
    for o in began:
        daily.setdefault(o.cause, [0] * days)[min(days - 1, int((o.start - start) // 86400))] += 1
    return FleetStats(start, end, rows, daily, notes)


def per_gpu_hour_rate(stats: FleetStats, gpus_per_node: int) -> float:
    """Drains per GPU-hour in service: the ``p`` of :mod:`gpuhc.fleet.risk` from history (a node
    failure takes down a job on any of its GPUs, so each GPU carries 1/gpus_per_node of it)."""
    fleet = stats.of("fleet")[0]
    if fleet.node_hours_up <= 0:
        raise ValueError("no node-hours in service in the window: no rate to measure")
    return fleet.drains / (fleet.node_hours_up * gpus_per_node)
