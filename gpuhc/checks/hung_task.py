"""hung-task: the kernel's hung-task reports (docs/checks.md, "hung-task").

The kernel's hung-task detector (``kernel/hung_task.c``) reports a task that stayed in
uninterruptible sleep without being scheduled for ``hung_task_timeout_secs`` (120 s by default),
with the task's stack (gpuhc/sources/node_reports.py reads the report).

- a report whose stack has a reliable frame in one of ``driver_modules`` (nvidia, nvidia_uvm...)
  FAILs, drain + reboot: the task waits on a lock or an answer inside the GPU driver, whose
  state is wedged; a reset or reboot cures it. Held like an Xid until a reboot, an admin's
  resume or ``window_s`` quiet (the kernel prints ten such reports a boot, then stops). When the
  task is one of ``gpu_services`` (nv-hostengine, nvidia-smi...) the reason says so, and when
  ``storm_count`` or more Xids of ``storm_codes`` (45: channels torn down) came within
  ``storm_window_s`` before it, the reason names the storm: DCGM's engine stuck in the driver
  while the driver tears down channels is the driver failing, not one job's end.
- any other report WARNs (class ``stuck-process``: host evidence, gpuhc/catalog/evidence.py), once, on
  the run that first sees it: a task stuck on a disk, NFS or a lock of its own is the node's
  noise until held evidence says more (the host check's stuck processes).

Whose words count (docs/security.md, "Hung tasks"): the task's name is the process's own
choice, so a name never makes a FAIL: only the stack does, and the stack is the kernel's own
records. A GPU service's name with no stack in the driver (or no stack in the log) warns.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import KERNEL_LOG, Check, CheckOutput, Context, result
from gpuhc.checks.kernel_window import DEFAULT_WINDOW_S, acknowledge, earliest, held_key, latest, merge_held, open_window
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "hung-task"
TASK_COMM = 15  # the kernel keeps 15 characters of a task's name (TASK_COMM_LEN - 1)
# The GPU driver's modules (NVIDIA's open-gpu-kernel-modules builds these five)
DRIVER_MODULES = ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"]
GPU_SERVICES = ["nv-hostengine", "nvidia-smi", "nvidia-persistenced", "nv-fabricmanager", "dcgm-exporter",
                "nvidia-dcgm"]


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    win = open_window(snapshot, ctx, ID)
    if isinstance(win, CheckOutput):
        return win
    klog, now, window_s = win.klog, win.now, win.window_s
    modules = set(ctx.t("driver_modules") or DRIVER_MODULES)
    services = {str(s)[:TASK_COMM] for s in ctx.t("gpu_services") or GPU_SERVICES}
    events = win.events((EventKind.HUNG_TASK, EventKind.XID))
    xids = [ev for ev, _new in events if ev.kind is EventKind.XID]
    fresh: dict[tuple, dict] = {}
    new_counts: dict[tuple, int] = {}
    results: list[Result] = []
    for ev, new in events:
        if ev.kind is not EventKind.HUNG_TASK:
            continue
        name = ev.device or "?"
        service = name[:TASK_COMM] in services
        in_driver = sorted(modules & set((ev.state or "").split()))
        if not in_driver:
            if new:
                results.append(_warn(ev, service))
            continue
        t = ev.time if ev.time is not None else now
        storm = _storm(xids, ev, ctx) if service else 0
        inc = {"subject": "node", "code": None, "signal": f"hung in {'/'.join(in_driver)}: {name}"}
        key = held_key(inc)
        f = fresh.setdefault(key, {**inc, "task": name, "service": service, "count": 0, "first": None, "last": None,
                                   "action": Action.DRAIN_REBOOT.value, "storm": 0})
        f["count"] += 1
        f["storm"] = max(f["storm"], storm)
        f["first"], f["last"] = earliest(f["first"], t), latest(f["last"], t)
        f["last_message"] = ev.message[:200]
        new_counts[key] = new_counts.get(key, 0) + int(new)
    incidents = merge_held(list(fresh.values()), win.held(), new_counts)
    results = [_fail(i, ctx) for i in incidents] + results
    if not results:
        results.append(result(ID, Status.PASS, f"no task hung in the GPU driver in the last {window_s / 3600:g}h"))
    return CheckOutput(results, state=win.state(incidents))


def _storm(xids: list[KernelEvent], hung: KernelEvent, ctx: Context) -> int:
    """Xids of ``storm_codes`` within ``storm_window_s`` before the report, when ``storm_count``
    or more (else 0)."""
    codes = set(ctx.t("storm_codes") or [])
    span, least = float(ctx.t("storm_window_s", 3600.0)), int(ctx.t("storm_count", 5))
    if hung.time is None or not codes:
        return 0
    n = sum(1 for x in xids if x.code in codes and x.time is not None and 0 <= hung.time - x.time <= span)
    return n if n >= least else 0


def _fail(inc: dict, ctx: Context) -> Result:
    who = f"GPU service {inc['task']}" if inc.get("service") else f"task {inc['task']}"
    n = f" x{inc['count']}" if int(inc.get("count") or 1) > 1 else ""
    where = str(inc["signal"]).split(":", 1)[0]
    msg = f"{who} {where} for over the kernel's hung-task limit{n}: the GPU driver is wedged"
    if inc.get("storm"):
        msg += (f", after {inc['storm']} x Xid {'/'.join(map(str, ctx.t('storm_codes') or []))} (an Xid storm with "
                "a GPU service stuck in the driver)")
    value = {k: inc.get(k) for k in ("task", "count", "first", "last", "storm", "last_message")}
    return result(ID, Status.FAIL, msg, value=value, action=Action(inc["action"]), evidence="gpu-driver-hung")


def _warn(ev: KernelEvent, service: bool) -> Result:
    where = {None: "no stack in the log"}.get(ev.state, f"stack in {ev.state or 'the kernel'}")
    who = f"GPU service {ev.device}" if service else f"task {ev.device}"
    msg = f"{who} hung ({where}; not in the GPU driver): {ev.message[:160]}"
    value: dict[str, Any] = {"task": ev.device, "pid": ev.code, "stack": ev.state, "time": ev.time}
    return result(ID, Status.WARN, msg, value=value, evidence="stuck-process")


def _setting_errors(thresholds: dict[str, Any]) -> list[str]:
    errors = []
    for key in ("driver_modules", "gpu_services", "storm_codes"):
        v = thresholds.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, (str, int)) and not isinstance(x, bool)
                                                              for x in v)):
            errors.append(f"{key}: want a list, got {v!r}")
    return errors


CHECKS = [
    Check(
        id=ID,
        needs=(KERNEL_LOG,),
        judge=judge,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={"window_s": DEFAULT_WINDOW_S, "driver_modules": DRIVER_MODULES, "gpu_services": GPU_SERVICES,
                  "storm_codes": [45], "storm_count": 5, "storm_window_s": 3600.0},
        doc="The kernel's hung-task reports: a task stuck in the GPU driver fails (drain + reboot), any other warns.",
        validate=_setting_errors,
        acknowledge=acknowledge,
    )
]
