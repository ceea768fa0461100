"""Does the model agree with a real campaign on the same seed (docs/campaign.md, "Trusting the
model")? Both sides' Records (real_record.py) are read the same way: per hardware fault, when gpuhc
drained its node and when the node came back; escapes by class; false drains.

Agreement: the same escapes by class, the same (node, class) drained, the same drains,
reboots and resumes per node in order, and each fault's fault->drain and drain->back within 10 % of the
model's, or within ``floor_s`` where 10 % of the model's time is less than the real side can
resolve (docs/campaign.md says what the floor is made of). Two kinds of race are named, not
timed: a fault within RACE_S of a job's start on its node, and a fault within ``floor_s`` of
its node's resume (one spell on the real side where the model has two); a third is named and
not counted: a prolog stop of the model's that a real health check pre-empted by draining the
node first (``prolog_races``). The last ``floor_s``
of the run is not compared: an act there may fall either side of the real run's end. The
prolog's stops must be the same nodes as often. Slurm's own latencies are not compressed and
the model does not play them (docs/campaign.md), so they may make the real side later, never
earlier: a fault a prolog or a killed job's epilog drained may drain up to RACE_S later, and a
node a prolog drained may come back up to one health-check slot later (``slot_s``: Slurm keeps
it COMPLETING until the job's epilog has run, and a health check inside that waits).
"""

from __future__ import annotations

import copy
from collections import Counter

from .metrics import episodes

TOLERANCE = 0.10
# A fault this close to the start of a job on its node is a race on the real side: Slurm takes
# a second or more from a job's arrival to its prolog on a busy box, where the model starts it at
# once, so the model's "arose in the job" can be the real side's "stopped by the prolog" (and
# the node then waits for Slurm to end the job on all its nodes). Such faults must drain on both
# sides; their timings are listed, not compared.
RACE_S = 3.0


def races(model) -> set[int]:
    """The model's hardware faults that arose within RACE_S of a job's start on their node."""
    return {f.id for f in model.faults if not f.cls.app and any(
        f.node in nodes and abs(f.start - t) <= RACE_S for t, nodes in model.job_starts)}


def resume_races(model, floor_s: float) -> dict[int, float]:
    """{fault id: the resume's time} for the model's hardware faults that arose within ``floor_s``
    of a resume of their node: whether the real retest that resumes the node runs before the
    fault or after it is below what either side resolves. After it, the retest fails and the
    node stays out: the model's resume and its next drain are one spell on the real side."""
    out = {}
    for f in model.faults:
        for t, n, what, _ in model.events:
            if not f.cls.app and n == f.node and what == "resume" and abs(f.start - t) <= floor_s:
                out[f.id] = t
    return out


def merged_acts(model, raced: dict[int, float]) -> dict[str, list[str]]:
    """The model's acts with each raced resume and its node's next drain taken out."""
    rec = copy.copy(model)
    drop = set()
    for fid, t in raced.items():
        node = next(f.node for f in model.faults if f.id == fid)
        evs = sorted(e for e in model.events if e[1] == node)
        i = next(k for k, e in enumerate(evs) if e[0] == t and e[2] == "resume")
        nxt = next((e for e in evs[i + 1:] if e[2] == "drain"), None)
        drop |= {evs[i], *([nxt] if nxt else [])}
    rec.events = [e for e in model.events if e not in drop]
    return acts(rec)


def until(rec, end: float):
    """``rec`` with only the drains, resumes and reboots made by ``end``."""
    out = copy.copy(rec)
    out.events = [e for e in rec.events if e[0] <= end]
    out.reboots = [r for r in rec.reboots if r[0] <= end]
    return out


def prolog_races(model, real) -> list[tuple[float, str]]:
    """The model's prolog stops that the real side's health check pre-empted: no real prolog stop
    on that node near it, the real side drained the node within RACE_S after it, and a real job
    started on other nodes soon after (within 2 RACE_S: the stopped job, placed elsewhere). Slurm takes
    its time from a job's submission to its prolog (the model starts it at once); when the
    node's next health check falls in that time, it drains the node first and Slurm places the
    job elsewhere. Seed 13 on 26.05 in CI: the model's prolog stopped the job at 14.44 s, the
    real health check drained gpu001 at 15.0 s, and the job ran on another node."""
    out = []
    for t, n in model.prolog_stops:
        if any(m == n and abs(u - t) <= RACE_S for u, m in real.prolog_stops):
            continue
        drained = any(m == n and what == "drain" and t <= u <= t + RACE_S for u, m, what, _ in real.events)
        elsewhere = any(n not in nodes and t <= u <= t + 2 * RACE_S for u, nodes in real.job_starts)
        if drained and elsewhere:
            out.append((t, n))
    return out


