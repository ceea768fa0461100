"""The fleet's canary state on the admin host: every GPU's last run and standing, the digests
each GPU votes for, and the known answers they elect (``<state_dir>/canary/fleet.json``).

Which answer is trusted (docs/canary.md, "Which answer is right"): an answer learnt from one
GPU's first run would make a GPU that is already corrupting the reference for its whole model,
so no single GPU ever sets it. A case's known answer for one GPU model and software (the key of
:func:`gpuhc.canary.work.software_key`) is the digest a strict majority of that key's GPUs
report, once at least ``min_voters`` have voted; a change (a new driver or cuBLAS is a new key; a
changed majority within one key) is reported. Exact cases need no vote: their answer is the
CPU's, and a fleet whose GPUs all agree on something else is caught by it.

A GPU's standing: ``ok``; ``suspect`` (one unconfirmed mismatch, or a stable digest off the
fleet's answer: shorter cadence until ``suspect_days`` pass clean); ``failed`` (confirmed: stays
failed, drained RETIRED; only an admin's ``forget`` clears it, after the part is replaced).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from typing import Any

from gpuhc.canary import schedule
from gpuhc.files.jsonstore import LockedJson

MAX_BYTES = 64 << 20
KEEP_MISMATCHES = 10


def store(state_dir: str) -> LockedJson:
    return LockedJson(os.path.join(state_dir, "canary"), "fleet.json", "fleet.lock", what="canary fleet state",
                      max_bytes=MAX_BYTES, max_depth=16)


_HEX16 = re.compile(r"[0-9a-f]{16}")
_NAME = re.compile(r"[A-Za-z0-9._:+-]{1,64}")


def record_problem(rec: dict) -> str | None:
    """Why a result file's document cannot be taken in (it is the job account's to write), or None."""
    ended = rec.get("ended")
    if isinstance(ended, bool) or not isinstance(ended, (int, float)) or not math.isfinite(ended):
        return "no finite end time"
    if not isinstance(rec.get("gpus"), dict) or len(rec["gpus"]) > 256:
        return "no table of GPUs"
    for subj, g in rec["gpus"].items():
        if not _NAME.fullmatch(str(subj)) or not isinstance(g, dict):
            return f"GPU entry {str(subj)[:40]!r} is not one"
        if g.get("status") not in ("pass", "warn", "fail", "error", "n/a"):
            return f"{subj}: unknown status"
        digests = g.get("digests") or {}
        if not isinstance(digests, dict) or not all(isinstance(d, str) and _HEX16.fullmatch(d) and
                                                    isinstance(c, str) and len(c) <= 64 for c, d in digests.items()):
            return f"{subj}: digests are not 16 hex digits by case"
        for k in ("key", "uuid", "name", "message"):
            if g.get(k) is not None and not isinstance(g[k], str):
                return f"{subj}: {k} is not text"
    return None


def ingest(doc: dict, rec: dict, settings: dict, now: float) -> list[str]:
    """One node's result file into the fleet state; returns what changed, one line each."""
    node, lines = str(rec.get("node")), []
    if rec.get("injected"):
        return [f"{node}: a test run with an injected bit flip: not counted"]
    if rec.get("error"):
        doc.setdefault("nodes", {}).setdefault(node, {})["last_error"] = {"at": rec.get("ended"), "why": rec["error"]}
        return [f"{node}: {rec['error']}"]
    gpus = doc.setdefault("gpus", {})
    votes = doc.setdefault("votes", {})
    for subj, g in sorted((rec.get("gpus") or {}).items()):
        gid = f"{node}/{subj}"
        e = gpus.setdefault(gid, {"node": node, "gpu": subj, "status": "ok"})
        if e.get("uuid") and g.get("uuid") and e["uuid"] != g["uuid"]:
            lines.append(f"{gid}: a new GPU ({g['uuid']}, was {e['uuid']}): its history starts again")
            e.clear()
            e.update(node=node, gpu=subj, status="ok")
        e.update(uuid=g.get("uuid"), key=g.get("key"), name=g.get("name"), last_run=rec.get("ended"))
        was = e["status"]
        verdict = g.get("status") if g.get("status") in ("fail", "warn") else "pass"
        _standing(e, verdict, settings, now)
        if verdict == "warn" or verdict == "fail":
            e.setdefault("mismatches", []).append({"at": rec.get("ended"), "why": g.get("message")})
            del e["mismatches"][:-KEEP_MISMATCHES]
        if e["status"] == "failed":
            if was != "failed":
                lines.append(f"{gid}: FAILED: {g.get('message')}")
                e.update(failed_at=rec.get("ended"), finding=g.get("message"))
                doc.setdefault("pending", {}).setdefault(node, {"gpu": subj, "finding": g.get("message"), "since": now})
            continue  # failed stays failed and votes no more (its digests are wrong), until `canary forget`
        if verdict == "warn":
            lines.append(f"{gid}: suspect, cadence {settings['suspect_period_h']:g} h: {g.get('message')}")
        elif was == "suspect" and e["status"] == "ok":
            lines.append(f"{gid}: clean since its mismatch: back to the {settings['period_h']:g} h cadence")
        if verdict == "pass":
            e["last_ok"] = rec.get("ended")
        for case, digest in (g.get("digests") or {}).items():
            votes.setdefault(str(g.get("key")), {}).setdefault(case, {})[gid] = digest
    return lines


