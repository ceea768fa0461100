"""machine-check: the host's CPUs and memory, from machine checks and EDAC (docs/checks.md,
"machine-check").

Two sources: the kernel log's own lines, needed as by every kernel-log check (``mce:``, ``EDAC
MC<n>: ... CE|UE``, ``Memory failure:``, firmware-first ``[Hardware Error]`` reports;
gpuhc/sources/kernel_log_host.py), and, where an EDAC driver is loaded, the counters in
/sys/devices/system/edac/mc/mc*/{ce,ue}_count (gpuhc/sources/host.py).

- an uncorrected error (an EDAC UE, a bank whose status has UC set, a poisoned page, a fatal or
  recoverable firmware report) FAILs with drain + hardware ticket: host memory lost data and the
  DIMM or CPU needs a person. Held like an Xid until a reboot, an admin's resume or ``window_s``
  quiet; a growing ``ue_count`` fails the same way.
- corrected errors are judged as a rate: the log's CE counts and ``ce_count`` growth within
  ``corrected_window_s``; WARN at ``corrected_warn`` (mcelog's own default trigger is 10 per DIMM
  in 24 h, its mcelog.conf ``ce-error-threshold``), FAIL at ``corrected_fail`` when set, which
  drains only once held over runs (evidence class ``mce-corrected``, gpuhc/catalog/evidence.py).
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import HOST, KERNEL_LOG, Check, CheckOutput, Context, reads_host, result
from gpuhc.checks.kernel_window import DEFAULT_WINDOW_S, EventWindow, acknowledge, earliest, held_key, judge_now, latest, merge_held, validate_corrected
from gpuhc.model.kernel import EventKind
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "machine-check"
_MAX_SAMPLES = 64


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    klog = snapshot.kernel
    edac = snapshot.host.edac if snapshot.host is not None else None
    if klog is None and edac is None:
        return CheckOutput([result(ID, Status.ERROR, "neither the kernel log nor the EDAC counters were read")])
    now = judge_now(snapshot) if klog is not None else snapshot.time
    window_s = float(ctx.t("window_s", DEFAULT_WINDOW_S))
    prev = ctx.prev or {}
    fresh: dict[tuple, dict] = {}
    new_counts: dict[tuple, int] = {}
    ce_events: list[tuple[float, int]] = []
    win = EventWindow(klog, now, window_s, prev) if klog is not None else None
    for ev, new in (win.events((EventKind.MCE,)) if win else []):
        t = ev.time if ev.time is not None else now
        if ev.state == "corrected":
            ce_events.append((t, int(ev.code or 1)))
            continue
        if ev.state != "uncorrected":
            continue  # "Machine check events logged": the EDAC lines or counters say what
        _add(fresh, new_counts, ev.device or "node", t, ev.message, int(ev.code or 1), new)
    counters, samples = _edac(edac, prev, now)
    for mc, grew in counters.items():
        _add(fresh, new_counts, mc, now, f"EDAC {mc} ue_count grew by {grew}", grew, True)
    held = win.held() if win else list(prev.get("held") or [])
    incidents = merge_held(list(fresh.values()), held, new_counts)
    results = [_fail(i) for i in incidents]
    results += _corrected(ce_events, samples, now, ctx)
    if not results:
        results.append(result(ID, Status.PASS, f"no uncorrected machine check or memory error in the last "
                              f"{window_s / 3600:g}h; corrected ones below the rate"))
    state = (win.state(incidents, edac=samples) if win else {"held": incidents, "edac": samples})
    return CheckOutput(results, state=state)


def _add(fresh: dict, new_counts: dict, where: str, t: float, message: str, n: int, new: bool) -> None:
    inc = {"subject": "node", "code": None, "signal": f"uncorrected {where}"}
    key = held_key(inc)
    f = fresh.setdefault(key, {**inc, "where": where, "count": 0, "first": None, "last": None,
                               "action": Action.DRAIN_TICKET.value})
    f["count"] += n
    f["first"], f["last"] = earliest(f["first"], t), latest(f["last"], t)
    f["last_message"] = message[:200]
    new_counts[key] = new_counts.get(key, 0) + (n if new else 0)


def _edac(edac: dict | None, prev: dict, now: float) -> tuple[dict[str, int], list]:
    """(mc -> ue_count growth, the ce/ue samples to keep). A first sight of a nonzero
    ue_count counts: an uncorrected error since boot is news to a node's first run."""
    if not edac:
        return {}, list(prev.get("edac") or [])
    before = {}
    for s in prev.get("edac") or []:
        if isinstance(s, list) and len(s) == 4:
            before[s[1]] = s
    samples = [s for s in (prev.get("edac") or []) if isinstance(s, list) and len(s) == 4]
    grew = {}
    for mc, c in sorted(edac.items()):
        ue, ce = int(c.get("ue") or 0), int(c.get("ce") or 0)
        last = before.get(mc)
        base = int(last[3]) if last is not None and int(last[3]) <= ue else 0  # a lower count: a reboot
        if ue > base:
            grew[mc] = ue - base
        samples.append([round(now, 3), mc, ce, ue])
    return grew, samples[-_MAX_SAMPLES:]


def _corrected(events: list[tuple[float, int]], samples: list, now: float, ctx: Context) -> list:
    span = float(ctx.t("corrected_window_s", 86400.0))
    warn, fail = ctx.t("corrected_warn"), ctx.t("corrected_fail")
    logged = sum(n for t, n in events if t >= now - span)
    counted = 0
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for t, mc, ce, _ue in samples:
        if t >= now - span:
            first.setdefault(mc, int(ce))
            last[mc] = int(ce)
    for mc, ce in last.items():
        counted += max(0, ce - first[mc])
    n = max(logged, counted)  # the log and the counters see the same errors: never added up
    text = f"{n} corrected memory/CPU error(s) in the last {span / 3600:g}h"
    if fail and n >= fail:  # drains once held over runs (gpuhc/catalog/evidence.py): a rate, not an event
        return [result(ID, Status.FAIL, f"{text} (limit {fail})", value=n, threshold=fail, action=Action.DRAIN_TICKET,
                       evidence="mce-corrected")]
    if warn and n >= warn:
        return [result(ID, Status.WARN, f"{text} (warn at {warn})", value=n, threshold=warn, evidence="mce-corrected")]
    return []


def _fail(inc: dict) -> Any:
    n = f" x{inc['count']}" if int(inc.get("count") or 1) > 1 else ""
    msg = f"uncorrected machine check / memory error on {inc.get('where') or 'the host'}{n}"
    value = {k: inc.get(k) for k in ("count", "first", "last", "last_message")}
    return result(ID, Status.FAIL, msg, value=value, action=Action(inc["action"]))


CHECKS = [
    Check(
        id=ID,
        needs=(KERNEL_LOG,),  # a log that cannot be read is said as for every kernel-log check
        optional=(HOST,),  # the EDAC counters; judged without them
        source_needs=reads_host,
        judge=judge,
        stages=("passive", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={
            "window_s": DEFAULT_WINDOW_S,
            "corrected_window_s": 86400.0,
            "corrected_warn": 10,  # mcelog.conf's default ce-error-threshold: 10 / 24h
            "corrected_fail": None,
        },
        doc="Machine checks and EDAC memory errors (kernel log and EDAC counters): uncorrected fail (drain + "
            "hardware ticket); corrected judged as a rate.",
        validate=validate_corrected,
        acknowledge=acknowledge,
    )
]
