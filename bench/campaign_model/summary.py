"""A markdown table of campaign JSON documents: ``python -m campaign_model.summary docs/campaign/*.json``
(from bench/). docs/campaign.md and README quote its output."""

from __future__ import annotations

import json
import sys


def _p(d: dict) -> str:
    return "-" if not d or d.get("n", 0) == 0 else f"{d['p50_min']:g} / {d['p95_min']:g} (n={d['n']})"


def row(doc: dict) -> str:
    r = doc["retirement"]
    inj = doc["in_job_faults"]
    hw = sum(v for k, v in doc["faults"].items() if not k.startswith("app-"))
    app = sum(v for k, v in doc["faults"].items() if k.startswith("app-"))
    drain = [v for v in doc["fault_to_drain"].values() if v["n"]]
    allp50 = "; ".join(f"{k} {v['p50_min']:g}" for k, v in sorted(doc["fault_to_drain"].items()))
    return (f"| {doc['policy']} | {doc['seed']} | {hw} (+{app} app, {doc['lemons']} lemons) | {doc['escapes']['total']} "
            f"{dict(doc['escapes']['by_class']) or ''} | {inj['total']}: {inj['outcome']} | "
            f"{doc['false_drains']['total']} | {allp50 if drain else '-'} | {_p(doc['drain_to_back_repairable'])} | "
            f"{r['precision']} / {r['recall']} | {doc['node_hours_out']} | {doc['human_actions']['total']} | "
            f"{doc['slurm_rpcs_per_hour']} |")


HEAD = ("| policy | seed | hardware faults | escapes | in-job faults: next job | false drains | fault→drain p50 min "
        "by class | drain→back p50 / p95 min | retire precision / recall | node-hours out | human actions | "
        "Slurm RPCs/h |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


BACK_HEAD = "| policy | seed | drain→back p50 / p95 min (n) by class, repairable faults |\n|---|---|---|"


def back_row(doc: dict) -> str:
    """Time from drain to back in service per class (the issue's "by class"); a document
    written before that metric existed shows a dash."""
    by = doc.get("drain_to_back_by_class")
    text = "; ".join(f"{k} {_p(v)}" for k, v in sorted(by.items())) if by else "-"
    return f"| {doc['policy']} | {doc['seed']} | {text} |"


def main(paths: list[str]) -> None:
    docs = sorted((json.load(open(p)) for p in paths), key=lambda d: (d["policy"] != "shipped", d["policy"], d["seed"]))
    print(HEAD)
    for d in docs:
        print(row(d))
    print()
    print(BACK_HEAD)
    for d in docs:
        print(back_row(d))


if __name__ == "__main__":
    main(sys.argv[1:])