def _standing(e: dict, verdict: str, settings: dict, now: float) -> None:
    """The GPU's standing after a verdict, by the one rule (:func:`gpuhc.canary.schedule.step`)."""
    until = e.get("suspect_until")
    status, until_h = schedule.step(e.get("status", "ok"), float(until) / 3600.0 if until else None, verdict,
                                    now / 3600.0, schedule.Cadence.from_section(settings))
    e["status"] = status
    if until_h is None:
        e.pop("suspect_until", None)
    else:
        e["suspect_until"] = until_h * 3600.0


def _suspect(e: dict, why: Any, when: Any, settings: dict, now: float) -> None:
    """Off the fleet's answer while the node could not tell: one unconfirmed mismatch."""
    _standing(e, "warn", settings, now)
    e.setdefault("mismatches", []).append({"at": when, "why": why})
    del e["mismatches"][:-KEEP_MISMATCHES]


def elect(doc: dict, settings: dict, now: float) -> list[str]:
    """Recount every key's votes; a known answer that appears or changes is reported, and a GPU
    whose stable digest is not its key's answer becomes suspect (its next run retests against it)."""
    known = doc.setdefault("known", {})
    lines = []
    for key, per_case in sorted((doc.get("votes") or {}).items()):
        for case, by_gpu in sorted(per_case.items()):
            live = {g: d for g, d in by_gpu.items() if (doc.get("gpus", {}).get(g) or {}).get("status") != "failed"}
            top = Counter(live.values()).most_common(1)
            if not top or len(live) < int(settings["min_voters"]) or top[0][1] * 2 <= len(live):
                continue
            answer, was = top[0][0], (known.get(key) or {}).get(case)
            if was != answer:
                known.setdefault(key, {})[case] = answer
                lines.append(f"known answer {'changed' if was else 'learnt'} for {key} {case}: {answer} "
                             f"({top[0][1]} of {len(live)} GPUs)" + (f", was {was}" if was else ""))
            for gid, d in sorted(live.items()):
                e = doc["gpus"].get(gid) or {}
                if d != answer and e.get("status") == "ok":
                    _suspect(e, f"{case} digest {d} is not the fleet's answer {answer}", e.get("last_run"), settings, now)
                    lines.append(f"{gid}: suspect: {case} off the fleet's answer for {key}")
    return lines


def period_h(e: dict, settings: dict, now: float) -> float:
    until = e.get("suspect_until")
    return schedule.period_h(e.get("status", "ok"), float(until) / 3600.0 if until else None, now / 3600.0,
                             schedule.Cadence.from_section(settings))


def next_due(e: dict, settings: dict, now: float) -> float:
    """Seconds since the epoch; 0 for a GPU that never ran."""
    last = e.get("last_run")
    return float(last) + period_h(e, settings, now) * 3600.0 if last else 0.0


def rows(doc: dict, settings: dict, now: float) -> list[dict[str, Any]]:
    """One row per GPU, and one per node that Slurm lists but that never reported a GPU."""
    out = []
    for gid, e in sorted((doc.get("gpus") or {}).items(), key=lambda kv: (kv[1]["node"], _order(kv[1]["gpu"]))):
        due = next_due(e, settings, now)
        out.append({"node": e["node"], "gpu": e["gpu"], "uuid": e.get("uuid"), "status": e.get("status", "ok"),
                    "last_run": e.get("last_run"), "period_h": period_h(e, settings, now), "due": due,
                    "overdue": e.get("status") != "failed" and now > due, "finding": e.get("finding")})
    seen = {r["node"] for r in out}
    for node, n in sorted((doc.get("nodes") or {}).items()):
        if node not in seen and n.get("first_seen") is not None:
            due = float(n["first_seen"]) + float(settings["period_h"]) * 3600.0
            out.append({"node": node, "gpu": None, "uuid": None, "status": "never", "last_run": None,
                        "period_h": float(settings["period_h"]), "due": due, "overdue": now > due,
                        "finding": (n.get("last_error") or {}).get("why")})
    return out


def _order(gpu: str) -> tuple:
    from gpuhc.active.rates import gpu_order

    return gpu_order(gpu)


def node_due(doc: dict, node: str, settings: dict, now: float) -> float:
    """When the node's earliest GPU is due (0: never ran); failed GPUs are not waited for."""
    dues = [next_due(e, settings, now) for e in (doc.get("gpus") or {}).values()
            if e["node"] == node and e.get("status") != "failed"]
    return min(dues) if dues else 0.0
