"""storage: the kernel's own words about the node's disks and its NFS mounts (docs/checks.md,
"storage"), from the kernel log (gpuhc/sources/kernel_log_storage.py).

- a local disk's fault: an md array member failed, an NVMe controller disabled after its reset
  failed, an I/O error on a local block device (the block
  layer's, a buffer's, a superblock write), a local file system gone read-only or shut down:
  FAIL, drain + hardware ticket, one result per device. A job's checkpoints and scratch are on
  it, and none of these cures itself (an array runs degraded, a disabled controller stays gone
  until a reset or reboot, a read-only file system until a person repairs it). Held until a
  reboot, an admin's resume or ``window_s`` quiet (class ``disk``, gpuhc/catalog/evidence.py).
- an NVMe command time-out: the driver resets the controller and retries; WARN once (a reset
  that fails prints the disabled line, which fails). An I/O error on a disk the kernel attached
  as removable (a USB stick, a BMC's virtual CD or floppy, which many GPU servers show at every
  boot): WARN once, never the node's disk.
- the environment, not this node's hardware: an NFS server that stopped answering and has not
  said ``OK`` since, I/O errors on a network or loop device, an NVMe namespace that lost every
  path (``no available path``: native multipath, which NVMe over fabrics uses; a local drive
  that is gone says ``Disabling device`` as well, which fails at once): FAIL of class ``remote-storage``,
  which drains only once held over runs (one server's hiccup never drains a partition); NFS lock
  reclaim failures (the server restarted and a lock was lost): WARN once.
"""

from __future__ import annotations

import re

from gpuhc.checks.base import CheckOutput, Context, result
from gpuhc.checks.kernel_window import add_incident, kernel_log_check, merge_held, open_window, warn_once
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "storage"
LOCAL_FAULTS = {
    "md_failed": "md array member failed",
    "nvme_disabled": "NVMe controller disabled after a failed reset",
    "io_error": "I/O error",
    "fs_readonly": "file system gone read-only or shut down",
}
_REMOTE = {"no_path": "NVMe namespace {dev} lost every path (I/O fails)"}
_WARNS = {"removable_io_error": "I/O error on a removable disk (a USB stick, a BMC's virtual media)",
          "nvme_timeout": "NVMe command timed out, controller reset", "lock_reclaim": "NFS lock reclaim failed"}


# Not the node's own disk: network block devices, loop files, RAM disks, optical drives.
_NOT_LOCAL = re.compile(r"(?:nbd|rbd|drbd|loop|ram|zram|sr|nfs)\d")


def local_device(dev: str | None) -> bool:
    """Is block device ``dev`` the node's own (not a network block device, a loop file...)?"""
    return bool(dev) and _NOT_LOCAL.match(dev or "") is None


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    win = open_window(snapshot, ctx, ID)
    if isinstance(win, CheckOutput):
        return win
    fresh: dict[tuple, dict] = {}
    new_counts: dict[tuple, int] = {}
    warns: dict[tuple, list[KernelEvent]] = {}
    servers: dict[str, KernelEvent] = {}  # NFS server -> its last word in the window
    remote: dict[str, list[KernelEvent]] = {}
    for ev, new in win.events((EventKind.STORAGE, EventKind.NFS)):
        state = ev.state or ""
        if ev.kind is EventKind.NFS:
            if state == "lock_reclaim":
                if new:
                    warns.setdefault(("node", state), []).append(ev)
            elif ev.device:
                servers[ev.device] = ev
            continue
        if state == "no_path":  # the fabric's target or its network, as often as the drive
            remote.setdefault(ev.device or "?", []).append(ev)
            continue
        if state not in LOCAL_FAULTS:
            if new:
                warns.setdefault((ev.device or "node", state), []).append(ev)
            continue
        if not local_device(ev.device):
            remote.setdefault(ev.device or "?", []).append(ev)
            continue
        t = ev.time if ev.time is not None else win.now
        add_incident(fresh, new_counts, {"subject": ev.device, "code": None, "signal": "local disk"}, state, t,
                     ev.message, new, Action.DRAIN_TICKET.value)
    incidents = merge_held(list(fresh.values()), win.held(), new_counts)
    results: list[Result] = [_fail(i) for i in incidents]
    results += [_environment(f"NFS server {s} not responding (no OK since)", s, ev)
                for s, ev in sorted(servers.items()) if ev.state == "not_responding"]
    results += [_environment(_REMOTE.get(evs[-1].state or "", "I/O errors on {dev} (not a local disk)").format(dev=dev)
                             + (f" x{len(evs)}" if len(evs) > 1 else ""), dev, evs[-1]) for dev, evs in sorted(remote.items())]
    results += [_warn(s, state, evs) for (s, state), evs in sorted(warns.items())]
    if not results:
        results.append(result(ID, Status.PASS, f"no disk, file-system or NFS fault in the last {win.window_s / 3600:g}h"))
    return CheckOutput(results, state=win.state(incidents))


def _fail(inc: dict) -> Result:
    n = f" x{inc['count']}" if int(inc.get("count") or 1) > 1 else ""
    what = "; ".join(LOCAL_FAULTS.get(s, s) for s in inc.get("states") or [])
    msg = f"local disk {inc['subject']}: {what}{n}: {str(inc.get('last_message') or '')[:160]}"
    value = {k: inc.get(k) for k in ("states", "count", "first", "last", "last_message")}
    return result(ID, Status.FAIL, msg, inc["subject"], value=value, action=Action(inc["action"]), evidence="disk")


def _environment(what: str, subject: str, ev: KernelEvent) -> Result:
    """Evidence of the storage around the node: a FAIL that drains only once held over runs."""
    return result(ID, Status.FAIL, f"{what}: {ev.message[:160]}", subject, value={"last": ev.time},
                  action=Action.DRAIN_TICKET, evidence="remote-storage")


def _warn(subject: str, state: str, evs: list[KernelEvent]) -> Result:
    evidence = "remote-storage" if state == "lock_reclaim" else "disk"
    return warn_once(ID, subject, f"{subject}: {_WARNS.get(state, state)}", evs, state, evidence)


CHECKS = [kernel_log_check(
    ID, judge, "The kernel's disk and NFS words: a local disk's fault fails (drain + hardware ticket); an NFS server "
    "not answering drains only once held; NVMe time-outs and lock reclaim failures warn.",
    ("passive", "prolog", "epilog", "bootstrap"))]
