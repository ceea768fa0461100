"""The campaign's numbers (docs/campaign.md, "Metrics"), from what happened: the faults, the
modelled Slurm's event list, the jobs' escapes, the persons' repairs."""

from __future__ import annotations

from collections import Counter, defaultdict

from gpuhc.slurm.reason import parse_reason


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    import math

    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100.0 * len(v)) - 1))]


def _minutes(values: list[float]) -> dict:
    return {"n": len(values), "p50_min": _r(pct(values, 50)), "p95_min": _r(pct(values, 95))}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v / 60.0, 1)


def episodes(events, name: str, horizon: float) -> list[tuple[float, float | None, str | None]]:
    """The node's spells out of service that gpuhc began: (drained at, back at or None, reason)."""
    out, start, why = [], None, None
    for t, n, what, reason in events:
        if n != name:
            continue
        if what == "drain" and start is None:
            start, why = t, reason
        elif what in ("resume", "admin-resume") and start is not None:
            out.append((start, t, why))
            start = None
    if start is not None:
        out.append((start, None, why))
    return out


def compute(c) -> dict:
    horizon = c.now()
    hw = [f for f in c.faults if not f.cls.app]
    drains = [(t, n, r) for t, n, what, r in c.slurm.events if what == "drain"]
    by_node = defaultdict(list)
    for f in c.faults:
        by_node[f.node].append(f)

    def active_hw(name, t):
        return [f for f in by_node[name] if not f.cls.app and f.start <= t and (f.end is None or f.end >= t)]

    false_drains = [(t, n, r) for t, n, r in drains if not active_hw(n, t)]
    to_drain = defaultdict(list)
    undrained, already = Counter(), Counter()
    out_at = {n: [(s, e) for s, e, _ in episodes(c.slurm.events, n, horizon)] for n in c.names}
    for f in hw:
        first = next((t for t, n, _ in drains if n == f.node and t >= f.start and (f.end is None or t <= f.end)), None)
        if any(s <= f.start and (e is None or e > f.start) for s, e in out_at[f.node]):
            already[f.cls.name] += 1  # arose on a node gpuhc already held: nothing to drain
        elif first is None:
            undrained[f.cls.name] += 1
        else:
            to_drain[f.cls.name].append(first - f.start)
    back, back_by = [], defaultdict(list)
    out_s = 0.0
    for name in c.names:
        for start, end, _ in episodes(c.slurm.events, name, horizon):
            out_s += (end or horizon) - start
            faults = active_hw(name, start)
            if end is not None and faults and not any(f.permanent for f in faults):
                back.append(end - start)
                back_by[faults[0].cls.name].append(end - start)  # the oldest fault: the one drained for
    retired = {n for n, row in c.slurm.nodes.items() if (m := parse_reason(row.reason)) and m.retired}
    lemons = {f.node for f in hw if f.permanent}
    rpcs = sum(c.slurm.rpcs.values())
    hours = (horizon - c.samples[0][0]) / 3600.0 if c.samples else 1.0
    esc = Counter(cls for *_, cls, _ in c.stats.escapes)
    return {
        "escapes": {"total": sum(esc.values()), "by_class": dict(esc),
                    "after_in_job_fault": sum(1 for *_, injob in c.stats.escapes if injob)},
        "in_job_faults": {"total": len(c.stats.in_job),
                          "outcome": dict(Counter(o or "no next job yet" for _, _, o in c.stats.in_job))},
        "false_drains": {"total": len(false_drains), "nodes": [f"{n}: {r}" for _, n, r in false_drains][:20]},
        "fault_to_drain": {cls: _minutes(v) for cls, v in sorted(to_drain.items())},
        "faults_never_drained": dict(undrained),
        "faults_on_nodes_already_out": dict(already),
        "drain_to_back_repairable": _minutes(back),
        "drain_to_back_by_class": {cls: _minutes(v) for cls, v in sorted(back_by.items())},
        "retirement": {"retired": sorted(retired), "lemon_nodes": sorted(lemons),
                       "precision": round(len(retired & lemons) / len(retired), 3) if retired else None,
                       "recall": round(len(retired & lemons) / len(lemons), 3) if lemons else None},
        "node_hours_out": round(out_s / 3600.0, 1),
        "human_actions": {"total": len(c.stats.human), "why": [f"{n}: {r}" for _, n, r in c.stats.human][:20]},
        "slurm_rpcs_per_hour": round(rpcs / hours, 2),
        "slurm_rpcs": dict(c.slurm.rpcs),
        "faults": dict(Counter(f.cls.name for f in c.faults)),
        "lemons": sum(1 for f in hw if f.permanent),
        "jobs": c.stats.jobs,
        "runs": c.stats.runs,
    }
