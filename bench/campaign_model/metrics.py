"""The campaign's numbers (docs/campaign.md, "Metrics"), from what happened: the faults, the
modelled Slurm's event list, the jobs, the persons' actions."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from gpuhc.slurm.policy.reason import parse_reason

GOAL_BACK_S = 3600.0  # "every repairable node back within the hour"


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100.0 * len(v)) - 1))]


def _minutes(values: list[float]) -> dict:
    return {"n": len(values), "p50_min": _r(pct(values, 50)), "p95_min": _r(pct(values, 95))}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v / 60.0, 1)


def episodes(events, name: str, horizon: float) -> list[tuple[float, float | None, str | None]]:
    """The node's spells out of service that gpuhc began: (drained at, back at or None, reason).
    A spell ends with a resume (gpuhc's or a person's) or with the node's retirement."""
    out, start, why = [], None, None
    for t, n, what, reason in events:
        if n != name:
            continue
        if what == "drain" and start is None:
            start, why = t, reason
        elif start is not None and (what in ("resume", "admin-resume") or (
                what == "reason" and (m := parse_reason(reason)) is not None and m.retired)):
            out.append((start, t, why if what != "reason" else "retired"))
            start = None
    if start is not None:
        out.append((start, None, why))
    return out


def _sick(f) -> bool:
    """A fault that makes a job on its node fail, hang or run slow or wrong."""
    return not (f.cls.app or f.cls.maintenance or f.cls.host_down or f.cls.hang)


def caught_by(reason: str | None, node: str, t: float, c) -> str:
    """Which of gpuhc's parts a drain of a corrupting GPU's node came from."""
    m = parse_reason(reason)
    if m is None:
        return "other"
    if m.check == "canary":
        return "canary"
    if m.check == "burn-in":
        return "burn-in (a canary job's epilog)" if (t, node) in c.canary_epilog_drains else "burn-in"
    return f"other drain ({m.check})"


def silent_corruption(c, drains, spells, horizon) -> dict:
    """Per sdc fault: which part of gpuhc caught it (its node's first drain while it lasted),
    how long that took, and the GPU-hours of users' jobs on the corrupting GPU: the whole job's
    (every GPU of a job computes with its wrong numbers) and the corrupting GPU's own, up to the
    catch and in all (a drain lets the job running there finish)."""
    faults = [f for f in c.faults if f.cls.active == "sdc"]
    by, to_catch, per = Counter(), [], []
    job_h = gpu_h = job_h_all = 0.0
    for f in faults:
        end = f.end if f.end is not None else horizon
        first = next(((t, r) for t, n, r in drains if n == f.node and f.start <= t <= end), None)
        if any(s <= f.start and (e is None or e > f.start) for s, e, _ in spells[f.node]):
            part, caught = "already out", f.start
        elif first is None:
            part, caught = "never", end
        else:
            part, caught = caught_by(first[1], f.node, first[0], c), first[0]
            to_catch.append((caught - f.start) / 3600.0 / c.ts)
        by[part] += 1
        mine = mine_all = own = 0.0
        for j in c.jobs.values():
            if j.start is None or f.node not in j.nodes:
                continue
            j_end = j.end if j.end is not None else horizon
            overlap = min(j_end, end) - max(j.start, f.start)
            before = min(j_end, caught) - max(j.start, f.start)
            if overlap > 0:
                mine_all += overlap * j.size * c.gpus
            if before > 0:
                mine += before * j.size * c.gpus
                own += before
        h = 3600.0 * c.ts
        job_h, job_h_all, gpu_h = job_h + mine / h, job_h_all + mine_all / h, gpu_h + own / h
        per.append({"node": f.node, "precisions": list(f.strength.get("precisions", ())),
                    "trigger": round(f.strength.get("trigger", 0.0), 3), "caught_by": part,
                    "hours_to_catch": None if first is None or part == "already out" else round(to_catch[-1], 2),
                    "job_gpu_hours_before_caught": round(mine / h, 1)})
    st = c.canary_stats
    return {"faults": len(faults), "caught_by": dict(by),
            "job_gpu_hours_before_caught": round(job_h, 1), "job_gpu_hours_while_corrupting": round(job_h_all, 1),
            "corrupting_gpu_hours_in_jobs_before_caught": round(gpu_h, 1),
            "hours_to_catch": {"n": len(to_catch), "p50": _h(pct(to_catch, 50)), "max": _h(max(to_catch, default=None))},
            "per_fault": per[:50],
            "canary": {"on": c.canary_on, "runs": st.runs, "epilog_slices": st.slices, "preempted": st.preempted,
                       "lost": st.lost, "gpu_hours": round(st.gpu_s / 3600.0, 1), "gpu_verdicts": dict(st.verdicts),
                       "drains": [f"{n}: {a}: {r}" for _, n, a, r in st.drains][:20]}}


