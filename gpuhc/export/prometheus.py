"""node_exporter textfile-collector metrics.

node_exporter reads every ``*.prom`` file in its textfile directory on each scrape. Each writer
owns its own file and replaces it whole, so a scrape never sees half a file and writers never
overwrite each other:

- ``write_textfile(path, report)``: one file per stage. ``path`` may hold ``{stage}``
  (``/var/lib/prometheus/node-exporter/gpuhc-{stage}.prom``, Debian's node exporter); without it the stage is put before
  the extension (``gpuhc.prom`` -> ``gpuhc-passive.prom``). Otherwise every prolog would wipe the
  passive check's series and alerts on ``stage="passive"`` would flap between scrapes.
- ``write_breaker_metric(path, ...)``: the Slurm drain circuit breaker, in a file of its own
  (suggested ``gpuhc-breaker.prom``).
- ``write_metrics(path, samples)``: the general form the two above use, for other writers (the
  fabric sweep: ``gpuhc-sweep.prom``).

Every metric's HELP text lives in :data:`HELP`: node_exporter rejects a family that two files
describe differently, so all writers must take their text from here.

Files are written to a hidden temporary name in the same directory, made 0644 (a restrictive
umask must not hide them from node_exporter, which does not run as root) and renamed over the
target. They are not fsynced: the next run rewrites them, and the two fsyncs cost the health
check milliseconds on every run for nothing a scrape could notice.

The text is written here, not by prometheus_client: importing that package costs about 75 ms,
more than judging a node, and the shipped config turns the textfile on for every health check.
The format is Prometheus' text exposition format, version 0.0.4 (prometheus.io, "Exposition
formats"; summarised in docs/ARCHITECTURE.md, "Hot path"): per family a ``# HELP`` and a
``# TYPE`` line, then one ``name{label="value",...} value`` line per series, with backslash,
double quote and newline escaped in label values (backslash and newline in HELP text).
The tests read every file back with prometheus_client's own parser.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable


# Status -> value of gpuhc_check_status: ordered like Status.rank, so max() is the worst.
STATUS_VALUE = {"pass": 0, "n/a": 0, "warn": 1, "error": 2, "fail": 3}

HELP: dict[str, str] = {
    "gpuhc_check_status": "Worst result of a check on a subject in the last run: 0 pass or n/a, 1 warn, "
                          "2 error (gpuhc could not judge), 3 fail",
    "gpuhc_check_timed_out": "1 when the check timed out in the last run of the stage",
    "gpuhc_node_healthy": "0 when a check failed in the last run of the stage, else 1",
    "gpuhc_node_status": "Worst status of the last run of the stage: 0 pass, 1 warn, 2 error, 3 fail",
    "gpuhc_run_exit_code": "Exit code of the last run of the stage: 0 healthy, 1 unhealthy, 3 internal error",
    "gpuhc_run_duration_seconds": "Wall time of the last run of the stage",
    "gpuhc_run_timestamp_seconds": "Start time of the last run of the stage, seconds since the epoch",
    "gpuhc_config_error": "1 when the config in place did not load and the stage ran on the last good copy or the "
                          "built-in defaults (labels: the error's file and line), else 0",
    # written by the Slurm shims themselves (slurm/shim.sh), with this same help text
    "gpuhc_shim_error": "1 when a Slurm hook's shim could not run gpuhc, or gpuhc died without a word",
    "gpuhc_breaker_open": "1 while the drain circuit breaker is open (gpuhc stopped draining nodes)",
    "gpuhc_breaker_drained_nodes": "Nodes drained by gpuhc when the circuit breaker was last evaluated",
    "gpuhc_breaker_cap": "Most nodes gpuhc may hold drained before the circuit breaker opens",
    "gpuhc_breaker_timestamp_seconds": "When the circuit breaker was last evaluated, seconds since the epoch",
    "gpuhc_breaker_retired_nodes": "Retired nodes in the circuit breaker's scope (not counted toward the drain cap)",
    "gpuhc_breaker_retired_cap": "The retirements' own cap: slurm.breaker.max_retired_percent of the scope, rounded up",
    "gpuhc_breaker_retired_alert": "1 while retired nodes reach their cap (the breaker's ALERT: a person should look)",
}

FILE_MODE = 0o644
DIR_MODE = 0o755


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


def textfile_path(path: str, stage: str) -> str:
    """The file one stage writes: ``{stage}`` filled in, or ``-<stage>`` before the extension."""
    if "{stage}" in path:
        return path.replace("{stage}", stage)
    head, ext = os.path.splitext(path)
    if head.endswith(f"-{stage}"):
        return path  # already this stage's file: idempotent, so a resolved path can be passed again
    return f"{head}-{stage}{ext}"


def report_samples(report: dict[str, Any]) -> list[Sample]:
    """The metrics of one run, from ``RunReport.to_dict()``.

    A check may say several things about one subject (two ECC findings on gpu3); a series can
    hold one value, so the worst wins.
    """
    stage = str(report.get("stage") or "unknown")
    worst: dict[tuple[str, str], int] = {}
    checks: set[str] = set()
    for r in report.get("results") or []:
        check, subject = str(r.get("check", "")), str(r.get("subject", "node"))
        value = STATUS_VALUE.get(str(r.get("status")), STATUS_VALUE["error"])
        key = (check, subject)
        worst[key] = max(worst.get(key, 0), value)
        checks.add(check)
    timed_out = {str(c) for c in report.get("timed_out") or []}
    overall = STATUS_VALUE.get(str(report.get("status")), STATUS_VALUE["error"])
    out = [Sample("gpuhc_check_status", v, {"check": c, "subject": s, "stage": stage})
           for (c, s), v in sorted(worst.items())]
    out += [Sample("gpuhc_check_timed_out", 1 if c in timed_out else 0, {"check": c, "stage": stage})
            for c in sorted(checks | timed_out)]
    st = {"stage": stage}
    out += [
        Sample("gpuhc_node_healthy", 0 if report.get("status") == "fail" else 1, st),
        Sample("gpuhc_node_status", overall, st),
        Sample("gpuhc_run_exit_code", _num(report.get("exit_code"), 3), st),
        Sample("gpuhc_run_duration_seconds", _num(report.get("duration_s"), 0.0), st),
        Sample("gpuhc_run_timestamp_seconds", _num(report.get("started"), 0.0), st),
    ]
    problem = report.get("config_error")
    if isinstance(problem, dict):
        where = {"file": str(problem.get("file") or ""), "line": str(problem.get("line") or "")}
        out.append(Sample("gpuhc_config_error", 1, {**st, **where, "using": str(problem.get("using") or "")}))
    else:
        out.append(Sample("gpuhc_config_error", 0, st))
    return out


def write_textfile(path: str, report: dict[str, Any]) -> str:
    """Write one run's metrics to its stage's file; returns the path written. Raises OSError
    (with the path in its message) when the file cannot be written."""
    target = textfile_path(path, str(report.get("stage") or "unknown"))
    write_metrics(target, report_samples(report))
    return target


def write_breaker_metric(path: str, open: bool, drained: int, cap: int, now: float | None = None,
                         retired: int | None = None, retired_cap: int | None = None) -> None:
    """The drain circuit breaker's state, in a file of its own (not a stage's file); with
    ``retired_cap`` also the retirements' count, cap and alert (the breaker's ALERT line as a
    gauge an alert rule can fire on: examples/alerting/gpuhc-rules.yml)."""
    import time

    samples = [
        Sample("gpuhc_breaker_open", 1 if open else 0),
        Sample("gpuhc_breaker_drained_nodes", drained),
        Sample("gpuhc_breaker_cap", cap),
        Sample("gpuhc_breaker_timestamp_seconds", time.time() if now is None else now),
    ]
    if retired_cap is not None:
        n = retired or 0
        samples += [Sample("gpuhc_breaker_retired_nodes", n), Sample("gpuhc_breaker_retired_cap", retired_cap),
                    Sample("gpuhc_breaker_retired_alert", 1 if n >= retired_cap > 0 else 0)]
    write_metrics(path, samples)


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def render(samples: Iterable[Sample], helps: dict[str, str] | None = None) -> bytes:
    """The exposition text for ``samples``, every family a gauge. Every sample of a name must
    carry the same label names; HELP comes from ``helps`` or :data:`HELP` (a name in neither is a
    ValueError). A series given twice keeps its last value (a file must not repeat a series)."""
    families: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    labelnames: dict[str, tuple[str, ...]] = {}
    for s in samples:
        names = tuple(sorted(s.labels))
        if s.name not in families:
            if not _NAME.fullmatch(s.name):
                raise ValueError(f"metric {s.name!r}: not a Prometheus metric name")
            bad = [n for n in names if not _LABEL.fullmatch(n) or n.startswith("__")]
            if bad:
                raise ValueError(f"metric {s.name}: {bad[0]!r} is not a Prometheus label name")
            families[s.name], labelnames[s.name] = {}, names
        elif names != labelnames[s.name]:
            raise ValueError(f"metric {s.name}: labels {list(names)} differ from {list(labelnames[s.name])}")
        families[s.name][tuple((n, str(s.labels[n])) for n in names)] = float(s.value)
    lines = []
    for name, series in families.items():
        text = (helps or {}).get(name) or HELP.get(name)
        if text is None:
            raise ValueError(f"metric {name}: no HELP text (add it to gpuhc.export.prometheus.HELP)")
        lines.append(f"# HELP {name} {_escape_help(text)}")
        lines.append(f"# TYPE {name} gauge")
        for labels, value in series.items():
            body = ",".join(f'{n}="{_escape_label(v)}"' for n, v in labels)
            lines.append(f"{name}{{{body}}} {_number(value)}" if body else f"{name} {_number(value)}")
    return ("\n".join(lines) + "\n").encode()


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """Go's float spelling, which Prometheus reads: +Inf, -Inf, NaN, else the shortest repr."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def write_metrics(path: str, samples: Iterable[Sample], helps: dict[str, str] | None = None) -> None:
    """Render ``samples`` and replace ``path`` with them atomically."""
    _atomic_write(path, render(samples, helps))


def _atomic_write(path: str, data: bytes) -> None:
    from gpuhc.files.fsutil import make_dirs, write_atomic

    try:
        make_dirs(os.path.dirname(os.path.abspath(path)), DIR_MODE, "prometheus textfile's directory")
        write_atomic(path, data, FILE_MODE, "prometheus textfile", durable=False)
    except OSError as e:
        raise OSError(e.errno, f"{e.strerror or e} writing {path}") from e


def _num(value: Any, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default
