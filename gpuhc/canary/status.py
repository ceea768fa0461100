"""``gpuhc canary status``: every GPU's last canary, its standing and when it is due, as the
cells of an sinfo-like table, or a Prometheus textfile (pure formatting of :func:`gpuhc.canary.fleet.rows`)."""

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


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    return f"{s // 86400}d{s % 86400 // 3600:02d}h" if s >= 86400 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def cells(r: dict[str, Any], now: float) -> dict[str, str]:
    """A GPU's row of ``gpuhc canary status`` (its columns: gpuhc/cli/canary_cmd.py). Node names,
    UUIDs and findings come from the nodes' result files: the table escapes every line it prints."""
    last = r.get("last_run")
    due = r["due"] - now
    return {"node": r["node"], "gpu": r["gpu"] or "-", "status": r["status"],
            "last_run": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(last)) if last else "never",
            "age": age(now - last) if last else "-", "cadence": f"{r['period_h']:g}h",
            "due": "now" if due <= 0 else f"in {age(due)}", "overdue": "OVERDUE" if r["overdue"] else "-",
            "uuid": r.get("uuid") or "-", "finding": " ".join(str(r.get("finding") or "-").split())}


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