def _h(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _check_of(reason: str | None) -> str:
    m = parse_reason(reason)
    return m.check if m is not None else "other"


def out_by(c, name: str, t: float, what: str, reason: str | None) -> str:
    """Who took a node out of service with Slurm event ``what`` at ``t``: gpuhc's check, a person
    (and why: the human action of that moment), Slurm."""
    if what in ("drain", "reboot-asked"):
        return f"gpuhc: {_check_of(reason)}"
    if what == "admin-drain":
        kind = next((k for th, n, k, _ in c.stats.human if n == name and th == t), "admin")
        return "person (users' reports)" if kind == "hang reported by users" else f"person ({kind})"
    return f"Slurm ({reason or what})"


def hanging(c, spells, horizon) -> dict:
    """Per fault that hangs every job on its node (FaultClass.hangs_jobs), by class: the jobs it
    hung before its node left service (the first cannot be helped: ``repeat`` is the rest), the
    hours from its first hang (its start where none hung) to its node leaving service, and who
    took the node out (a check of gpuhc's from its reason, a person, Slurm; "never")."""
    hung = Counter(fid for _, fid, *_ in c.stats.hangs)
    first = {}
    for t, fid, *_ in c.stats.hangs:
        first.setdefault(fid, t)
    out: dict = {}
    for f in (f for f in c.faults if f.cls.hangs_jobs):
        row = out.setdefault(f.cls.name, {"faults": 0, "hung": [], "hours": [], "out_by": Counter(), "per": []})
        end = f.end if f.end is not None else horizon
        row["faults"] += 1
        row["hung"].append(hung[f.id])
        left = next(((t, w, r) for t, n, w, r in c.slurm.events if n == f.node and f.start <= t <= end
                     and w in ("drain", "reboot-asked", "admin-drain", "down", "slurm-drain")), None)
        if any(s <= f.start and (e is None or e > f.start) for s, e, _ in spells[f.node]):
            who = "already out"
        elif left is None:
            who = "never"
        else:
            who = out_by(c, f.node, *left)
            row["hours"].append((left[0] - first.get(f.id, f.start)) / 3600.0 / c.ts)
        row["out_by"][who] += 1
        row["per"].append({"node": f.node, "arose_h": round((f.start - c.samples[0][0]) / 3600.0 / c.ts, 1)
                           if c.samples else None, "strength": {k: round(v, 2) if isinstance(v, float) else v
                                                                for k, v in f.strength.items()},
                           "hung": hung[f.id], "out_by": who})
    return {cls: {"faults": r["faults"], "hung_jobs": sum(r["hung"]),
                  "repeat_hangs": sum(max(0, n - 1) for n in r["hung"]),
                  "hung_per_fault": {"p50": pct(r["hung"], 50), "p90": pct(r["hung"], 90), "max": max(r["hung"])},
                  "hours_to_out": {"n": len(r["hours"]), "p50": _h(pct(r["hours"], 50)), "max": _h(max(r["hours"], default=None))},
                  "out_by": dict(r["out_by"]), "per_fault": r["per"][:50]} for cls, r in sorted(out.items())}


def compute(c) -> dict:
    horizon = c.now()
    hw = [f for f in c.faults if not f.cls.app]
    drains = [(t, n, r) for t, n, what, r in c.slurm.events if what == "drain"]
    by_node = defaultdict(list)
    for f in c.faults:
        by_node[f.node].append(f)

    def active_hw(name, t):
        return [f for f in by_node[name] if _sick(f) and f.start <= t and (f.end is None or f.end >= t)]

    false_drains = [(t, n, r) for t, n, r in drains if not active_hw(n, t)]
    # slurmctld's own drains after slurmd killed a hook of gpuhc's (hook_kill.py): of a node with
    # no fault, a false drain that gpuhc's hook caused; of a sick one, Slurm's catch, not gpuhc's
    by_slurm = [(t, n, r) for t, n, what, r in c.slurm.events if what == "slurm-drain"]
    hook_false = [(t, n, r) for t, n, r in by_slurm if not active_hw(n, t)]
    to_drain = defaultdict(list)
    undrained, already, slurm_caught = Counter(), Counter(), Counter()
    spells = {n: episodes(c.slurm.events, n, horizon) for n in c.names}
    for f in hw:
        if not _sick(f):
            continue
        first = next((t for t, n, _ in drains if n == f.node and t >= f.start and (f.end is None or t <= f.end)), None)
        if any(s <= f.start and (e is None or e > f.start) for s, e, _ in spells[f.node]):
            already[f.cls.name] += 1  # arose on a node gpuhc already held: nothing to drain
        elif first is None and any(n == f.node and f.start <= t <= (f.end or horizon) for t, n, _ in by_slurm):
            slurm_caught[f.cls.name] += 1
        elif first is None:
            undrained[f.cls.name] += 1
        else:
            to_drain[f.cls.name].append(first - f.start)
    back, back_by, sick_spells, within = [], defaultdict(list), 0, 0
    out_s = 0.0
    for name in c.names:
        for start, end, why in spells[name]:
            out_s += (end or horizon) - start
            faults = active_hw(name, start)
            if not faults:
                continue
            sick_spells += 1
            if end is not None and end - start <= GOAL_BACK_S * c.ts:
                within += 1
            if end is not None and why != "retired" and not any(f.permanent for f in faults):
                back.append(end - start)
                back_by[faults[0].cls.name].append(end - start)  # the oldest fault: the one drained for
    retired_at = {}
    for t, n, what, r in c.slurm.events:
        if what in ("drain", "reason") and (m := parse_reason(r)) is not None and m.retired:
            retired_at.setdefault(n, t)
    lemons = {f.node for f in hw if f.permanent or f.lemon}

    def needs_a_part(name, t):
        """At retirement: a fault on the node that only a new part ends (not one that clears by
        itself or lies outside the node, an IB cable or switch)."""
        return any(not f.cls.clears_after_s and f.cls.person == "rma" for f in active_hw(name, t))

    false_retired = sorted(n for n, t in retired_at.items() if not needs_a_part(n, t))
    to_retire = [retired_at[n] - min(f.start for f in by_node[n] if f.permanent or f.lemon)
                 for n in retired_at if n in lemons]
    # node-hours of jobs on a node with a fault that makes it fail, hang, run slow or wrong
    sick_hours = Counter()
    for j in c.jobs.values():
        if j.start is None:
            continue
        end = j.end if j.end is not None else horizon
        for name in j.nodes:
            for f in by_node[name]:
                if _sick(f) and f.hurts(j.size):
                    overlap = min(end, f.end if f.end is not None else horizon) - max(j.start, f.start)
                    if overlap > 0:
                        sick_hours[f.cls.name] += overlap / 3600.0 / c.ts
    rpcs = sum(v for k, v in c.slurm.rpcs.items() if k != "timed out")
    hours = (horizon - c.samples[0][0]) / 3600.0 if c.samples else 1.0
    esc = Counter(cls for *_, cls, _ in c.stats.escapes)
    starts = c.stats.jobs["started"]
    human = Counter(kind for _, _, kind, _ in c.stats.human)
    switch = [f for f in hw if f.cls.switch]
    return {
        "escapes": {"total": sum(esc.values()), "by_class": dict(esc),
                    "per_1000_job_starts": round(1000.0 * sum(esc.values()) / starts, 3) if starts else None,
                    "after_in_job_fault": sum(1 for *_, injob in c.stats.escapes if injob)},
        "sick_job_node_hours": {"total": round(sum(sick_hours.values()), 1),
                                "by_class": {k: round(v, 1) for k, v in sorted(sick_hours.items())}},
        "gpu_hours_lost": {"total": round(sum(c.stats.lost_gpu_s.values()) / 3600.0 / c.ts, 1),
                           "by_why": {k: round(v / 3600.0 / c.ts, 1) for k, v in sorted(c.stats.lost_gpu_s.items())}},
        "in_job_faults": {"total": len(c.stats.in_job),
                          "outcome": dict(Counter(o or "no next job yet" for _, _, o in c.stats.in_job))},
        "false_drains": {"total": len(false_drains) + len(hook_false), "slurm_hook_killed": len(hook_false),
                         "by_check": dict(Counter(_check_of(r) for _, _, r in false_drains)),
                         "nodes": [f"{n}: {r}" for _, n, r in sorted(false_drains + hook_false)][:20]},
        "fault_to_drain": {cls: _minutes(v) for cls, v in sorted(to_drain.items())},
        "faults_never_drained": dict(undrained),
        "faults_drained_by_slurm": dict(slurm_caught),  # a hook killed at slurmd's timeout: "Prolog error"
        "faults_on_nodes_already_out": dict(already),
        "sick_spells": {"total": sick_spells, "back_or_retired_within_60_min": within,
                        "share": round(within / sick_spells, 3) if sick_spells else None},
        "drain_to_back_repairable": _minutes(back),
        "drain_to_back_by_class": {cls: _minutes(v) for cls, v in sorted(back_by.items())},
        "retirement": {"retired": sorted(retired_at), "lemon_nodes": sorted(lemons),
                       "false_retirements": len(false_retired), "falsely_retired": false_retired,
                       "precision": round(1 - len(false_retired) / len(retired_at), 3) if retired_at else None,
                       "recall": round(len(set(retired_at) & lemons) / len(lemons), 3) if lemons else None,
                       "time_to_retire_h": [round(v / 3600.0 / c.ts, 1) for v in sorted(to_retire)]},
        "node_hours_out": round(out_s / 3600.0 / c.ts, 1),
        "human_actions": {"total": len(c.stats.human), "by_kind": dict(human),
                          "why": [f"{n}: {k}: {r}" for _, n, k, r in c.stats.human][:20]},
        "admin_drains_undone_by_gpuhc": len(c.stats.admin_undone),
        "switch_events": {"node_faults": len(switch),
                          "drained": sum(1 for f in switch if any(n == f.node and f.start <= t <= (f.end or horizon)
                                                                 for t, n, _ in drains))},
        "slurm_rpcs_per_hour": round(rpcs / hours * c.ts, 2),
        "slurm_rpcs": dict(c.slurm.rpcs),
        "silent_corruption": silent_corruption(c, drains, spells, horizon),
        "hanging_faults": hanging(c, spells, horizon),
        "jobs_check_on_hangs": dict(c.stats.hang_views),  # health checks' verdicts on a hung job
        "faults": dict(Counter(f.cls.name for f in c.faults)),
        "lemons": len(lemons),
        "noise": dict(c.stats.noise),
        "jobs": c.stats.jobs,
        "runs": dict(c.stats.runs),
    }
