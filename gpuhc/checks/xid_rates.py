"""Rate rules for the xid check: too many Xids of some codes on one GPU inside a time window.

An application Xid (13, 31, 43, 45 ...) alone is the job's problem and only warns once. The
same GPU raising hundreds of them across jobs is a different finding: a GPU that faults for
every program, or one job hammering it in a loop. Sites decide what such a storm means, as
config (``checks.xid.thresholds.rate_rules``)::

    rate_rules:
      - {codes: [13, 31, 43, 45], count: 100, window_s: 3600, severity: warn}
      - {codes: [48, 94], count: 5, window_s: 86400, severity: fail, action: drain + hardware ticket}

"more than ``count`` events of any of ``codes`` on one GPU within the last ``window_s``" gives
one result per (rule, GPU): WARN (never drains), or FAIL with ``action`` (default ``reset
GPU``). A storm is judged from the log on every run while it lasts, so a FAIL rule keeps the
node drained until the storm leaves the window; ``window_s`` cannot exceed the check's own.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import result
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.nvml import GpuReading
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Result, Status

# The default keeps application Xids harmless alone and makes a storm visible, without draining:
# a single buggy job can print a few hundred Xid 13 lines in minutes.
DEFAULT_RULES: list[dict[str, Any]] = [{"codes": [13, 31, 43, 45], "count": 100, "window_s": 3600.0,
                                        "severity": "warn"}]
_KEYS = {"codes", "count", "window_s", "severity", "action"}
DEFAULT_FAIL_ACTION = Action.RESET_GPU


def setting_errors(rules: Any, check_window_s: float) -> list[str]:
    """"rate_rules.N.key: why" for every rule a config gets wrong (config-time and run-time)."""
    if rules is None:
        return []
    if not isinstance(rules, list):
        return [f"rate_rules: want a list of rules, got {rules!r}"]
    errors: list[str] = []
    for i, rule in enumerate(rules):
        where = f"rate_rules.{i}"
        if not isinstance(rule, dict):
            errors.append(f"{where}: want a mapping with codes, count and window_s, got {rule!r}")
            continue
        extra = sorted(set(map(str, rule)) - _KEYS)
        if extra:
            errors.append(f"{where}.{extra[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
        codes = rule.get("codes")
        if not isinstance(codes, list) or not codes or not all(_is_int(c) and c >= 0 for c in codes):
            errors.append(f"{where}.codes: want a non-empty list of Xid numbers, got {codes!r}")
        count = rule.get("count")
        if not _is_int(count) or count < 1:
            errors.append(f"{where}.count: want a whole number >= 1 (more than this many is a storm), got {count!r}")
        win = rule.get("window_s")
        if not _is_num(win) or not 0 < win <= check_window_s:
            errors.append(f"{where}.window_s: want seconds > 0 and at most the check's window_s "
                          f"({check_window_s:g}), got {win!r}")
        severity = rule.get("severity", "warn")
        if severity not in ("warn", "fail"):
            errors.append(f"{where}.severity: must be warn or fail, got {severity!r}")
        if "action" in rule:
            try:
                action = Action(rule["action"])
            except ValueError:
                action = None
            if action is None or not action.drains:
                choices = ", ".join(a.value for a in Action if a.drains)
                errors.append(f"{where}.action: want a draining action ({choices}), got {rule['action']!r}")
            elif severity != "fail":
                errors.append(f"{where}.action: only a severity: fail rule drains; this one warns")
    return errors


def judge(rules: list[dict], events: list[tuple[KernelEvent, bool]], gpus: dict[str, GpuReading],
          now_for) -> list[Result]:
    """Results for every (rule, GPU) over its limit. ``now_for(t)`` is "now" on the clock of
    time ``t`` (a recorded log may count seconds since boot)."""
    out: list[Result] = []
    xids = [ev for ev, _new in events if ev.kind is EventKind.XID and ev.code is not None]
    for i, rule in enumerate(rules):
        codes, limit, window_s = set(rule["codes"]), int(rule["count"]), float(rule["window_s"])
        per: dict[str, list[KernelEvent]] = {}
        for ev in xids:
            if ev.code in codes and (ev.time is None or ev.time >= now_for(ev.time) - window_s):
                per.setdefault(_subject(ev, gpus), []).append(ev)
        for subject, evs in sorted(per.items()):
            if len(evs) > limit:
                out.append(_storm(i, rule, subject, evs, gpus))
    return out


def _storm(i: int, rule: dict, subject: str, evs: list[KernelEvent], gpus: dict[str, GpuReading]) -> Result:
    pci = norm_pci(evs[0].pci) if evs[0].pci else None
    gpu = gpus.get(pci) if pci else None
    seen = sorted({ev.code for ev in evs if ev.code is not None})
    span = f"{float(rule['window_s']) / 3600:g}h"
    where = f"{subject} ({pci})" if pci and pci != subject else subject
    msg = (f"Xid storm on {where}: {len(evs)} x Xid {'/'.join(map(str, seen))} in the last {span}, "
           f"more than {int(rule['count'])} (rate_rules.{i})")
    value = {"rule": i, "codes": seen, "count": len(evs), "limit": int(rule["count"]),
             "window_s": float(rule["window_s"]), "pci": pci, "gpu": gpu.index if gpu else None,
             "last_message": evs[-1].message[:200]}
    if rule.get("severity", "warn") == "fail":
        action = Action(rule["action"]) if "action" in rule else DEFAULT_FAIL_ACTION
        return result("xid", Status.FAIL, msg, subject, value=value, action=action)
    return result("xid", Status.WARN, msg, subject, value=value, action=Action.NONE)


def _subject(ev: KernelEvent, gpus: dict[str, GpuReading]) -> str:
    pci = norm_pci(ev.pci) if ev.pci else None
    gpu = gpus.get(pci) if pci else None
    return gpu.subject if gpu else (pci or "node")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
