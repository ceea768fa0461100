"""The `gpuhc fleet` commands' tables for -o/--format, --parsable and --noheader
(gpuhc/cli/tables.py): each table's columns, declared once, and how one result becomes a row.

Where a command's own view is several tables (stats per fleet, partition, cause and node;
incidents and the failures in none), the -o table is one, with a ``kind`` column telling the
rows apart, as `fleet lemons` tells nodes from GPUs: a script filters one column, it does not
parse titles. Numbers are the command's JSON numbers, not rounded for a screen."""

from __future__ import annotations

from gpuhc.cli.tables import Table

STATS = Table({"kind": 9, "key": 20, "nodes": 5, "drains": 6, "mtbf_h": 8, "mttr_h": 8, "median_ttr_h": 8,
               "open": 4, "retired": 7, "trend": 7, "first_half": 5, "second_half": 5, "trend_p": 0},
              default=("kind", "key", "nodes", "drains", "mtbf_h", "mttr_h", "open", "retired", "trend", "trend_p"))
RISK = Table({"gpus": 6, "hours": 6, "rate": 10, "p_interrupted": 13, "expected_failures": 17, "job_mtbf_h": 10,
              "this_job": 0})
SUSPECTS = Table({"node": 12, "partition": 12, "jobs": 5, "bad": 4, "rate": 8, "rest_rate": 9, "ratio": 6,
                  "p_value": 9, "suspect": 7, "bad_jobs": 0})
INCIDENTS = Table({"kind": 8, "switch": 12, "check": 10, "nodes": 20, "first": 19, "last": 19, "detail": 0},
                  times=frozenset({"first", "last"}))
LEMONS = Table({"kind": 5, "key": 28, "standing": 10, "drains": 6, "nodes": 20, "last": 19, "checks": 0},
               times=frozenset({"last"}))
OBSERVED = Table({"node": 12, "act": 7, "runs": 5, "first": 19, "last": 19, "stages": 22, "reason": 0},
                 times=frozenset({"first", "last"}))
CONFIG_ERRORS = Table({"node": 12, "since": 19, "last": 19, "using": 40, "error": 0},
                      times=frozenset({"since", "last"}))


def stats_row(r) -> dict:
    """A :class:`gpuhc.fleet.stats.Row`."""
    return {"kind": r.kind, "key": r.key, "nodes": r.nodes, "drains": r.drains, "mtbf_h": r.mtbf_h,
            "mttr_h": r.mttr_h, "median_ttr_h": r.median_ttr_h, "open": r.open, "retired": r.retired,
            "trend": r.trend, "first_half": r.first_half, "second_half": r.second_half, "trend_p": r.trend_p}


def risk_rows(risk, scaling: list[tuple[int, float]]) -> list[dict]:
    """The job at each size of the scaling table (its own size marked): the numbers that change
    with the GPU count, for a script comparing sizes."""
    from gpuhc.fleet.risk import Risk

    out = []
    for n, _p in scaling:
        at = Risk(n, risk.hours, risk.rate, risk.source, None, risk.restart_min, None)
        out.append({"gpus": n, "hours": risk.hours, "rate": risk.rate, "p_interrupted": at.probability,
                    "expected_failures": at.expected_failures, "job_mtbf_h": at.job_mtbf_h,
                    "this_job": "yes" if n == risk.gpus else "-"})
    return out


def suspect_row(r) -> dict:
    """A :class:`gpuhc.fleet.suspects.NodeRecord`."""
    return {"node": r.node, "partition": r.partition, "jobs": r.jobs, "bad": r.bad, "rate": r.rate,
            "rest_rate": r.rest_rate, "ratio": r.ratio, "p_value": r.p_value, "suspect": "YES" if r.suspect else "-",
            "bad_jobs": list(r.bad_jobs)}


def incident_rows(found, rest) -> list[dict]:
    """Suspect-switch incidents, then the failures in none (their node in ``nodes``)."""
    return ([{"kind": "incident", "switch": i.switch, "check": i.check, "nodes": i.nodes, "first": i.first,
              "last": i.last, "detail": i.summary} for i in found]
            + [{"kind": "failure", "switch": None, "check": f.check, "nodes": [f.node], "first": f.time,
                "last": f.time, "detail": f.detail or None} for f in rest])


def lemon_row(r) -> dict:
    """A standing: its last drain's time, and the checks of its drains."""
    return {"kind": r.kind, "key": r.key, "standing": "LEMON" if r.lemon else "near" if r.near else "-",
            "drains": len(r.faults), "nodes": r.nodes, "last": max((f.time for f in r.faults), default=None),
            "checks": sorted({f.check for f in r.faults})}