def prolog_stops(rec, model, skip=()) -> Counter:
    """Per node, the prolog's stops that are not a job-start race on either side (nor one of
    ``skip``, the model's stops a real health check pre-empted)."""
    raced = [f for f in model.faults if f.id in races(model)]
    return Counter(n for t, n in rec.prolog_stops
                   if (t, n) not in skip and not any(f.node == n and abs(f.start - t) <= RACE_S for f in raced))


def per_fault(rec, horizon: float) -> dict[int, dict]:
    """{fault id: node, class, to_drain (s, None: not drained), back (s, None: still out or
    no end), already_out} for the hardware faults of ``rec``."""
    out = {}
    for f in rec.faults:
        if f.cls.app:
            continue
        spells = episodes(rec.events, f.node, horizon)
        # A drain at the fault's own instant is this fault's (the model's epilog runs when the
        # fault ends the job); only a spell begun before it was another's.
        already = any(s < f.start and (e is None or e > f.start) for s, e, _ in spells)
        spell = next(((s, e) for s, e, _ in spells if s >= f.start and (f.end is None or s <= f.end)), None)
        out[f.id] = {"node": f.node, "class": f.cls.name, "already_out": already,
                     "to_drain": None if already or spell is None else round(spell[0] - f.start, 2),
                     "back": None if already or spell is None or spell[1] is None or f.permanent
                     else round(spell[1] - spell[0], 2)}
    return out


def false_drains(rec) -> list[str]:
    """Drains of a node with no active hardware fault at the time (application faults only, or none)."""
    bad = []
    for t, node, what, reason in rec.events:
        if what != "drain":
            continue
        if not any(not f.cls.app and f.node == node and f.start <= t and (f.end is None or f.end >= t)
                   for f in rec.faults):
            bad.append(f"{node} at {t:.1f}s: {reason}")
    return bad


def acts(rec) -> dict[str, list[str]]:
    """Per node, in order: its drains, resumes and reboots (a reboot counts when the machine is
    up again: one the horizon cuts short counts on neither side)."""
    got: dict[str, list[str]] = {}
    for _, node, what, _ in sorted([*rec.events, *((t, n, "reboot", None) for t, n in rec.reboots)],
                                   key=lambda e: e[0]):
        got.setdefault(node, []).append(what)
    return got


def summary(rec, horizon: float) -> dict:
    esc = Counter(cls for *_, cls, injob in rec.escapes if not injob)
    return {"escapes": dict(esc), "escapes_after_in_job_fault": sum(1 for *_, injob in rec.escapes if injob),
            "false_drains": false_drains(rec), "acts": acts(rec),
            "faults": {str(k): v for k, v in per_fault(rec, horizon).items()},
            "reboots": len(rec.reboots), "prolog_stops": [[round(t, 2), n] for t, n in rec.prolog_stops],
            "jobs": rec.jobs, "runs": rec.runs, "notes": rec.notes,
            "lag_s": {"n": len(rec.lag), "max": round(max(rec.lag), 2) if rec.lag else None}}


def bounds(rec) -> list[str]:
    """The real run's own bounds: no escape but after a fault that arose inside a job, no false
    drain (so every drain is explained by a hardware fault on its node)."""
    bad = [f"escape: job {j} started on {n} with {cls} at {t:.1f}s" for t, j, n, cls, injob in rec.escapes
           if not injob]
    return bad + [f"false drain: {x}" for x in false_drains(rec)]


