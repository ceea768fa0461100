"""Xid incidents made of several kernel events, for the xid check (docs/checks.md, "xid").

Two rules, each about events the per-(GPU, code) grouping would judge one by one:

- **The RC watchdog and its Xid 8.** The driver's channel watchdog prints "GPU is probably
  locked!" with no GPU named and then runs its recovery, which logs an Xid 8 on the GPU
  (``kernel_rc_watchdog_callback.c``, open-gpu-kernel-modules 595.45.04). The two are one
  incident: the Xid names the GPU, and the lock-up's verdict is the one reported. Joined, the
  GPU is known, so the act is the ladder's GPU reset (the catalog's reset action, as for Xid
  48); a lock-up the reset does not cure goes on to the reboot rung. Alone, the watchdog names
  no GPU to reset and keeps the catalog's drain + reboot.
- **GSP time-outs on two GPUs of one node.** Xid 119 (GSP RPC time-out) and 120 (GSP error)
  wait for a repeat on one GPU (the catalog's ``drain_after``: the driver recovers from one).
  One on each of two GPUs within ``gsp_node_window_s`` is one node-level fault instead: the
  GSPs share the node's PCIe path and the driver's firmware load, and two firmware processors
  failing within a minute are rarely two separate accidents. It fails the node with a reboot
  (no single GPU's reset cures a shared path), held like any draining Xid.
"""

from __future__ import annotations

from dataclasses import replace

from gpuhc.checks.kernel_window import earliest, latest
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.result import Action

WATCHDOG_XID_S = 10.0  # the Xid 8 the RC watchdog's recovery logs comes within seconds
JOINED = " (then Xid 8)"  # marks a watchdog event joined with its Xid 8 (kept in the held incident)
WATCHDOG_JOINED_ACTION = Action.RESET_GPU

GSP_CODES = frozenset({119, 120})
# A minute: the driver waits 6 s per RPC (kernel_gsp.c's timeout) and a node whose GSPs share one
# fault prints their Xids within seconds of each other; two GPUs' time-outs an hour apart are
# two GPUs' own troubles, judged by drain_after on each.
DEFAULT_GSP_NODE_WINDOW_S = 60.0
GSP_NODE_ACTION = Action.DRAIN_REBOOT


def join_watchdog(events: list[tuple[KernelEvent, bool]]) -> list[tuple[KernelEvent, bool]]:
    """An RC watchdog lock-up and the Xid 8 right after it (same PCI id, or the watchdog names
    none) as one event: the watchdog's, with the Xid's PCI id and :data:`JOINED` in its text."""
    out = list(events)
    for i, (ev, new) in enumerate(out):
        if ev.kind is not EventKind.DRIVER or ev.state != "rc_watchdog":
            continue
        for j in range(i + 1, min(len(out), i + 6)):
            x = out[j][0]
            if x.kind is EventKind.XID and x.code == 8 and (ev.pci is None or x.pci == ev.pci) and (
                    ev.time is None or x.time is None or 0 <= x.time - ev.time <= WATCHDOG_XID_S):
                out[i] = (replace(ev, pci=ev.pci or x.pci, message=f"{ev.message}{JOINED}"), new)
                del out[j]
                break
    return out


def watchdog_joined(message: str | None) -> bool:
    return JOINED in str(message or "")


def gsp_node_incident(gsp: list[tuple[str, KernelEvent, bool]], window_s: float) -> list[dict]:
    """The node-level incident (a list of none or one) of GSP time-outs (``(subject, event,
    new)``: Xid 119/120 attributed to a GPU or a PCI id, as the xid check does) on two or more
    GPUs within ``window_s`` of each other; the run with the most events wins. An event without a
    time cannot be placed and never counts; one subject's repeats are its own (``drain_after``)."""
    dated = sorted(((ev.time, subject, ev, new) for subject, ev, new in gsp if ev.time is not None),
                   key=lambda x: x[0])
    best: list | None = None
    start = 0
    for end in range(len(dated)):
        while dated[end][0] - dated[start][0] > window_s:
            start += 1
        run = dated[start:end + 1]
        if len({s for _t, s, _e, _n in run}) >= 2 and (best is None or len(run) > len(best)):
            best = run
    if best is None:
        return []
    subjects = sorted({s for _t, s, _e, _n in best})
    codes = sorted({ev.code for _t, _s, ev, _n in best if ev.code is not None})
    first = last = None
    for t, _s, _e, _n in best:
        first, last = earliest(first, t), latest(last, t)
    name = (f"GSP time-outs on {len(subjects)} GPUs within {window_s:g} s ({', '.join(subjects)}): "
            "one node-level fault")
    return [{"subject": "node", "code": codes[0], "pci": None, "gpu": None, "count": len(best),
            "new": sum(int(n) for _t, _s, _e, n in best), "first": first, "last": last,
            "action": GSP_NODE_ACTION.value, "xid": True, "name": name, "gsp_node": subjects,
            "last_message": best[-1][2].message[:200]}]


def setting_errors(value, check_window_s: float) -> list[str]:
    """``gsp_node_window_s``: seconds > 0, at most the check's own window."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= check_window_s:
        return [f"gsp_node_window_s: want seconds > 0 and at most the check's window_s ({check_window_s:g}), "
                f"got {value!r}"]
    return []
