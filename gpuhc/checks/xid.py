"""xid: NVIDIA driver Xid errors (and fallen-off-the-bus messages) from the kernel log.

Which events count. Each run sees the whole kernel log still in the ring buffer. An event is
*new* when it is past the cursor the previous run left in ``ctx.prev`` (kmsg sequence number,
else time; everything is new on the first run or after a reboot, i.e. a changed boot id). An
event is *in the window* when it is younger than ``window_s`` (default 24 h) at judging time.

What is reported:
- draining Xids (catalog severity ``fail``, e.g. 48, 79, 95, 119) FAIL on every run while they
  are in the window, new or not. That is what keeps a node drained: if the check passed on the
  next run, the drain policy would resume a node that still needs its reset. They are also
  remembered in the check's state ("held"), so a ring buffer that wraps (or a log file that
  rotates) does not forget them. A reboot clears them (the fix for most; a GPU that fell off
  the bus and stays gone is the gpu_count check's to catch), as does :func:`acknowledge` after
  a GPU reset that did not reboot the node, and an Xid 154 whose recovery action is "None".
- warning Xids (application errors such as 13, 31, 43; contained ECC 94; unknown codes) WARN
  once, on the run that first sees them, with action "restart app" or none. They never drain.
- one result per (GPU, Xid) with a count: a storm of 600 identical lines is one result.

Attribution: the PCI id in the line is matched against NVML's GPUs (subject ``gpuN``). An Xid
on a PCI id NVML does not list (the GPU fell off the bus, the driver lost it) is reported with
the PCI id as subject and keeps its severity. In the prolog (``ctx.gpus`` set) only the job's
GPUs are judged, but unattributed draining Xids always are: nobody can tell whose GPU it was.

The event-window helper below is shared with the nvswitch check (SXids use the same rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from gpuhc.checks.base import KERNEL_LOG, NVML, Check, CheckOutput, Context, result
from gpuhc.model import Action, EventKind, GpuReading, KernelEvent, KernelLog, Result, Snapshot, Status, norm_pci
from gpuhc.sources.kernel_log_parse import RELATIVE_LIMIT
from gpuhc.xid_catalog import recovery_action, xid_info

ID = "xid"
DEFAULT_WINDOW_S = 86400.0


# ---------------------------------------------------------------------- shared event window


def judge_now(snapshot: Snapshot) -> float:
    """The time events are windowed against: the snapshot's, unless the log counts seconds
    since boot (a recorded plain ``dmesg``), in which case its last line is "now"."""
    k = snapshot.kernel
    if k is not None and k.last_time is not None and k.last_time < RELATIVE_LIMIT <= snapshot.time:
        return k.last_time
    return snapshot.time


def clock_of(t: float) -> str:
    """The clock a kernel-log time counts on: seconds since boot (a recorded plain ``dmesg``,
    kept as is) or the epoch (see :mod:`gpuhc.sources.kernel_log_parse`)."""
    return "since_boot" if t < RELATIVE_LIMIT else "epoch"


def latest_per_clock(klog: KernelLog) -> dict[str, float]:
    """The latest time the log shows on each clock (events and its last line)."""
    out: dict[str, float] = {}
    times = [e.time for e in klog.events if e.time is not None]
    if klog.last_time is not None:
        times.append(klog.last_time)
    for t in times:
        c = clock_of(t)
        if t > out.get(c, float("-inf")):
            out[c] = t
    return out


class EventWindow:
    """Which kernel events a run judges, and the state it leaves for the next run.

    State layout (JSON): ``{"cursor": {boot_id, last_seq, last_time, last_times, untimed,
    unparsed}, "held": [incident, ...], "cleared_at": epoch|None}``. Events with neither time
    nor sequence number (bare lines in a recorded file) cannot be windowed: they count only
    while new.

    Two clocks. A recorded file may mix since-boot stamps (``[ 123.4]``) with wall-clock ones (a
    log pasted together from two tools). Their times cannot be compared, so the cursor keeps the
    latest time per clock (``last_times``) and an event is new only against its own clock; a
    single cursor made every wall-clock event "new" again on each run when the file ended on a
    since-boot line, and the held count grew by one per run. The window likewise measures an
    event against "now" on its own clock: the run's now on that clock, else the log's latest
    time on it."""

    def __init__(self, klog: KernelLog, now: float, window_s: float, prev: dict[str, Any] | None):
        self.klog, self.now, self.window_s = klog, now, window_s
        prev = prev or {}
        self.cursor: dict[str, Any] = prev.get("cursor") or {}
        self.first_run = not self.cursor
        old_boot = self.cursor.get("boot_id")
        self.rebooted = bool(old_boot and klog.boot_id and old_boot != klog.boot_id)
        self.cleared_at: float | None = None if self.rebooted else prev.get("cleared_at")
        self._held: list[dict] = [] if self.rebooted else list(prev.get("held") or [])
        self._seen = _cursor_times(self.cursor)
        self._now = {**latest_per_clock(klog), clock_of(now): now}

    def is_new(self, ev: KernelEvent, untimed_index: int) -> bool:
        cur = self.cursor
        if self.first_run or self.rebooted:
            return True
        if ev.seq is not None and cur.get("last_seq") is not None:
            return ev.seq > cur["last_seq"]
        if ev.time is not None:
            last = self._seen.get(clock_of(ev.time))
            return last is None or ev.time > last  # no time on this clock seen before: new
        if ev.seq is None:
            return untimed_index >= int(cur.get("untimed") or 0)
        return True

    def in_window(self, t: float | None, new: bool) -> bool:
        if t is None:
            return new
        if self.cleared_at is not None and t <= self.cleared_at:
            return False
        now = self._now.get(clock_of(t), self.now)
        return t >= now - self.window_s  # a line from the future (clock skew) counts

    def events(self, kinds: Iterable[EventKind]) -> list[tuple[KernelEvent, bool]]:
        """(event, is_new) for every event of ``kinds`` inside the window, oldest first."""
        kinds = set(kinds)
        out: list[tuple[KernelEvent, bool]] = []
        untimed = 0
        for ev in self.klog.events:
            idx = untimed
            if ev.time is None and ev.seq is None:
                untimed += 1
            if ev.kind not in kinds:
                continue
            new = self.is_new(ev, idx)
            if self.in_window(ev.time, new):
                out.append((ev, new))
        return out

    def held(self) -> list[dict]:
        """Draining incidents remembered from earlier runs that still hold."""
        return [h for h in self._held if self.in_window(h.get("last"), True)]

    def unparsed_grew(self) -> int:
        before = 0 if (self.first_run or self.rebooted) else int(self.cursor.get("unparsed") or 0)
        return max(0, self.klog.unparsed_lines - before)

    def state(self, held: list[dict], **extra: Any) -> dict[str, Any]:
        untimed = sum(1 for e in self.klog.events if e.time is None and e.seq is None)
        cursor = {"boot_id": self.klog.boot_id, "last_seq": self.klog.last_seq, "last_time": self.klog.last_time,
                  "last_times": latest_per_clock(self.klog), "untimed": untimed, "unparsed": self.klog.unparsed_lines}
        return {"cursor": cursor, "held": held, "cleared_at": self.cleared_at, **extra}


def _cursor_times(cursor: dict[str, Any]) -> dict[str, float]:
    """The cursor's latest time per clock; a cursor written before the clocks were told apart
    has only ``last_time``, which stands for its own clock."""
    times = cursor.get("last_times")
    if isinstance(times, dict):
        return {k: float(v) for k, v in times.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    last = cursor.get("last_time")
    if isinstance(last, (int, float)) and not isinstance(last, bool):
        return {clock_of(float(last)): float(last)}
    return {}


def acknowledge(state: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The check state after an operator fixed the cause without rebooting (e.g. a GPU reset):
    held incidents are dropped and log events up to ``now`` no longer count. For the
    resume/quarantine tooling; works on the xid and nvswitch state alike."""
    new = dict(state or {})
    new["held"] = []
    new["cleared_at"] = now
    return new


