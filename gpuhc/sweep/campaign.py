"""One sweep from first probe to named culprits: the record, judging a round, the next round.

The record is a JSON-able dict kept in ``<state_dir>/sweep/sweeps/<id>.json``::

    {id, created, backend, run: {job-side settings}, state: running|done,
     rounds: [{round, groups: [Group...], verdicts: {group id: Verdict}, judged_at}],
     findings: {culprits, suspects, unresolved, transient}}

Both ``gpuhc sweep analyze`` (real jobs) and ``gpuhc sweep simulate`` (a synthetic cluster) go
through :func:`judge_round` and :func:`advance`; only where the results come from differs.
Fleet history (per backend/shape/span/sizes/GPU profile) lives in the sweep index and grows with
every passing group, so a shape's normal is learnt from the cluster itself.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from gpuhc.sweep.judge import ERROR, FAIL, PASS, Fleet, Verdict, fleet_key, judge_group, metrics_of, on_ladder, size_notes
from gpuhc.sweep.localize import Outcome, RoundPlan, assess, next_round
from gpuhc.sweep.plan import Group
from gpuhc.sweep.settings import gpu_profile, thresholds_for

NODE_EVENTS_KEPT = 20


def new_record(sweep_id: str, groups: list[Group], section: dict, now: float | None = None) -> dict:
    return {
        "id": sweep_id,
        "created": now if now is not None else time.time(),
        "backend": section["backend"],
        "ranks_per_node": section["ranks_per_node"],
        "run": job_settings(section),
        "state": "running",
        "rounds": [{"round": 0, "groups": [g.to_dict() for g in groups], "verdicts": {}, "judged_at": None}],
        "findings": {},
    }


def job_settings(section: dict) -> dict:
    """What the job side needs, frozen at submit time so that every round measures alike."""
    return {
        "backend": section["backend"],
        **{k: section["sizes"][k] for k in ("min_bytes", "max_bytes", "factor")},
        **{k: section["iters"][k] for k in ("warmup", "iters", "latency_iters", "latency_max_bytes")},
        "timeout_s": section["timeout_s"],
    }


def current_round(record: dict) -> dict:
    return record["rounds"][-1]


def groups_of(rnd: dict) -> list[Group]:
    return [Group.from_dict(g) for g in rnd["groups"]]


def judge_round(record: dict, results: dict[str, dict | None], section: dict, history: dict[str, list]) -> dict[str, Verdict]:
    """Judge every group of the current round against its thresholds and the fleet.

    The fleet for a group is the history of its kind plus the whole current round (a sweep of a
    fresh cluster has no history yet: its groups are each other's fleet), the group itself left
    out. Passing groups then join the history.
    """
    rnd = current_round(record)
    backend = record["backend"]
    table = section.get("thresholds") or {}
    ladder = sweep_ladder(record)
    prepared = []
    fleets: dict[str, Fleet] = {}
    blocks: dict[tuple, dict] = {}
    for g in groups_of(rnd):
        res = results.get(g.id)
        # The GPU model, from the NVML names the ranks recorded: it picks the built-in absolute
        # numbers, and groups of different models never share a fleet.
        profile = gpu_profile(res, backend)
        th = blocks.get((g.shape, g.span, profile))
        if th is None:  # one merge per kind of group, not per group: a round can hold hundreds
            th = on_ladder(thresholds_for(table, backend, g.shape, g.span, profile), ladder)
            blocks[(g.shape, g.span, profile)] = th
        m = metrics_of(res, th) if res else {}
        if profile:
            m["profile"] = profile
        key = fleet_key(backend, g.shape, g.span, m.get("large_bytes"), th["small_bytes"], th["medium_bytes"], profile)
        if key not in fleets:
            fleets[key] = Fleet(history.get(key, []))
        if res:
            fleets[key].add(m)
        prepared.append((g, th, res, key, m))
    verdicts: dict[str, Verdict] = {}
    for g, th, res, key, m in prepared:
        verdicts[g.id] = judge_group(res, th, fleets[key], own_in_fleet=True, metrics=m if res else None)
    window = int(section.get("history_window", 200))
    for g, th, res, key, m in prepared:
        v = verdicts[g.id]
        if v.status == PASS:
            entries = history.setdefault(key, [])
            entries.append({k: v.metrics.get(k) for k in ("small_p95_us", "medium_busbw_gbs", "large_busbw_gbs")})
            del entries[:-window]
    rnd["verdicts"] = {gid: v.to_dict() for gid, v in verdicts.items()}
    rnd["judged_at"] = time.time()
    # Results made with the test-only fault hook (GPUHC_SWEEP_FAULT) are judged like any other
    # (that is what the tests need), but marked: `analyze --apply` will not drain on them.
    hooked = sorted(gid for gid, res in results.items() if isinstance(res, dict) and res.get("fault_hook"))
    if hooked:
        rnd["fault_hook"] = hooked
        record["fault_hook"] = True
    return verdicts


def sweep_ladder(record: dict) -> list[int]:
    """The sizes the sweep's jobs measure (frozen at submit), or [] when the record lacks them."""
    from gpuhc.sweep.stats import size_ladder

    run = record.get("run") or {}
    try:
        return size_ladder(int(run["min_bytes"]), int(run["max_bytes"]), int(run.get("factor", 2)))
    except (KeyError, TypeError, ValueError):
        return []


def outcomes(record: dict) -> list[Outcome]:
    out = []
    for rnd in record["rounds"]:
        for g in groups_of(rnd):
            v = rnd.get("verdicts", {}).get(g.id)
            if v is not None:
                out.append(Outcome(g, v["status"], "; ".join(v.get("reasons", []))))
    return out


def advance(record: dict, section: dict, helpers: Iterable[str], leaf_of: dict[str, str] | None = None) -> RoundPlan | None:
    """After a judged round: update findings; plan the next round, or close the sweep (None)."""
    outs = outcomes(record)
    found = assess(outs)
    loc = section.get("localize", {})
    max_rounds = int(loc.get("max_rounds", 4))
    next_no = len(record["rounds"])
    plan = None
    if next_no < max_rounds and (found.suspects or found.to_confirm):
        plan = next_round(outs, found, next_no, helpers, loc.get("strategy", "auto"), leaf_of)
        if not plan.groups:
            plan = None
    unresolved = [] if plan else list(found.suspects) + [",".join(g.nodes) for g in found.to_confirm]
    record["findings"] = {
        "culprits": [c.to_dict() for c in found.culprits],
        "suspects": found.suspects,
        "transient": found.transient,
        "errors": [o.group.id for o in outs if o.status == ERROR and o.group.round == next_no - 1],
        "unresolved": unresolved,
        "deferred": plan.deferred if plan else [],
    }
    if plan:
        record["rounds"].append({"round": next_no, "groups": [g.to_dict() for g in plan.groups], "verdicts": {},
                                 "judged_at": None})
    else:
        record["state"] = "done"
    return plan


def note_nodes(index: dict, record: dict, verdicts: dict[str, Verdict], now: float) -> None:
    """Per-node memory: when last probed (rotation) and a short history of verdicts (report)."""
    nodes = index.setdefault("nodes", {})
    for g in groups_of(current_round(record)):
        v = verdicts.get(g.id)
        if v is None or v.status == ERROR:
            continue  # no measurement: the node was not really probed
        for n in g.nodes:
            entry = nodes.setdefault(n, {})
            entry["last_probed"] = now
            entry["last_status"] = v.status
            events = entry.setdefault("events", [])
            events.append([round(now, 1), record["id"], g.id, v.status, "; ".join(v.reasons)[:200]])
            del events[:-NODE_EVENTS_KEPT]


def summary_lines(record: dict) -> list[str]:
    f = record.get("findings", {})
    lines = size_notes(v.get("metrics", {}) for rnd in record["rounds"] for v in rnd.get("verdicts", {}).values())
    for c in f.get("culprits", []):
        lines.append(f"culprit {c['kind']} {','.join(c['nodes'])}: {c['evidence']} (group {c['group']})")
    if f.get("unresolved"):
        lines.append(f"unresolved (out of rounds or helpers): {', '.join(f['unresolved'])}")
    if f.get("transient"):
        lines.append(f"transient failures, not repeated: {', '.join(f['transient'])}")
    return lines


def count_status(verdicts: dict[str, Any]) -> dict[str, int]:
    out = {PASS: 0, FAIL: 0, ERROR: 0}
    for v in verdicts.values():
        status = v.status if isinstance(v, Verdict) else v.get("status")
        out[status] = out.get(status, 0) + 1
    return out
