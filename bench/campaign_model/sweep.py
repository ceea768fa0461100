"""Many seeds of one policy, every seed reported (docs/campaign.md, "Results"): each seed's
numbers as one JSON line, appended as it finishes (a sweep cut short keeps what it ran), and
the distribution over the seeds with 95 % confidence intervals of the means."""

from __future__ import annotations

import json
import math
import tempfile
import time
from pathlib import Path

# Per seed: the numbers the goals are judged on (docs/campaign.md, "Metrics").
HIDDEN = ("sdc", "slow-gpu", "nvlink-below-fail", "nccl-hang", "nvlink-hang")


def seed_record(doc: dict) -> dict:
    esc = doc["escapes"]
    undetected = doc["faults_never_drained"]
    human = doc["human_actions"]["by_kind"]
    return {
        "seed": doc["seed"], "job_starts": doc["jobs"]["started"],
        "hardware_faults": sum(v for k, v in doc["faults"].items() if not k.startswith("app-")),
        "faults": doc["faults"], "escapes": esc["total"], "escapes_by_class": esc["by_class"],
        "escapes_per_1000_job_starts": esc["per_1000_job_starts"] or 0.0,
        "sick_job_node_hours": doc["sick_job_node_hours"]["total"],
        "sick_job_node_hours_by_class": doc["sick_job_node_hours"]["by_class"],
        "gpu_hours_lost": doc["gpu_hours_lost"]["total"], "gpu_hours_lost_by_why": doc["gpu_hours_lost"]["by_why"],
        "undetected": sum(undetected.values()), "undetected_by_class": undetected,
        "false_drains": doc["false_drains"]["total"], "false_drain_reasons": doc["false_drains"]["nodes"][:5],
        "false_drains_by_killed_hooks": doc["false_drains"]["slurm_hook_killed"],
        "faults_drained_by_slurm": doc["faults_drained_by_slurm"], "jobs_check_on_hangs": doc["jobs_check_on_hangs"],
        "sick_spells": doc["sick_spells"]["total"], "back_within_60": doc["sick_spells"]["back_or_retired_within_60_min"],
        "retired": len(doc["retirement"]["retired"]), "lemon_nodes": len(doc["retirement"]["lemon_nodes"]),
        "false_retirements": doc["retirement"]["false_retirements"],
        "time_to_retire_h": doc["retirement"]["time_to_retire_h"],
        "human_actions": doc["human_actions"]["total"], "human_by_kind": human,
        "rmas": human.get("rma", 0), "node_hours_out": doc["node_hours_out"],
        "slurm_rpcs_per_hour": doc["slurm_rpcs_per_hour"], "slurm_timeouts": doc["slurm_rpcs"].get("timed out", 0),
        "admin_drains_undone_by_gpuhc": doc["admin_drains_undone_by_gpuhc"],
        "switch_node_faults": doc["switch_events"]["node_faults"], "switch_drained": doc["switch_events"]["drained"],
        "real_runs": doc["runs"].get("real", 0), "wall_s": doc["wall_s"],
        **sdc_record(doc["silent_corruption"]), **hang_record(doc["hanging_faults"]),
    }


def hang_record(h: dict) -> dict:
    """Per seed: the faults that hang every job on their node (metrics.hanging): the jobs they
    hung, those after each fault's first, and who took each node out ("class: who")."""
    return {"hung_by_bad_links": sum(r["hung_jobs"] for r in h.values()),
            "repeat_hangs": sum(r["repeat_hangs"] for r in h.values()),
            "hang_out_by": {f"{cls}: {who}": n for cls, r in h.items() for who, n in r["out_by"].items()}}


def sdc_record(s: dict) -> dict:
    """Per seed: the silent corruption's numbers (metrics.silent_corruption)."""
    c = s["canary"]
    return {"sdc_faults": s["faults"], "sdc_caught_by": s["caught_by"],
            "sdc_job_gpu_hours_before_caught": s["job_gpu_hours_before_caught"],
            "sdc_job_gpu_hours_while_corrupting": s["job_gpu_hours_while_corrupting"],
            "sdc_gpu_hours_before_caught": s["corrupting_gpu_hours_in_jobs_before_caught"],
            "sdc_hours_to_catch": [f["hours_to_catch"] for f in s["per_fault"] if f["hours_to_catch"] is not None],
            "sdc_per_fault": s["per_fault"],
            "canary_runs": c["runs"], "canary_epilog_slices": c["epilog_slices"], "canary_preempted": c["preempted"],
            "canary_gpu_hours": c["gpu_hours"], "canary_gpu_verdicts": c["gpu_verdicts"]}


def run_seeds(policy: str, seeds: list[int], out: Path, days: float, nodes: int, odds: float = 1.0,
              rate_scale: float = 1.0, classes: tuple[str, ...] | None = None, canary: bool = False,
              noise: bool = True) -> None:
    """Run each seed (one process, one after the other) and append its record to ``out``; seeds
    already in ``out`` are skipped, so a sweep can be resumed (with the same arguments: a record
    does not say them)."""
    from .metrics import compute
    from .policies import config_for
    from .sim import Campaign

    done = {r["seed"] for r in load(out)} if out.exists() else set()
    for seed in seeds:
        if seed in done:
            continue
        with tempfile.TemporaryDirectory(prefix="gpuhc-sweep-") as tmp:
            started = time.monotonic()
            c = Campaign(config_for(policy, Path(tmp)), Path(tmp), nodes=nodes, days=days, seed=seed, odds=odds,
                         rate_scale=rate_scale, classes=classes, canary=canary, noise=noise).run()
            doc = {"policy": policy, "seed": seed, **compute(c), "wall_s": round(time.monotonic() - started, 1)}
        with out.open("a") as fh:
            fh.write(json.dumps(seed_record(doc), sort_keys=True) + "\n")