def merge_held(fresh: list[dict], held: list[dict], new_counts: dict[tuple, int]) -> list[dict]:
    """Draining incidents of this run joined with those remembered: same (subject, code) adds
    the new events to the remembered count; remembered ones not in the log any more stay."""
    by_key = {(h["subject"], h["code"]): dict(h) for h in held}
    for f in fresh:
        key = (f["subject"], f["code"])
        h = by_key.get(key)
        if h is None:
            by_key[key] = f
            continue
        f = dict(f)
        f["count"] = max(f["count"], int(h.get("count") or 0) + new_counts.get(key, 0))
        f["first"] = earliest(f.get("first"), h.get("first"))
        f["last"] = latest(f.get("last"), h.get("last"))
        by_key[key] = f
    return list(by_key.values())


def earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def latest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


# ---------------------------------------------------------------------- the xid check


@dataclass
class _Group:
    subject: str
    code: int
    pci: str | None
    gpu: int | None
    count: int = 0
    new: int = 0
    first: float | None = None
    last: float | None = None
    last_message: str = ""
    saw_xid: bool = False  # False: only "fallen off the bus" messages, no Xid line

    def add(self, ev: KernelEvent, new: bool, now: float) -> None:
        t = ev.time if ev.time is not None else now
        self.count += 1
        self.new += int(new)
        self.first, self.last = earliest(self.first, t), latest(self.last, t)
        self.last_message = ev.message[:200]
        self.saw_xid = self.saw_xid or ev.kind is EventKind.XID


