"""The kernel-log event window shared by the kernel-log checks (xid, nvswitch, pcie-aer,
hung-task, nic-health): which events a run judges, and what it remembers for the next run.

Which events count. Each run sees the whole kernel log still in the ring buffer. An event is
*new* when it is past the cursor the previous run left in ``ctx.prev`` (kmsg sequence number,
else time; everything is new on the first run or after a reboot, i.e. a changed boot id). An
event is *in the window* when it is younger than ``window_s`` at judging time. Draining
incidents are also remembered ("held"), so a ring buffer that wraps (or a log file that
rotates) does not forget them; a reboot or :func:`acknowledge` lets them go.
"""

from __future__ import annotations

from typing import Any, Iterable

from gpuhc.text.limits import RELATIVE_LIMIT
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from gpuhc.model.snapshot import Snapshot

DEFAULT_WINDOW_S = 86400.0


def open_window(snapshot: Snapshot, ctx: Any, check_id: str, default_s: float = DEFAULT_WINDOW_S) -> "EventWindow | Any":
    """The start every kernel-log check makes: this run's window (``ctx``'s ``window_s``, the
    previous run's state), or the check's ERROR output when the log was not read."""
    from gpuhc.checks.base import CheckOutput, result
    from gpuhc.model.result import Status

    if snapshot.kernel is None:
        return CheckOutput([result(check_id, Status.ERROR, "kernel log was not read")])
    return EventWindow(snapshot.kernel, judge_now(snapshot), float(ctx.t("window_s", default_s)), ctx.prev)


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
    unparsed, unread}, "held": [incident, ...], "cleared_at": epoch|None}``. Events with neither
    time nor sequence number (bare lines in a recorded file) cannot be windowed: they count only
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
        return t >= self.now_for(t) - self.window_s  # a line from the future (clock skew) counts

    def now_for(self, t: float) -> float:
        """"Now" on the clock that time ``t`` counts on (see the class doc)."""
        return self._now.get(clock_of(t), self.now)

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

    def grew(self, key: str, count: int) -> int:
        """How far a count of the read's own (``unparsed``, ``unread`` lines) grew past the one
        the cursor kept: all of it on the first run or after a reboot."""
        before = 0 if (self.first_run or self.rebooted) else int(self.cursor.get(key) or 0)
        return max(0, count - before)

    def lost(self) -> int:
        """/dev/kmsg records lost before gpuhc read them: overwritten in the ring buffer between
        the previous run's last record and the oldest one still there (same boot), or while this
        read went on. Users can print unthrottled kernel lines and push a real Xid out of the
        buffer before the next run: that must be said, not passed over (docs/security.md)."""
        lost = self.klog.seq_lost
        last, first = self.cursor.get("last_seq"), self.klog.first_seq
        if not (self.first_run or self.rebooted) and isinstance(last, int) and first is not None and first > last + 1:
            lost += first - last - 1
        return lost

    def state(self, held: list[dict], **extra: Any) -> dict[str, Any]:
        untimed = sum(1 for e in self.klog.events if e.time is None and e.seq is None)
        cursor = {"boot_id": self.klog.boot_id, "last_seq": self.klog.last_seq, "last_time": self.klog.last_time,
                  "last_times": latest_per_clock(self.klog), "untimed": untimed, "unparsed": self.klog.unparsed_lines,
                  "unread": self.klog.unread_lines}
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
    """Draining incidents of this run joined with those remembered: the same (subject, code,
    signal) adds the new events to the remembered count; remembered ones not in the log any
    more stay. ``new_counts`` is keyed like :func:`held_key`."""
    by_key = {held_key(h): dict(h) for h in held}
    for f in fresh:
        key = held_key(f)
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


def held_key(incident: dict) -> tuple:
    """(subject, code) for an Xid or SXid; a driver signal without an Xid adds its name."""
    if incident.get("signal"):
        return (incident["subject"], incident.get("code"), incident["signal"])
    return (incident["subject"], incident["code"])


def earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def latest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def validate_corrected(t: dict[str, Any]) -> list[str]:
    """The corrected-error rate thresholds of the host's kernel-log checks (pcie-aer,
    machine-check): each a whole number of errors, or null for off."""
    out = []
    for key in ("corrected_warn", "corrected_fail"):
        v = t.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            out.append(f"{key}: want a whole number of errors >= 1, or null (off), got {v!r}")
    return out


def add_incident(fresh: dict[tuple, dict], new_counts: dict[tuple, int], inc: dict, state: str, t: float,
                 message: str, new: bool, action: str) -> None:
    """Count one event toward its draining incident of this run (``inc``: subject, code, signal),
    keyed like :func:`held_key`: the states it showed, how many, first and last, its last line."""
    key = held_key(inc)
    f = fresh.setdefault(key, {**inc, "states": [], "count": 0, "first": None, "last": None, "action": action})
    if state not in f["states"]:
        f["states"].append(state)
    f["count"] += 1
    f["first"], f["last"] = earliest(f["first"], t), latest(f["last"], t)
    f["last_message"] = message[:200]
    new_counts[key] = new_counts.get(key, 0) + int(new)


def warn_once(check_id: str, subject: str, text: str, evs: list[KernelEvent], state: str,
              evidence: str) -> Any:
    """The WARN a kernel-log check gives, once, for new events of one kind: ``text`` names them,
    the last event's line follows."""
    from gpuhc.checks.base import result
    from gpuhc.model.result import Status

    n = f" x{len(evs)}" if len(evs) > 1 else ""
    return result(check_id, Status.WARN, f"{text}{n}: {evs[-1].message[:160]}", subject,
                  value={"state": state, "count": len(evs), "last": evs[-1].time}, evidence=evidence)


def kernel_log_check(check_id: str, judge: Any, doc: str, stages: tuple[str, ...], held: bool = True) -> Any:
    """The declaration every kernel-log check shares: it needs the kernel log, judges it within
    ``window_s`` (a day), and, when it holds draining incidents, lets an operator acknowledge them."""
    from gpuhc.checks.base import KERNEL_LOG, Check

    return Check(id=check_id, needs=(KERNEL_LOG,), judge=judge, stages=stages, timeout_s=10.0,
                 defaults={"window_s": DEFAULT_WINDOW_S}, doc=doc, acknowledge=acknowledge if held else None)