def disagreements(model, real, horizon: float, floor_s: float, slot_s: float = 0.0) -> list[str]:
    """Where the two sides differ; empty when they agree."""
    out = []
    if prolog_stops(model, model, prolog_races(model, real)) != prolog_stops(real, model):
        out.append(f"prolog stops: model {model.prolog_stops}, real {real.prolog_stops}")
    esc_m = Counter(cls for *_, cls, _ in model.escapes)
    esc_r = Counter(cls for *_, cls, _ in real.escapes)
    if esc_m != esc_r:
        out.append(f"escapes: model {dict(esc_m)}, real {dict(esc_r)}")
    model, real = until(model, horizon - floor_s), until(real, horizon - floor_s)
    rr = resume_races(model, floor_s)
    am, ar, alt = acts(model), acts(real), merged_acts(model, rr)
    # a node where the real side made one spell of a raced resume's two
    one_spell = {n for n in ar if ar[n] != am.get(n) and ar[n] == alt.get(n)}
    if any(ar.get(n) != am.get(n) and n not in one_spell for n in {*am, *ar}):
        out.append(f"acts per node: model {am}, real {ar}")
    fm, fr = per_fault(model, horizon), per_fault(real, horizon)
    raced = races(model)
    merged = {i for i in rr if fm[i]["node"] in one_spell}
    if any(i in fr and fr[i]["to_drain"] is None and not fr[i]["already_out"] for i in merged):
        out.append(f"a fault raced its node's resume and the real side never drained for it: {sorted(merged)}")
    # Slurm's own latencies, not compressed and not modelled, may only make the real side later:
    # a job's arrival to its prolog and a killed job's end to its epilog (RACE_S), and after a
    # failed prolog the COMPLETING time until the epilog (a health check inside it waits a slot)
    late: dict[int, dict[str, float]] = {}
    for i, v in fm.items():
        f = next(f for f in model.faults if f.id == i)
        if v["to_drain"] is not None and any(n == v["node"] and abs(f.start + v["to_drain"] - t) <= floor_s
                                             for t, n in model.prolog_stops):
            late[i] = {"to_drain": RACE_S, "back": slot_s}
        elif f.in_job is not None and f.cls.kills_job and v["to_drain"] is not None and v["to_drain"] <= floor_s:
            late[i] = {"to_drain": RACE_S}
    drained_m = {(v["node"], v["class"]) for i, v in fm.items() if v["to_drain"] is not None and i not in merged}
    drained_r = {(v["node"], v["class"]) for i, v in fr.items() if v["to_drain"] is not None and i not in merged}
    if drained_m != drained_r:
        out.append(f"drained (node, class): model {sorted(drained_m)}, real {sorted(drained_r)}")
    for fid, m in fm.items():
        r = fr.get(fid)
        if r is None:
            out.append(f"fault {fid} ({m['class']} on {m['node']}): not injected on the real side")
            continue
        if fid in merged:
            continue
        for key in ("to_drain", "back"):
            if key == "back" and m["node"] in one_spell:
                continue  # the spell that holds a raced resume is one spell on the real side
            a, b = m[key], r[key]
            if (a is None) != (b is None) and not (fid in raced and key == "back"):
                out.append(f"fault {fid} ({m['class']} on {m['node']}) {key}: model {a}, real {b}")
            elif key in late.get(fid, {}) and a is not None and b is not None:
                tol, most = max(TOLERANCE * a, floor_s), late[fid][key]
                if not -tol <= b - a <= most + tol:
                    out.append(f"fault {fid} ({m['class']} on {m['node']}) {key}, Slurm's latency allowed: model {a}s, "
                               f"real {b}s (more than {TOLERANCE:.0%} or {floor_s}s early, or {most}s late)")
            elif a is not None and b is not None and fid not in raced and abs(a - b) > max(TOLERANCE * a, floor_s):
                out.append(f"fault {fid} ({m['class']} on {m['node']}) {key}: model {a}s, real {b}s "
                           f"(more than {TOLERANCE:.0%} or {floor_s}s apart)")
    return out


def deviations(model, real, horizon: float, floor_s: float) -> dict:
    """The largest |real - model| of fault->drain and drain->back, in seconds and in % of the
    model's; the races, each side's numbers listed."""
    pr = prolog_races(model, real)
    model, real = until(model, horizon - floor_s), until(real, horizon - floor_s)
    fm, fr = per_fault(model, horizon), per_fault(real, horizon)
    raced, rr = races(model), resume_races(model, floor_s)
    out = {"races": {str(i): {"model": fm[i], "real": fr.get(i)} for i in sorted(raced)},
           "prolog_races": [[round(t, 2), n] for t, n in pr],
           "resume_races": {str(i): {"resume_at": round(t, 2), "model": fm[i], "real": fr.get(i)}
                            for i, t in sorted(rr.items())}}
    for key in ("to_drain", "back"):
        pairs = [(m[key], fr[i][key]) for i, m in fm.items()
                 if i in fr and i not in raced and i not in rr and m[key] is not None and fr[i][key] is not None]
        out[key] = {"n": len(pairs), "max_abs_s": round(max((abs(b - a) for a, b in pairs), default=0.0), 2),
                    "max_rel": round(max((abs(b - a) / a for a, b in pairs if a > 0), default=0.0), 3)}
    return out
