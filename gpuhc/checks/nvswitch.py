"""nvswitch: NVSwitch fabric registration per GPU (NVML) and NVSwitch SXid errors (kernel log).

Fabric. On HGX boards every GPU must register with the NVLink fabric (Fabric Manager) before
CUDA can use it; until then CUDA programs fail to start. NVML reports ``fabric_state`` (not
supported / not started / in progress / completed) and ``fabric_status`` (the result):

- no fabric (None, "not supported"): n/a, the node has no NVSwitch.
- completed + success: pass.
- completed + anything else: FAIL, drain + reboot: registration failed, the fabric will not
  come up without restarting Fabric Manager and the GPUs, which in practice is a reboot.
- not started / in progress: right after boot this is normal for a minute. WARN while it lasts
  less than ``fabric_grace_s`` (default 300 s, measured from the first run that saw it, kept in
  the check state), then FAIL, drain + reboot: Fabric Manager is not running or is stuck.

SXids. Fatal SXids (the log line says "Fatal", or the catalog does when the line does not)
FAIL with drain + reboot and hold until reboot, exactly like draining Xids (same event window
and cursor as the xid check: :class:`gpuhc.checks.xid.EventWindow`). Non-fatal ones WARN once.
One result per (switch, SXid) with a count. The fabric is shared by all GPUs, so SXids are
judged in the prolog too, whatever the job's GPUs.
"""

from __future__ import annotations

from gpuhc.checks.base import KERNEL_LOG, NVML, Check, CheckOutput, Context, na, result, selected_gpus
from gpuhc.checks.kernel_window import DEFAULT_WINDOW_S, EventWindow, acknowledge, earliest, judge_now, latest, merge_held
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "nvswitch"
DEFAULT_GRACE_S = 300.0
_PENDING = ("not started", "in progress")


def _norm(text: str | None) -> str | None:
    if text is None:
        return None
    s = str(text).strip().lower().replace("_", " ")
    for prefix in ("nvml gpu fabric state ", "nvml "):
        if s.startswith(prefix):
            s = s[len(prefix):]
    return s


def _fabric(gpus: list[GpuReading], now: float, prev_pending: dict, grace_s: float) -> tuple[list[Result], dict, int]:
    """Results for GPUs whose fabric is not healthy, the pending-since map, and #GPUs judged."""
    results: list[Result] = []
    pending: dict[str, float] = {}
    judged = 0
    for gpu in gpus:
        state, status = _norm(gpu.fabric_state), _norm(gpu.fabric_status)
        if state is None or state == "not supported":
            continue
        judged += 1
        s = gpu.subject
        if state == "completed":
            if status in (None, "success"):
                continue
            results.append(result(ID, Status.FAIL, f"{s} NVSwitch fabric registration failed: {status}", s,
                                  value={"state": state, "status": status}, threshold="success",
                                  action=Action.DRAIN_REBOOT))
            continue
        since = min(float(prev_pending.get(s, now)), now)
        pending[s] = since
        waited = max(0.0, now - since)
        what = state if state in _PENDING else f"in unexpected state {state!r}"
        value = {"state": state, "status": status, "pending_s": round(waited, 1)}
        if waited >= grace_s:
            results.append(result(ID, Status.FAIL, f"{s} NVSwitch fabric registration still {what} after "
                                  f"{waited:.0f}s (Fabric Manager down?)", s, value=value, threshold=grace_s,
                                  action=Action.DRAIN_REBOOT))
        else:
            results.append(result(ID, Status.WARN, f"{s} NVSwitch fabric registration {what}", s, value=value,
                                  threshold=grace_s))
    return results, pending, judged


def _switch(ev: KernelEvent) -> str:
    return ev.device or ev.pci or "nvswitch"


def sxid_info(code: int):
    """The catalog's entry (gpuhc.catalog.xid), imported only when a run sees an SXid."""
    from gpuhc.catalog.xid import sxid_info as lookup

    return lookup(code)


def _fatal(ev: KernelEvent) -> bool:
    if ev.state == "fatal":
        return True
    if ev.state == "non-fatal":
        return False
    return sxid_info(ev.code or 0).fatal


