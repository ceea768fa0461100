"""Does the model agree with a real campaign on the same seed (docs/campaign.md, "Trusting the
model")? Both sides' Records (real.py) are read the same way: per hardware fault, when gpuhc
drained its node and when the node came back; escapes by class; false drains.

Agreement: the same escapes by class, the same (node, class) drained, the same drains,
reboots and resumes per node in order, and each fault's fault->drain and drain->back within 10 % of the
model's, or within ``floor_s`` where 10 % of the model's time is less than the real side can
resolve (docs/campaign.md says what the floor is made of).
"""

from __future__ import annotations

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
            "reboots": len(rec.reboots), "jobs": rec.jobs, "runs": rec.runs, "notes": rec.notes,
            "lag_s": {"n": len(rec.lag), "max": round(max(rec.lag), 2) if rec.lag else None}}


def bounds(rec) -> list[str]:
    """The real run's own bounds: no escape but after a fault that arose inside a job, no false
    drain (so every drain is explained by a hardware fault on its node)."""
    bad = [f"escape: job {j} started on {n} with {cls} at {t:.1f}s" for t, j, n, cls, injob in rec.escapes
           if not injob]
    return bad + [f"false drain: {x}" for x in false_drains(rec)]


def disagreements(model, real, horizon: float, floor_s: float) -> list[str]:
    """Where the two sides differ; empty when they agree."""
    out = []
    esc_m = Counter(cls for *_, cls, _ in model.escapes)
    esc_r = Counter(cls for *_, cls, _ in real.escapes)
    if esc_m != esc_r:
        out.append(f"escapes: model {dict(esc_m)}, real {dict(esc_r)}")
    if acts(model) != acts(real):
        out.append(f"acts per node: model {acts(model)}, real {acts(real)}")
    fm, fr = per_fault(model, horizon), per_fault(real, horizon)
    raced = races(model)
    drained_m = {(v["node"], v["class"]) for v in fm.values() if v["to_drain"] is not None}
    drained_r = {(v["node"], v["class"]) for v in fr.values() if v["to_drain"] is not None}
    if drained_m != drained_r:
        out.append(f"drained (node, class): model {sorted(drained_m)}, real {sorted(drained_r)}")
    for fid, m in fm.items():
        r = fr.get(fid)
        if r is None:
            out.append(f"fault {fid} ({m['class']} on {m['node']}): not injected on the real side")
            continue
        for key in ("to_drain", "back"):
            a, b = m[key], r[key]
            if (a is None) != (b is None) and not (fid in raced and key == "back"):
                out.append(f"fault {fid} ({m['class']} on {m['node']}) {key}: model {a}, real {b}")
            elif a is not None and b is not None and fid not in raced and abs(a - b) > max(TOLERANCE * a, floor_s):
                out.append(f"fault {fid} ({m['class']} on {m['node']}) {key}: model {a}s, real {b}s "
                           f"(more than {TOLERANCE:.0%} or {floor_s}s apart)")
    return out


def deviations(model, real, horizon: float) -> dict:
    """The largest |real - model| of fault->drain and drain->back, in seconds and in % of the model's."""
    fm, fr = per_fault(model, horizon), per_fault(real, horizon)
    raced = races(model)
    out = {"races": {str(i): {"model": fm[i], "real": fr.get(i)} for i in sorted(raced)}}
    for key in ("to_drain", "back"):
        pairs = [(m[key], fr[i][key]) for i, m in fm.items()
                 if i in fr and i not in raced and m[key] is not None and fr[i][key] is not None]
        out[key] = {"n": len(pairs), "max_abs_s": round(max((abs(b - a) for a, b in pairs), default=0.0), 2),
                    "max_rel": round(max((abs(b - a) / a for a, b in pairs if a > 0), default=0.0), 3)}
    return out
