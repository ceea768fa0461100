"""``gpuhc canary status``: every GPU's last canary, its standing and when it is due, as an
sinfo-like table, JSON, or a Prometheus textfile (pure formatting of :func:`gpuhc.canary.fleet.rows`)."""

from __future__ import annotations

import time
from typing import Any

HELP = {
    "gpuhc_canary_last_run_timestamp_seconds": "When the GPU last ran the known-answer canary, seconds since the epoch",
    "gpuhc_canary_overdue": "1 when the GPU's last canary is older than its cadence (or the node never ran one)",
    "gpuhc_canary_status": "The GPU's canary standing: 0 ok, 1 suspect (unconfirmed mismatch), 3 failed "
                           "(confirmed silent data corruption)",
    "gpuhc_canary_overdue_gpus": "GPUs (or never-run nodes) whose canary is overdue",
}
STATUS_VALUE = {"ok": 0, "never": 0, "suspect": 1, "failed": 3}
COLUMNS = {"N": "NODE", "G": "GPU", "S": "STATUS", "L": "LAST_RUN", "A": "AGE", "C": "CADENCE", "D": "DUE", "O": "OVERDUE",
           "U": "UUID", "F": "FINDING"}
DEFAULT_FORMAT = "%N %G %S %A %C %D %O %F"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    return f"{s // 86400}d{s % 86400 // 3600:02d}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def cells(r: dict[str, Any], now: float) -> dict[str, str]:
    last = r.get("last_run")
    due = r["due"] - now
    from gpuhc.logtext import escape

    return {"N": escape(r["node"]), "G": escape(r["gpu"] or "-"), "S": r["status"],
            "L": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(last)) if last else "never",
            "A": age(now - last) if last else "-", "C": f"{r['period_h']:g}h",
            "D": "now" if due <= 0 else f"in {age(due)}", "O": "OVERDUE" if r["overdue"] else "-",
            "U": escape(r.get("uuid") or "-"), "F": escape(" ".join(str(r.get("finding") or "-").split()))}


def table(rows: list[dict[str, Any]], now: float, fmt: str = DEFAULT_FORMAT, header: bool = True,
          parsable: bool = False) -> str:
    """``-o`` takes sinfo-like ``%N %G ...`` fields (see COLUMNS); ``--parsable`` joins with ``|``."""
    keys = [f[1:] for f in fmt.split() if f.startswith("%") and f[1:] in COLUMNS]
    if not keys:
        raise ValueError(f"format {fmt!r} names no column (known: {' '.join('%' + k for k in COLUMNS)})")
    body = [[cells(r, now)[k] for k in keys] for r in rows]
    head = [COLUMNS[k] for k in keys]
    if parsable:
        return "\n".join("|".join(x) for x in ([head] if header else []) + body)
    grid = ([head] if header else []) + body
    widths = [max(len(row[i]) for row in grid) for i in range(len(keys))] if grid else []
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in grid)


def samples(rows: list[dict[str, Any]]) -> list:
    from gpuhc.export.prometheus import Sample

    out = []
    for r in rows:
        labels = {"node": r["node"], "gpu": r["gpu"] or "", "uuid": r.get("uuid") or ""}
        if r.get("last_run"):
            out.append(Sample("gpuhc_canary_last_run_timestamp_seconds", float(r["last_run"]), labels))
        out.append(Sample("gpuhc_canary_overdue", 1.0 if r["overdue"] else 0.0, labels))
        out.append(Sample("gpuhc_canary_status", float(STATUS_VALUE.get(r["status"], 0)), labels))
    out.append(Sample("gpuhc_canary_overdue_gpus", float(sum(1 for r in rows if r["overdue"]))))
    return out
