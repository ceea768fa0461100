"""nic-health: the ConnectX (mlx5) driver's own words about its NIC's firmware and health
(docs/checks.md, "nic-health"), from the kernel log (gpuhc/sources/node_reports.py).

- the firmware stopped (its health counter missed, a fatal error, a health issue of severity
  ERROR or worse, the health buffer's syndrome, a failed recovery, a command that timed out):
  FAIL, drain + hardware ticket, one result per PCI function. A NIC whose firmware is fatal
  takes the node out of every multi-node job, and the driver's recovery, when it works, comes
  back with a link the infiniband check judges. Held until a reboot, an admin's resume or
  ``window_s`` quiet. The infiniband check counts the port's downtime from it
  (gpuhc/checks/infiniband_downtime.py).
- too little power on the slot, a module or the adapter itself that runs hot (the firmware's
  temperature event often comes minutes before a health fault of the same cause), a transmit
  queue timed out, a health issue the firmware rates below ERROR: WARN once, on the run that
  first sees it.

Which states fail is ``gpuhc.model.kernel.NIC_FATAL``, the driver's own meaning, not a setting.
"""

from __future__ import annotations

from gpuhc.checks.base import KERNEL_LOG, Check, CheckOutput, Context, result
from gpuhc.checks.kernel_window import DEFAULT_WINDOW_S, acknowledge, add_incident, merge_held, open_window
from gpuhc.model.kernel import NIC_FATAL, EventKind, KernelEvent
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "nic-health"
_WHAT = {
    "miss_count": "firmware health counter stopped (device's health compromised)",
    "fatal_error": "fatal error detected",
    "health_issue": "firmware health issue (severity ERROR or worse)",
    "syndrome": "firmware health syndrome",
    "recovery_failed": "health recovery failed",
    "cmd_timeout": "firmware command timed out",
    "health_warning": "firmware health issue below ERROR",
    "slot_power": "insufficient power on the PCIe slot",
    "tx_timeout": "transmit queue timed out (NETDEV WATCHDOG)",
    "module_hot": "cable module high temperature",
    "nic_hot": "adapter high temperature (its own sensors)",
}


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    win = open_window(snapshot, ctx, ID)
    if isinstance(win, CheckOutput):
        return win
    klog, now, window_s = win.klog, win.now, win.window_s
    fresh: dict[tuple, dict] = {}
    new_counts: dict[tuple, int] = {}
    warns: dict[tuple, list[KernelEvent]] = {}
    for ev, new in win.events((EventKind.NIC_HEALTH, EventKind.IB_MODULE)):
        state = _state(ev)
        if state is None:
            continue
        subject = ev.pci or ev.device or "node"
        if state not in NIC_FATAL:
            if new:
                warns.setdefault((subject, state), []).append(ev)
            continue
        t = ev.time if ev.time is not None else now
        add_incident(fresh, new_counts, {"subject": subject, "code": None, "signal": "nic firmware"}, state, t,
                     ev.message, new, Action.DRAIN_TICKET.value)
    incidents = merge_held(list(fresh.values()), win.held(), new_counts)
    results: list[Result] = [_fail(i) for i in incidents]
    results += [_warn(s, state, evs) for (s, state), evs in sorted(warns.items())]
    if not results:
        results.append(result(ID, Status.PASS, f"no NIC firmware or health fault in the last {window_s / 3600:g}h"))
    return CheckOutput(results, state=win.state(incidents))


def _state(ev: KernelEvent) -> str | None:
    if ev.kind is EventKind.NIC_HEALTH:
        return ev.state
    # events.c's module event: the cable's own status words; a hot module warns (its
    # downtime is the infiniband check's, as for every cable error)
    return "module_hot" if ev.state == "Cable error" and "High Temperature" in ev.message else None


def _fail(inc: dict) -> Result:
    n = f" x{inc['count']}" if int(inc.get("count") or 1) > 1 else ""
    what = "; ".join(_WHAT.get(s, s) for s in inc.get("states") or [])
    msg = f"NIC {inc['subject']}: {what}{n} (mlx5 driver): the NIC is out of every multi-node job"
    value = {k: inc.get(k) for k in ("states", "count", "first", "last", "last_message")}
    return result(ID, Status.FAIL, msg, inc["subject"], value=value, action=Action(inc["action"]),
                  evidence="nic-firmware")


def _warn(subject: str, state: str, evs: list[KernelEvent]) -> Result:
    n = f" x{len(evs)}" if len(evs) > 1 else ""
    msg = f"NIC {subject}: {_WHAT.get(state, state)}{n}: {evs[-1].message[:160]}"
    return result(ID, Status.WARN, msg, subject, value={"state": state, "count": len(evs), "last": evs[-1].time},
                  evidence="nic-firmware")


CHECKS = [
    Check(
        id=ID,
        needs=(KERNEL_LOG,),
        judge=judge,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={"window_s": DEFAULT_WINDOW_S},
        doc="The mlx5 driver's health words: NIC firmware fatal fails (drain + hardware ticket); slot power, "
            "module or adapter temperature and TX time-outs warn.",
        acknowledge=acknowledge,
    )
]