def _verdict(code: int, ctx: Context, last_message: str) -> tuple[str, Action]:
    """(severity, action) for an Xid after the config's overrides."""
    info = xid_info(code)
    severity, action = info.severity, info.action
    if not info.known and ctx.t("unknown", "warn") == "fail":
        severity, action = "fail", Action.DRAIN_REBOOT
    overrides = {str(k): v for k, v in (ctx.t("severity_overrides") or {}).items()}
    wanted = overrides.get(str(code))
    if wanted in ("fail", "warn", "ignore"):
        severity = wanted
        if severity == "fail" and not action.drains:
            action = Action.DRAIN_REBOOT
        if severity == "warn" and action.drains:
            action = Action.NONE
    if code == 154 and severity == "fail":
        asked = recovery_action(last_message)
        if asked is Action.NONE:
            return "ignore", Action.NONE
        if asked is not None:
            action = asked
    return severity, action


def _setting_errors(ctx: Context) -> list[str]:
    """Threshold values the config schema cannot check; reported as ERROR (never a drain)."""
    errors = []
    if ctx.t("unknown", "warn") not in ("warn", "fail"):
        errors.append(f"unknown: must be warn or fail, got {ctx.t('unknown')!r}")
    for key, value in (ctx.t("severity_overrides") or {}).items():
        if not str(key).isdigit() or value not in ("fail", "warn", "ignore"):
            errors.append(f"severity_overrides.{key}: want an Xid number mapped to fail, warn or ignore, got {value!r}")
    return errors


def _where(subject: str, pci: str | None) -> str:
    return f"{subject} ({pci})" if pci and subject != pci else subject


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    klog = snapshot.kernel
    if klog is None:
        return CheckOutput([result(ID, Status.ERROR, "kernel log was not read")])
    now = judge_now(snapshot)
    window_s = float(ctx.t("window_s", DEFAULT_WINDOW_S))
    win = EventWindow(klog, now, window_s, ctx.prev)
    gpus = _gpus_by_pci(snapshot)

    events = win.events((EventKind.XID, EventKind.FALLEN_OFF_BUS))
    recovered = _recovered(events, gpus)
    groups: dict[tuple[str, int], _Group] = {}
    for ev, new in events:
        pci = norm_pci(ev.pci) if ev.pci else None
        gpu = gpus.get(pci) if pci else None
        subject = gpu.subject if gpu else (pci or "node")
        if subject in recovered and ev.time is not None and ev.time <= recovered[subject]:
            continue
        code = ev.code or 79  # a fallen-off-bus message is an Xid 79 without the number
        g = groups.setdefault((subject, code), _Group(subject, code, pci, gpu.index if gpu else None))
        g.add(ev, new, now)

    results: list[Result] = [result(ID, Status.ERROR, f"checks.xid.thresholds.{why}") for why in _setting_errors(ctx)]
    fresh: list[dict] = []
    for g in groups.values():
        severity, action = _verdict(g.code, ctx, g.last_message)
        if severity == "fail":
            fresh.append({"subject": g.subject, "code": g.code, "pci": g.pci, "gpu": g.gpu, "count": g.count,
                          "first": g.first, "last": g.last, "action": action.value, "xid": g.saw_xid,
                          "last_message": g.last_message})
        elif severity == "warn" and g.new and _selected(g.gpu, False, ctx):
            results.append(_warn(g, ctx))
    held = [h for h in win.held() if not (h["subject"] in recovered and (h.get("last") or 0) <= recovered[h["subject"]])]
    new_counts = {k: g.new for k, g in groups.items()}
    incidents = merge_held(fresh, held, new_counts)
    for inc in incidents:
        if _selected(inc.get("gpu"), True, ctx):
            results.append(_fail(inc))
    grew = win.unparsed_grew()
    if grew:
        results.append(result(ID, Status.WARN, f"{grew} kernel log line(s) look like Xid reports but did not parse "
                              "(new driver format?)", value=klog.unparsed_lines))
    if not results:
        results.append(result(ID, Status.PASS, _pass_message(groups, window_s), value=len(events)))
    results.sort(key=lambda r: (-r.status.rank, r.subject))
    return CheckOutput(results, state=win.state(incidents))


