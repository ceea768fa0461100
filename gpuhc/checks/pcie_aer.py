"""pcie-aer: PCIe Advanced Error Reporting from the kernel log, on the devices a GPU job needs.

The pcie check judges each GPU's own AER counters in sysfs; this check reads what the kernel
said, which also covers the bridges above a GPU (a root port whose link failed takes its GPU
with it, and the GPU's own counters may never be read again) and the reports the nvidia driver
cannot act on: it registers no PCIe error handler, so the kernel prints "can't recover (no
error_detected callback)" for the GPU and the port's "device recovery failed" (docs/checks.md,
"pcie-aer"). The events are the kernel's own lines only (gpuhc/sources/kernel_log_host.py).

Which devices count ("watched"): the GPUs, NVSwitches and NICs, and every bridge above one, as
the host source walked them up sysfs (``host.pci_watch``); NVML's GPUs; a device whose line names
the nvidia, nvidia-nvswitch or mlx5_core driver. Without sysfs (a replayed log) the last two still
name the GPU itself.

- an uncorrected fatal error or a failed recovery on a watched device FAILs with drain +
  reboot, held like an Xid (gpuhc/checks/kernel_window.py) until a reboot, an admin's resume or
  ``window_s`` without another. On another device it WARNs once: the node's business, not a GPU
  job's.
- corrected errors, and uncorrected non-fatal ones the kernel recovered from (a recovery that
  failed says so in its own line, above), are counted per device inside
  ``corrected_window_s``: WARN at ``corrected_warn``, and at ``corrected_fail`` when set a FAIL
  (drain + hardware ticket) that drains only once held over runs (evidence class
  ``aer-corrected``, gpuhc/catalog/evidence.py): a link that replays is a rate, not an event, and one
  recovered error on a NIC is no reason to take a busy node out. The kernel
  rate-limits these lines, so a count read from the log is a floor.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import HOST, KERNEL_LOG, NVML, Check, CheckOutput, Context, reads_host, result
from gpuhc.checks.kernel_window import DEFAULT_WINDOW_S, acknowledge, earliest, held_key, latest, merge_held, open_window, validate_corrected
from gpuhc.model.kernel import EventKind
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "pcie-aer"
UNCORRECTED = ("fatal", "recovery_failed")  # each one drains
RATE = ("corrected", "nonfatal")  # counted: recovered, no data lost (a failed recovery has its own line)
_DRIVER_ROLE = {"nvidia": "GPU", "nvidia-nvswitch": "NVSwitch", "mlx5_core": "NIC"}
_ROLE = {"gpu": "GPU", "nvswitch": "NVSwitch", "nic": "NIC"}
PORT_FOLLOWS_S = 5.0  # a port's "device recovery failed" this soon after a watched device's is the port above it
_WORDS = {"fatal": "uncorrected (fatal) error", "nonfatal": "uncorrected (non-fatal) error",
          "recovery_failed": "failed error recovery"}


def watched(snapshot: Snapshot) -> dict[str, str]:
    """PCI id -> what it is to a job ("gpu0", "NIC", "bridge above gpu0"), see the module doc.
    A watched device's other PCI functions (a GPU's audio function) are the same card."""
    out: dict[str, str] = {}
    gpus = {}
    if snapshot.nvml is not None and snapshot.nvml.available:
        gpus = {norm_pci(g.pci_bus_id): g.subject for g in snapshot.nvml.gpus if g.pci_bus_id}
    out.update(gpus)
    host = snapshot.host
    for pci, info in ((host.pci_watch or {}) if host else {}).items():
        info = info if isinstance(info, dict) else {}
        out.setdefault(norm_pci(pci), gpus.get(norm_pci(pci)) or _ROLE.get(str(info.get("role")), "device"))
        for bridge in info.get("upstream") or []:
            out.setdefault(norm_pci(str(bridge)), f"bridge above {_name(norm_pci(pci), out)}")
    events = [e for e in (snapshot.kernel.events if snapshot.kernel else []) if e.kind is EventKind.AER and e.pci]
    for ev in events:
        role = _DRIVER_ROLE.get((ev.device or "").split(" ", 1)[0])
        if role:
            out.setdefault(norm_pci(ev.pci), role)
    cards = {p[:-2]: p for p in out if not out[p].startswith("bridge")}
    for ev in events:
        pci = norm_pci(ev.pci)
        if pci not in out and pci[:-2] in cards:
            out[pci] = f"function of {_name(cards[pci[:-2]], out)}"
    _ports_above(events, out)
    return out


def _name(pci: str, watch: dict[str, str]) -> str:
    what = watch.get(pci, "device")
    return what if what.startswith("gpu") else f"{what} {pci}"


def _ports_above(events: list, out: dict[str, str]) -> None:
    """A port whose recovery failed right after a watched device's own: the kernel recovers a
    port with everything under it, so it is the port above that device (no sysfs needed)."""
    last: tuple[float | None, str] | None = None
    for ev in events:
        pci = norm_pci(ev.pci)
        if ev.state != "recovery_failed":
            continue
        if pci in out and not out[pci].startswith(("bridge", "function")):
            last = (ev.time, pci)
        elif pci in out:
            continue
        elif last and (ev.device or "").startswith("pcieport ") and pci not in out and (
                ev.time is None or last[0] is None or 0 <= ev.time - last[0] <= PORT_FOLLOWS_S):
            out[pci] = f"bridge above {_name(last[1], out)}"


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    win = open_window(snapshot, ctx, ID)
    if isinstance(win, CheckOutput):
        return win
    klog, now, window_s = win.klog, win.now, win.window_s
    watch = watched(snapshot)
    fresh: dict[tuple, dict] = {}
    new_counts: dict[tuple, int] = {}
    warned: dict[str, dict] = {}
    corrected: dict[str, list[float]] = {}
    for ev, new in win.events((EventKind.AER,)):
        pci = norm_pci(ev.pci) if ev.pci else "unknown"
        t = ev.time if ev.time is not None else now
        if ev.state in RATE:
            corrected.setdefault(pci, []).append(t)
            continue
        if pci not in watch:
            if new:
                w = warned.setdefault(pci, {"count": 0, "last_message": ev.message})
                w["count"] += 1
            continue
        subject = watch[pci] if watch[pci].startswith("gpu") else pci
        inc = {"subject": subject, "code": None, "signal": ev.state, "pci": pci, "what": watch[pci]}
        key = held_key(inc)
        f = fresh.setdefault(key, {**inc, "count": 0, "first": None, "last": None, "action": Action.DRAIN_REBOOT.value})
        f["count"] += 1
        f["first"], f["last"] = earliest(f["first"], t), latest(f["last"], t)
        f["last_message"] = ev.message[:200]
        new_counts[key] = new_counts.get(key, 0) + int(new)
    incidents = merge_held(list(fresh.values()), win.held(), new_counts)
    results = [_fail(inc) for inc in incidents if _selected(inc, ctx)]
    results += [result(ID, Status.WARN, f"PCIe AER uncorrected error on {pci} x{w['count']}, a device no GPU job "
                       f"needs (a disk or another card): the node's to look at", pci,
                       value={"count": w["count"], "last_message": w["last_message"]}) for pci, w in warned.items()]
    results += _corrected(corrected, watch, now, ctx)
    if not results:
        results.append(result(ID, Status.PASS, f"no PCIe AER error needing action in the last {window_s / 3600:g}h",
                              value=sum(len(v) for v in corrected.values())))
    results.sort(key=lambda r: (-r.status.rank, r.subject))
    return CheckOutput(results, state=win.state(incidents))


def _corrected(seen: dict[str, list[float]], watch: dict[str, str], now: float, ctx: Context) -> list:
    span = float(ctx.t("corrected_window_s", 3600.0))
    warn, fail = ctx.t("corrected_warn"), ctx.t("corrected_fail")
    out = []
    for pci, times in sorted(seen.items()):
        n = sum(1 for t in times if t >= now - span)
        what = f" ({watch[pci]})" if pci in watch else ""
        text = f"{pci}{what}: {n} corrected or recovered PCIe AER error(s) in the last {span / 3600:g}h"
        if fail and n >= fail and pci in watch:
            out.append(result(ID, Status.FAIL, f"{text} (limit {fail})", pci, value=n, threshold=fail,
                              action=Action.DRAIN_TICKET, evidence="aer-corrected"))
        elif warn and n >= warn:
            out.append(result(ID, Status.WARN, f"{text} (warn at {warn})", pci, value=n, threshold=warn,
                              evidence="aer-corrected"))
    return out


def _selected(inc: dict, ctx: Context) -> bool:
    """The prolog judges its job's GPUs; a bridge or a NIC may be anyone's, so it always counts."""
    if ctx.gpus is None or not str(inc["subject"]).startswith("gpu"):
        return True
    return int(str(inc["subject"])[3:]) in ctx.gpus


def _fail(inc: dict) -> Any:
    what = inc.get("what") or inc["subject"]
    where = f"{what} ({inc['pci']})" if what == inc["subject"] else f"{inc['pci']} ({what})"
    n = f" x{inc['count']}" if int(inc.get("count") or 1) > 1 else ""
    msg = f"PCIe AER {_WORDS.get(inc['signal'], inc['signal'])} on {where}{n}"
    value = {k: inc.get(k) for k in ("count", "first", "last", "pci", "last_message")}
    return result(ID, Status.FAIL, msg, inc["subject"], value=value, action=Action(inc["action"]))


CHECKS = [
    Check(
        id=ID,
        needs=(KERNEL_LOG,),
        optional=(NVML, HOST),  # GPU names and the bridges above each device; judged without them
        source_needs=reads_host,  # the devices a job needs and the bridges above them
        judge=judge,
        stages=("passive", "epilog", "bootstrap"),  # not the prolog: the sysfs walk is the health check's
        timeout_s=10.0,
        defaults={
            "window_s": DEFAULT_WINDOW_S,  # as the xid check: a held failure ends at a reboot or resume
            # Chosen here: a healthy link logs none or a few corrected errors a day (the healthy
            # fixtures in tests/fixtures/host/); ten in an hour on one device is a link that
            # retrains or replays all the time. No FAIL by default: corrected means no data lost.
            "corrected_window_s": 3600.0,
            "corrected_warn": 10,
            "corrected_fail": None,
        },
        doc="PCIe AER from the kernel log on GPUs, NVSwitches, NICs and the bridges above them: fatal errors and "
            "failed recovery fail (drain + reboot); corrected and recovered non-fatal errors judged as a rate.",
        validate=validate_corrected,
        acknowledge=acknowledge,
    )
]