def _sxids(win: EventWindow, now: float) -> tuple[list[Result], list[dict]]:
    groups: dict[tuple[str, int], dict] = {}
    for ev, new in win.events((EventKind.SXID,)):
        key = (_switch(ev), ev.code or 0)
        t = ev.time if ev.time is not None else now
        g = groups.setdefault(key, {"subject": key[0], "code": key[1], "pci": ev.pci, "count": 0, "new": 0,
                                    "fatal": False, "links": [], "first": None, "last": None})
        g["count"] += 1
        g["new"] += int(new)
        g["fatal"] = g["fatal"] or _fatal(ev)
        g["first"], g["last"] = earliest(g["first"], t), latest(g["last"], t)
        g["last_message"] = ev.message[:200]
        if ev.port is not None and ev.port not in g["links"]:
            g["links"].append(ev.port)
    results: list[Result] = []
    fresh: list[dict] = []
    for g in groups.values():
        if g["fatal"]:
            fresh.append({k: g.get(k) for k in ("subject", "code", "pci", "count", "first", "last", "links",
                                               "last_message")} | {"action": sxid_info(g["code"]).action.value})
        elif g["new"]:
            results.append(result(ID, Status.WARN, _message(g, "non-fatal"), g["subject"],
                                  value=_value(g), action=Action.NONE))
    incidents = merge_held(fresh, win.held(), {k: g["new"] for k, g in groups.items()})
    for inc in incidents:
        results.append(result(ID, Status.FAIL, _message(inc, "fatal"), inc["subject"], value=_value(inc),
                              action=Action(inc["action"])))
    return results, incidents


def _message(g: dict, fatality: str) -> str:
    info = sxid_info(int(g["code"]))
    where = f"{g['subject']} ({g['pci']})" if g.get("pci") and g["subject"] != g["pci"] else g["subject"]
    count = f" x{g['count']}" if g["count"] > 1 else ""
    links = g.get("links") or []
    on_links = f" (link {', '.join(str(x) for x in links[:8])})" if links else ""
    return f"SXid {g['code']} on {where}{count}: {fatality}, {info.name}{on_links}"


def _value(g: dict) -> dict:
    return {k: g.get(k) for k in ("code", "count", "new", "first", "last", "pci", "links", "last_message")}


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    prev = ctx.prev or {}
    klog = snapshot.kernel
    now = judge_now(snapshot)
    win = EventWindow(klog, now, float(ctx.t("window_s", DEFAULT_WINDOW_S)), prev) if klog is not None else None
    # Pending-since times die with the boot: a node rebooted to fix its fabric gets a fresh grace.
    pending = {} if (win is not None and win.rebooted) else dict(prev.get("fabric_pending") or {})
    results: list[Result] = []
    judged = 0
    nvml = snapshot.nvml
    if nvml is not None and nvml.available:
        gpus = selected_gpus(snapshot, ctx)
        fab, still, judged = _fabric(gpus, snapshot.time, pending, float(ctx.t("fabric_grace_s", DEFAULT_GRACE_S)))
        results.extend(fab)
        for gpu in gpus:  # GPUs outside the prolog's job keep their clocks
            pending.pop(gpu.subject, None)
        pending.update(still)
    if win is not None:
        sx, incidents = _sxids(win, now)
        results.extend(sx)
        state = win.state(incidents, fabric_pending=pending)
    else:
        results.append(result(ID, Status.ERROR, "kernel log was not read: SXids not judged"))
        state = {**prev, "fabric_pending": pending}
    if not results:
        sxid_seen = any(e.kind is EventKind.SXID for e in klog.events) if klog is not None else False
        if judged or sxid_seen:
            what = f"fabric registered on {judged} GPU(s)" if judged else "no fabric reported by NVML"
            results.append(result(ID, Status.PASS, f"{what}, no NVSwitch error needing action", value=judged))
        else:
            why = "NVML unavailable" if nvml is None or not nvml.available else "no NVSwitch fabric on this node"
            results.append(na(ID, why))
    results.sort(key=lambda r: (-r.status.rank, r.subject))
    return CheckOutput(results, state=state)


CHECKS = [
    Check(
        id=ID,
        needs=(KERNEL_LOG,),
        optional=(NVML,),  # fabric state; SXids are judged from the kernel log alone
        judge=judge,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={"window_s": DEFAULT_WINDOW_S, "fabric_grace_s": DEFAULT_GRACE_S},
        doc="NVSwitch fabric registration per GPU and NVSwitch SXid errors in the kernel log.",
        acknowledge=acknowledge,
    )
]
