"""``gpuhc sweep report``: what a sweep found, each node's probe history, the busbw curves.

The curves shown are the round-0 median (what a normal group of the sweep did) plus every group
that did not pass and every group a ``--node`` took part in: with hundreds of groups, drawing
them all would hide the one that matters.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from gpuhc.sweep.campaign import groups_of, summary_lines
from gpuhc.sweep.chart import curve_of, terminal_chart
from gpuhc.sweep.stats import median
from gpuhc.sweep.store import SweepStore

MAX_CURVES = 8


def build_report(store: SweepStore, section: dict, sweep_id: str | None, nodes: list[str]) -> dict[str, Any]:
    index = store.read_index()
    sweep_id = sweep_id or index.get("current") or (store.list_sweeps() or [None])[-1]
    record = store.load_sweep(sweep_id) if sweep_id else None
    rep: dict[str, Any] = {"sweep_id": sweep_id, "groups": [], "curves": {}, "nodes": {}, "lines": [], "warnings": [],
                           "pending_drains": index.get("pending_drains", {})}
    known = index.get("nodes", {})
    for n in nodes:
        rep["nodes"][n] = known.get(n, {"events": []})
    if record is None:
        rep["lines"].append("no sweep recorded yet" if not sweep_id else f"no record of sweep {sweep_id}")
        return rep
    rep.update(state=record.get("state"), created=record.get("created"), backend=record.get("backend"),
               rounds=len(record["rounds"]), findings=record.get("findings", {}), applied=record.get("applied", {}))
    results: dict[str, dict] = {}
    for rnd in record["rounds"]:
        groups = groups_of(rnd)
        found, bad = store.round_results(record["id"], [g.id for g in groups])
        results.update((gid, res) for gid, res in found.items() if res)
        for g in groups:
            v = rnd.get("verdicts", {}).get(g.id, {})
            rep["groups"].append({"id": g.id, "round": g.round, "purpose": g.purpose, "nodes": g.nodes,
                                  "job_id": g.job_id, "status": v.get("status", "pending"),
                                  "reasons": v.get("reasons", []), "metrics": v.get("metrics", {})})
            if g.id in bad and bad[g.id] not in v.get("reasons", []):
                rep["warnings"].append(f"{g.id}: {bad[g.id]}")
    rep["curves"] = _curves(rep["groups"], results, set(nodes))
    rep["lines"] += summary_lines(record)
    return rep


def _curves(groups: list[dict], results: dict[str, dict], nodes: set[str]) -> dict[str, list[tuple[int, float]]]:
    first = [results[g["id"]] for g in groups if g["round"] == 0 and g["id"] in results]
    curves: dict[str, list[tuple[int, float]]] = {}
    if first:
        per_size: dict[int, list[float]] = {}
        for res in first:
            for size, bw in curve_of(res):
                per_size.setdefault(size, []).append(bw)
        curves["round-0 median"] = [(s, median(v)) for s, v in sorted(per_size.items())]
    for g in groups:
        if len(curves) >= MAX_CURVES:
            break
        if g["id"] in results and (g["status"] not in ("pass", "pending") or nodes & set(g["nodes"])):
            curves[f"{g['id']} {','.join(g['nodes'])[:40]}"] = curve_of(results[g["id"]])
    return curves


def render_report(rep: dict[str, Any], stream=None) -> None:
    stream = stream or sys.stdout
    w = stream.write
    if rep.get("state") is None:
        for line in rep["lines"]:
            w(line + "\n")
        return
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(rep.get("created") or 0))
    w(f"sweep {rep['sweep_id']} ({rep.get('backend')}), started {created}, {rep['rounds']} round(s), {rep['state']}\n")
    for g in rep["groups"]:
        m = g.get("metrics") or {}
        bw = m.get("large_busbw_gbs")
        p95 = m.get("small_p95_us")
        nums = f"busbw {bw:.2f} GB/s" if isinstance(bw, (int, float)) else "busbw -"
        nums += f", p95 {p95:.1f} us" if isinstance(p95, (int, float)) else ""
        nums += f" [{m['profile']}]" if m.get("profile") else ""  # whose built-in numbers applied
        why = f": {'; '.join(g['reasons'])}" if g["reasons"] else ""
        w(f"  {g['id']} {g['purpose']:<8} {g['status']:<7} {','.join(g['nodes'])[:60]:<30} {nums}{why}\n")
    for line in rep["lines"]:
        w(line + "\n")
    for node, act in (rep.get("applied") or {}).items():
        w(f"applied {node}: {act.get('act')}: {act.get('why')}\n")
    for node, entry in (rep.get("pending_drains") or {}).items():
        w(f"pending drain {node} (sweep {entry.get('sweep')}, named {_when(entry.get('since'))}): "
          "retried by the next `gpuhc sweep analyze --apply`\n")
    for node, entry in rep["nodes"].items():
        w(f"node {node}: last probed {_when(entry.get('last_probed'))}, last verdict {entry.get('last_status', '-')}\n")
        for t, sweep, group, status, why in entry.get("events", []):
            w(f"  {_when(t)} sweep {sweep} {group} {status}{': ' + why if why else ''}\n")
    w(terminal_chart(rep["curves"]) + "\n")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "never"