SDC_DIST = ("sdc_faults", "sdc_job_gpu_hours_before_caught", "sdc_job_gpu_hours_while_corrupting",
            "sdc_gpu_hours_before_caught", "canary_runs", "canary_epilog_slices", "canary_preempted",
            "canary_gpu_hours")


def _hours(rs: list[dict]) -> dict:
    v = sorted(h for r in rs for h in r.get("sdc_hours_to_catch") or [])
    return {"n": len(v), "p50": v[len(v) // 2] if v else None, "max": v[-1] if v else None}


def load(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def dist(values: list[float]) -> dict:
    """Mean with a 95 % interval (normal approximation over seeds), and the distribution."""
    n = len(values)
    if not n:
        return {"n": 0}
    v = sorted(values)
    mean = sum(v) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    floor = 0.0 if v[0] >= 0 else -math.inf  # a count's interval stops at 0
    q = lambda p: v[min(n - 1, max(0, math.ceil(p / 100.0 * n) - 1))]  # noqa: E731
    return {"n": n, "mean": round(mean, 3), "ci95": [round(max(floor, mean - half), 3), round(mean + half, 3)],
            "p5": q(5), "p50": q(50), "p95": q(95), "max": v[-1], "seeds_above_zero": sum(1 for x in v if x > 0)}


def _share(num: int, den: int) -> dict:
    """A pooled share with its 95 % Wilson interval."""
    if not den:
        return {"share": None, "n": 0}
    p, z = num / den, 1.96
    mid = (p + z * z / (2 * den)) / (1 + z * z / den)
    half = z * math.sqrt(p * (1 - p) / den + z * z / (4 * den * den)) / (1 + z * z / den)
    return {"share": round(p, 4), "ci95": [round(mid - half, 4), round(mid + half, 4)], "of": den}


def _sum_by(records: list[dict], key: str) -> dict:
    out: dict = {}
    for r in records:
        for k, v in (r.get(key) or {}).items():
            out[k] = round(out.get(k, 0) + v, 1)
    return dict(sorted(out.items()))


def aggregate(records: list[dict], meta: dict) -> dict:
    """The sweep's document: the distributions, the goals met or missed, every seed."""
    rs = sorted(records, key=lambda r: r["seed"])
    d = {k: dist([float(r[k]) for r in rs]) for k in (
        "job_starts", "hardware_faults", "escapes", "escapes_per_1000_job_starts", "sick_job_node_hours",
        "gpu_hours_lost", "undetected", "false_drains", "false_retirements", "human_actions", "rmas",
        "node_hours_out", "slurm_rpcs_per_hour", "admin_drains_undone_by_gpuhc", "real_runs", "wall_s",
        "hung_by_bad_links", "repeat_hangs", "false_drains_by_killed_hooks", *SDC_DIST) if all(k in r for r in rs)}
    spells = sum(r["sick_spells"] for r in rs)
    within = sum(r["back_within_60"] for r in rs)
    retire_h = sorted(h for r in rs for h in r["time_to_retire_h"])
    goals = {
        "no job starts on a sick node": "met" if all(r["escapes"] == 0 for r in rs) else
        f"missed: {sum(r['escapes'] for r in rs)} escapes in {sum(1 for r in rs if r['escapes'])} of {len(rs)} seeds",
        "no false drain": "met" if all(r["false_drains"] == 0 for r in rs) else
        f"missed: {sum(r['false_drains'] for r in rs)} in {sum(1 for r in rs if r['false_drains'])} of {len(rs)} seeds",
        "every sick node back or retired within 60 min": "met" if within == spells else
        f"missed: {within} of {spells} spells ({_share(within, spells)['share']})",
        "no person for what gpuhc drains": "met" if all(
            sum(v for k, v in r["human_by_kind"].items() if k not in ("maintenance", "host repair")) == 0 for r in rs)
        else "missed: " + json.dumps(_sum_by(rs, "human_by_kind")),
        "no retirement of a good node": "met" if all(r["false_retirements"] == 0 for r in rs) else
        f"missed: {sum(r['false_retirements'] for r in rs)} in {sum(1 for r in rs if r['false_retirements'])} seeds",
    }
    return {**meta, "seeds_run": len(rs), "distributions": d,
            "sick_spells_back_or_retired_within_60_min": _share(within, spells),
            "time_to_retire_h": {"n": len(retire_h), "p50": retire_h[len(retire_h) // 2] if retire_h else None,
                                 "max": retire_h[-1] if retire_h else None},
            "totals": {"faults": _sum_by(rs, "faults"), "escapes_by_class": _sum_by(rs, "escapes_by_class"),
                       "undetected_by_class": _sum_by(rs, "undetected_by_class"),
                       "sick_job_node_hours_by_class": _sum_by(rs, "sick_job_node_hours_by_class"),
                       "gpu_hours_lost_by_why": _sum_by(rs, "gpu_hours_lost_by_why"),
                       "human_by_kind": _sum_by(rs, "human_by_kind"),
                       "sdc_caught_by": _sum_by(rs, "sdc_caught_by"),
                       "hang_out_by": _sum_by(rs, "hang_out_by"),
                       "faults_drained_by_slurm": _sum_by(rs, "faults_drained_by_slurm"),
                       "jobs_check_on_hangs": _sum_by(rs, "jobs_check_on_hangs"),
                       "sdc_hours_to_catch": _hours(rs),
                       "switch_node_faults": sum(r["switch_node_faults"] for r in rs),
                       "switch_drained": sum(r["switch_drained"] for r in rs)},
            "goals": goals, "seeds": rs}
