"""Markdown tables of sweep documents (``bench/campaign.py --seeds``):
``python -m campaign_model.summary docs/campaign/*.json`` (from bench/). docs/campaign.md and
README quote its output."""

from __future__ import annotations

import json
import sys

ROWS = (("escapes", "escapes (jobs started on a sick node)"),
        ("escapes_per_1000_job_starts", "escapes per 1,000 job starts"),
        ("sick_job_node_hours", "node-hours of jobs on sick or degraded nodes"),
        ("gpu_hours_lost", "GPU-hours lost (killed jobs' work since checkpoint, hangs)"),
        ("hung_by_bad_links", "jobs hung by a bad link (every job on its node, until it left service)"),
        ("repeat_hangs", "of those, after each bad link's first hang (what finding it sooner saves)"),
        ("undetected", "hardware faults never drained"),
        ("false_drains", "false drains"),
        ("false_drains_by_killed_hooks", "of those, Slurm's after slurmd killed a gpuhc hook (Prolog/Epilog error)"),
        ("false_retirements", "false retirements (no fault that a new part ends)"),
        ("human_actions", "human actions (all kinds)"),
        ("rmas", "RMAs (a GPU part after triage, or a retired node)"),
        ("node_hours_out", "node-hours out after gpuhc's drains"),
        ("slurm_rpcs_per_hour", "gpuhc's Slurm RPCs per hour"),
        ("admin_drains_undone_by_gpuhc", "admin drains gpuhc resumed"),
        ("sdc_faults", "silent-corruption faults"),
        ("sdc_job_gpu_hours_before_caught", "GPU-hours of jobs on a corrupting GPU before it was caught"),
        ("sdc_gpu_hours_before_caught", "the corrupting GPU's own hours in jobs before it was caught"),
        ("canary_gpu_hours", "GPU-hours of canary runs (jobs at their limit, epilog slices)"),
        ("canary_preempted", "canary jobs preempted by a real job"))


def _d(x: dict) -> str:
    if not x.get("n"):
        return "-"
    return (f"{x['mean']:g} [{x['ci95'][0]:g}, {x['ci95'][1]:g}] | {x['p50']:g} / {x['p95']:g} / {x['max']:g} | "
            f"{x['seeds_above_zero']}")


def table(doc: dict) -> str:
    head = (f"**{doc['policy']}** ({doc['seeds_run']} seeds, {doc['nodes']} nodes x {doc['gpus']} GPUs, "
            f"{doc['days']:g} days, odds x{doc.get('odds', 1.0):g}; gpuhc "
            f"{str(doc.get('gpuhc_main_commit') or doc.get('gpuhc_commit'))[:7]}{_drawn(doc)})\n\n"
            "| per seed | mean [95 % CI] | p50 / p95 / max | seeds > 0 |\n|---|---|---|---|\n")
    rows = [f"| {label} | {_d(doc['distributions'][k])} |" for k, label in ROWS if k in doc["distributions"]]
    s = doc["sick_spells_back_or_retired_within_60_min"]
    share = "-" if s.get("share") is None else f"{s['share']:g} [{s['ci95'][0]:g}, {s['ci95'][1]:g}] of {s['of']}"
    rows.append(f"| sick-node spells back or retired within 60 min (pooled) | {share} | | |")
    t = doc["time_to_retire_h"]
    rows.append(f"| time to retire a lemon, h (pooled) | n={t['n']} | p50 {t['p50']} / max {t['max']} | |")
    return head + "\n".join(rows)


def _drawn(doc: dict) -> str:
    """What a sweep drew, where it was not the whole model (sweeps before these keys: the whole)."""
    parts = []
    if doc.get("classes", "all") != "all":
        parts.append("classes " + ",".join(doc["classes"]))
    if doc.get("rate_scale", 1.0) != 1.0:
        parts.append(f"rates x{doc['rate_scale']:g}")
    if doc.get("noise") is False:
        parts.append("no noise")
    if doc.get("canary"):
        parts.append("canary on")
    return "; " + ", ".join(parts) if parts else ""


def goals(doc: dict) -> str:
    return "\n".join(f"- {k}: **{v}**" for k, v in doc["goals"].items())


def totals(doc: dict) -> str:
    t = doc["totals"]
    return "\n".join(f"- {k.replace('_', ' ')}: {json.dumps(v)}" for k, v in t.items())


def main(paths: list[str]) -> None:
    for p in paths:
        doc = json.load(open(p))
        print(table(doc), "\n", goals(doc), "\n", totals(doc), "\n", sep="\n")


if __name__ == "__main__":
    main(sys.argv[1:])