def _gpus_by_pci(snapshot: Snapshot) -> dict[str, GpuReading]:
    """NVML's GPUs by normalised PCI id (built once: a storm has thousands of events)."""
    nvml = snapshot.nvml
    if nvml is None or not nvml.available:
        return {}
    return {norm_pci(g.pci_bus_id): g for g in nvml.gpus}


def _recovered(events: list[tuple[KernelEvent, bool]], gpus: dict[str, GpuReading]) -> dict[str, float]:
    """GPUs whose latest Xid 154 says "recovery action: None": the driver declares them healed."""
    last154: dict[str, KernelEvent] = {}
    for ev, _new in events:
        if ev.kind is EventKind.XID and ev.code == 154 and ev.time is not None:
            gpu = gpus.get(norm_pci(ev.pci)) if ev.pci else None
            last154[gpu.subject if gpu else norm_pci(ev.pci or "node")] = ev
    return {s: ev.time for s, ev in last154.items() if recovery_action(ev.message) is Action.NONE}


def _selected(gpu: int | None, draining: bool, ctx: Context) -> bool:
    if ctx.gpus is None:
        return True
    if gpu is None:
        return draining  # unattributed: only the draining ones, they may be anyone's GPU
    return gpu in ctx.gpus


def _count(n: int) -> str:
    return f" x{n}" if n > 1 else ""


def _fail(inc: dict) -> Result:
    code = int(inc["code"])
    info = xid_info(code)
    where, n = _where(inc["subject"], inc.get("pci")), _count(int(inc["count"]))
    if inc.get("xid", True):
        msg = f"Xid {code} on {where}{n}: {info.name}"
    else:  # the driver printed no Xid, only the multi-line "fallen off the bus" message
        msg = f"{where} has fallen off the bus{n} (no Xid logged)"
    value = {k: inc.get(k) for k in ("code", "count", "first", "last", "pci", "last_message")}
    return result(ID, Status.FAIL, msg, inc["subject"], value=value, action=Action(inc["action"]))


def _warn(g: _Group, ctx: Context) -> Result:
    info = xid_info(g.code)
    severity, action = _verdict(g.code, ctx, g.last_message)
    kind = " (application error)" if info.app else "" if info.known else " (unknown Xid)"
    msg = f"Xid {g.code} on {_where(g.subject, g.pci)}{_count(g.count)}: {info.name}{kind}"
    value = {"code": g.code, "count": g.count, "new": g.new, "first": g.first, "last": g.last, "pci": g.pci,
             "last_message": g.last_message}
    return result(ID, Status.WARN, msg, g.subject, value=value, action=action)


def _pass_message(groups: dict, window_s: float) -> str:
    span = f"{window_s / 3600:g}h"
    if not groups:
        return f"no Xid in the last {span}"
    n = sum(g.count for g in groups.values())
    return f"no new Xid needing action ({n} older warning event(s) in the last {span})"


CHECKS = [
    Check(
        id=ID,
        needs=(KERNEL_LOG,),
        optional=(NVML,),  # GPU attribution; without it Xids are reported by PCI id
        judge=judge,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={"window_s": DEFAULT_WINDOW_S, "unknown": "warn", "severity_overrides": {}},
        doc="NVIDIA Xid errors in the kernel log: draining ones fail until reboot, application ones warn once.",
        validate=lambda thresholds: _setting_errors(Context(thresholds=thresholds)),
    )
]
