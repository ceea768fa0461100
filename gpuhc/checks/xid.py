"""xid: NVIDIA driver Xid errors, fallen-off-the-bus messages and driver signals without an Xid,
from the kernel log.

Which events count: :mod:`gpuhc.checks.kernel_window` (new past the cursor, inside ``window_s``,
default 24 h; draining incidents held across runs until a reboot or an acknowledgement).

What is reported:
- draining Xids (catalog severity ``fail``, e.g. 48, 79, 95, 119) FAIL on every run while they
  are in the window, new or not. An entry with ``drain_after: N`` (109 and 119: the driver
  recovers from one) warns once for each of the first N-1 on one GPU and FAILs from the N-th. That is what keeps a node drained: if the check passed on the
  next run, the drain policy would resume a node that still needs its reset. They are held in
  the check's state. A reboot clears them (the fix for most; a GPU that fell off the bus and
  stays gone is the gpu_count check's to catch), as does :func:`acknowledge` after a GPU reset
  that did not reboot the node, and an Xid 154 whose recovery action is "None".
- driver signals without an Xid ("RmInitAdapter failed", ``NV_ERR_RESET_REQUIRED``, "GPU marked
  for reset", repeated GSP RPC timeouts, "GPU lost", a GSP-CrashCat report, a GSP heartbeat
  timeout, a GSP task watchdog) are judged like Xids; their severity and action are the
  catalog's ``signals`` section (gpuhc/data/xid_catalog.yaml).
- Xid 144-150 (NVLink 5) are judged by sub-code, the unit and error status in the line decoded
  by driver branch (:mod:`gpuhc.catalog.xid_subcodes`): NVIDIA resets for some and ignores others.
- warning Xids (application errors such as 13, 31, 43; contained ECC 94) WARN once, on the run
  that first sees them, with action "restart app" or none. They never drain on their own; a
  storm of them is a rate rule's to judge (:mod:`gpuhc.checks.xid_rates`).
- an Xid the catalog does not know WARNs with its number and "look it up": never dropped, never
  a drain unless ``unknown: fail``.
- lines that name NVRM and an Xid but are not the driver's exact grammar WARN, quoting the
  first (a new driver format must show up, not hide), and never drain: only the driver's own
  grammar is driver evidence (docs/security.md, :mod:`gpuhc.sources.kernel_log_grammar`).
- what the read itself could not do (lines with no readable stamp, ``dmesg -H`` lines with no
  anchor, records lost or left out) WARNs and never drains (:mod:`gpuhc.checks.kernel_log_notes`).
- one result per (GPU, Xid) with a count: a storm of 600 identical lines is one result.

Attribution: the PCI id in the line is matched against NVML's GPUs (subject ``gpuN``). An Xid
on a PCI id NVML does not list (the GPU fell off the bus, the driver lost it) is reported with
the PCI id as subject and keeps its severity; one with no readable PCI id (redacted, or a
driver message naming none) is the node's. In the prolog (``ctx.gpus`` set) only the job's
GPUs are judged, but unattributed draining findings always are: nobody can tell whose GPU it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuhc.checks import xid_joined, xid_rates
from gpuhc.checks.base import KERNEL_LOG, NVML, Check, CheckOutput, Context, result
from gpuhc.checks.kernel_log_notes import read_notes, when
from gpuhc.checks.kernel_window import (
    DEFAULT_WINDOW_S,
    acknowledge,
    earliest,
    latest,
    held_key,
    merge_held,
    open_window,
)
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.nvml import GpuReading
from gpuhc.model.pci import norm_pci
from gpuhc.model.record import Record
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

if TYPE_CHECKING:
    from gpuhc.catalog.xid import XidInfo  # the catalog is imported when an Xid is judged
    from gpuhc.catalog.xid_subcodes import SubVerdict

ID = "xid"
KINDS = (EventKind.XID, EventKind.FALLEN_OFF_BUS, EventKind.DRIVER)


@dataclass(eq=False, repr=False)
class _Group(Record):
    """The events of one subject and code inside the window, judged together."""

    subject: str
    code: int | None  # None: a driver signal without an Xid
    pci: str | None
    gpu: int | None
    signal: str | None = None
    count: int = 0
    new: int = 0
    first: float | None = None
    last: float | None = None
    last_message: str = ""
    saw_xid: bool = False  # False: only "fallen off the bus" messages, no Xid line
    device: str | None = None  # the driver's own name for the GPU ("GPU6"), signals only
    sub: SubVerdict | None = None  # Xid 144-150: the unit and status the line decodes to

    def add(self, ev: KernelEvent, new: bool, now: float) -> None:
        t = ev.time if ev.time is not None else now
        self.count += 1
        self.new += int(new)
        self.first, self.last = earliest(self.first, t), latest(self.last, t)
        self.last_message = ev.message[:200]
        self.saw_xid = self.saw_xid or ev.kind is EventKind.XID
        self.device = self.device or ev.device

    @property
    def key(self) -> tuple:
        if self.sub is not None:
            return (self.subject, self.code, self.sub.label)
        return (self.subject, self.code, self.signal) if self.signal else (self.subject, self.code)

    def info(self) -> XidInfo:
        from dataclasses import replace

        from gpuhc.catalog.xid import signal_info, xid_info

        if self.signal:
            return signal_info(self.signal)
        info = xid_info(int(self.code or 0))
        if self.sub is None:
            return info
        # NVIDIA judges Xid 144-150 by sub-code (gpuhc.catalog.xid_subcodes): that verdict, not the number's
        return replace(info, name=f"{info.name}: {self.sub.label}", severity=self.sub.severity, action=self.sub.action)


def _verdict(g: _Group, ctx: Context) -> tuple[str, Action]:
    """(severity, action) for a group after the config's overrides."""
    info = g.info()
    severity, action = info.severity, info.action
    if g.signal:
        if g.signal == "rc_watchdog" and severity == "fail" and xid_joined.watchdog_joined(g.last_message):
            return severity, xid_joined.WATCHDOG_JOINED_ACTION  # the Xid 8 names the GPU to reset
        return severity, action
    code = int(g.code or 0)
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
    if severity == "fail" and wanted is None and g.count < info.drain_after:
        # The catalog waits for a repeat of this code on one GPU (its ``drain_after``): until
        # then it warns once, like a warning Xid. A site's override to fail drains on the first.
        return "warn", Action.NONE
    if code == 154 and severity == "fail":
        from gpuhc.catalog.xid import recovery_action

        asked = recovery_action(g.last_message)
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
        if not (str(key).isascii() and str(key).isdigit()) or value not in ("fail", "warn", "ignore"):
            errors.append(f"severity_overrides.{key}: want an Xid number mapped to fail, warn or ignore, got {value!r}")
    check_window_s = float(ctx.t("window_s", DEFAULT_WINDOW_S))
    errors.extend(xid_rates.setting_errors(ctx.t("rate_rules"), check_window_s))
    errors.extend(xid_joined.setting_errors(ctx.t("gsp_node_window_s", xid_joined.DEFAULT_GSP_NODE_WINDOW_S),
                                            check_window_s))
    return errors


def _where(subject: str, pci: str | None) -> str:
    return f"{subject} ({pci})" if pci and subject != pci else subject


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    win = open_window(snapshot, ctx, ID)
    if isinstance(win, CheckOutput):
        return win
    klog, now, window_s = win.klog, win.now, win.window_s
    gpus = _gpus_by_pci(snapshot)

    events = xid_joined.join_watchdog(win.events(KINDS))
    recovered = _recovered(events, gpus)
    driver = klog.driver_version or (snapshot.nvml.driver_version if snapshot.nvml else None)
    groups: dict[tuple, _Group] = {}
    gsp: list[tuple[str, KernelEvent, bool]] = []  # Xid 119/120 as attributed: the node-level rule's
    for ev, new in events:
        pci = norm_pci(ev.pci) if ev.pci else None
        gpu = gpus.get(pci) if pci else None
        subject = gpu.subject if gpu else (pci or "node")
        if subject in recovered and ev.time is not None and ev.time <= recovered[subject]:
            continue
        signal = ev.state if ev.kind is EventKind.DRIVER else None
        if ev.kind is EventKind.XID and ev.code in xid_joined.GSP_CODES and subject != "node":
            gsp.append((subject, ev, new))
        code = None if signal else (ev.code or 79)  # a fallen-off-bus message is an Xid 79 without the number
        g = _Group(subject, code, pci, gpu.index if gpu else None, signal, sub=_subcode(ev, driver))
        g = groups.setdefault(g.key, g)
        g.add(ev, new, now)

    errors = _setting_errors(ctx)
    results: list[Result] = [result(ID, Status.ERROR, f"checks.xid.thresholds.{why}") for why in errors]
    fresh: list[dict] = []
    new_counts: dict[tuple, int] = {}  # keyed as held incidents are: failing sub-codes of one Xid add up
    for g in groups.values():
        severity, action = _verdict(g, ctx)
        if severity == "fail":
            gkey = held_key({"subject": g.subject, "code": g.code, "signal": g.signal})
            new_counts[gkey] = new_counts.get(gkey, 0) + g.new
            fresh.append({"subject": g.subject, "code": g.code, "pci": g.pci, "gpu": g.gpu, "count": g.count,
                          "first": g.first, "last": g.last, "action": action.value, "xid": g.saw_xid,
                          "last_message": g.last_message, **({"signal": g.signal} if g.signal else {}),
                          **({"name": g.info().name} if g.sub else {}),
                          **({"device": g.device} if g.device else {})})
        elif severity == "warn" and g.new and _selected(g.gpu, False, ctx):
            results.append(_warn(g, action))
    node_gsp = [] if errors else xid_joined.gsp_node_incident(
        gsp, float(ctx.t("gsp_node_window_s", xid_joined.DEFAULT_GSP_NODE_WINDOW_S)))
    for inc in node_gsp:  # after the per-GPU ones: on a shared key (an unattributed 119) its words win
        new_counts[held_key(inc)] = new_counts.get(held_key(inc), 0) + inc.pop("new")
    held = [h for h in win.held() if not (h["subject"] in recovered and (h.get("last") or 0) <= recovered[h["subject"]])]
    incidents = merge_held(_one_per_incident(fresh) + node_gsp, held, new_counts)
    # Held with nothing new this run: the GPU may look healthy again, so the line says it is
    # held and what ends the hold (docs/checks.md, "xid"), or the FAIL reads like a fresh fault.
    quiet = {held_key(h) for h in held} - {k for k, n in new_counts.items() if n}
    for inc in incidents:
        if _selected(inc.get("gpu"), True, ctx):
            results.append(_fail(inc, window_s if held_key(inc) in quiet else None))
    if not errors:
        storms = xid_rates.judge(ctx.t("rate_rules") or [], events, gpus, win.now_for)
        results.extend(r for r in storms if _selected(r.value.get("gpu"), r.status is Status.FAIL, ctx))
    results.extend(read_notes(ID, klog, win, window_s))
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
    if not last154:
        return {}
    from gpuhc.catalog.xid import recovery_action

    return {s: ev.time for s, ev in last154.items() if recovery_action(ev.message) is Action.NONE}


def _one_per_incident(fresh: list[dict]) -> list[dict]:
    """Failing groups that are one held incident (two failing sub-codes of one Xid on one GPU)
    joined: counts added, the latest one's words kept."""
    out: dict[tuple, dict] = {}
    for f in sorted(fresh, key=lambda f: f.get("last") or 0):
        key = (f["subject"], f["code"], f.get("signal"))
        if key in out:
            f = dict(f, count=f["count"] + out[key]["count"], first=earliest(f.get("first"), out[key].get("first")))
        out[key] = f
    return list(out.values())


def _subcode(ev: KernelEvent, driver: str | None) -> SubVerdict | None:
    """Xid 144-150: the sub-code the line decodes to by driver branch, None for other events."""
    if ev.kind is not EventKind.XID or ev.code is None or not 144 <= ev.code <= 150:
        return None
    from gpuhc.catalog.xid_subcodes import decode

    return decode(ev.code, ev.message, driver)


def _selected(gpu: int | None, draining: bool, ctx: Context) -> bool:
    if ctx.gpus is None:
        return True
    if gpu is None:
        return draining  # unattributed: only the draining ones, they may be anyone's GPU
    return gpu in ctx.gpus


def _count(n: int) -> str:
    return f" x{n}" if n > 1 else ""


def _fail(inc: dict, held_for_s: float | None = None) -> Result:
    """The FAIL line of one incident; ``held_for_s``: it is held from earlier runs with nothing
    new since, for at most this long after its last event."""
    from gpuhc.catalog.xid import signal_info, xid_info

    where, n = _where(inc["subject"], inc.get("pci")), _count(int(inc["count"]))
    if inc.get("signal"):
        dev = f" (the driver's {inc['device']})" if inc.get("device") and inc["subject"] == "node" else ""
        joined = "then Xid 8" if xid_joined.watchdog_joined(inc.get("last_message")) else "no Xid"
        msg = f"{where}{dev}: {signal_info(inc['signal']).name}{n} (driver message, {joined})"
    elif inc.get("xid", True):
        code = int(inc["code"])
        msg = f"Xid {code} on {where}{n}: {inc.get('name') or xid_info(code).name}"
    else:  # the driver printed no Xid, only the multi-line "fallen off the bus" message
        msg = f"{where} has fallen off the bus{n} (no Xid logged)"
    value = {k: inc.get(k) for k in ("code", "count", "first", "last", "pci", "last_message")}
    if held_for_s is not None:
        # Beside the message, never in it: the message is the drain reason, which stays the same
        # from run to run (docs/slurm.md); output.py shows this note after it.
        value["held"] = (f"held: a reboot, an admin's resume or {held_for_s / 3600:g}h with no new one after "
                         f"{when(inc['last'])} releases it" if inc.get("last") else
                         "held: a reboot or an admin's resume releases it")
    if inc.get("signal"):
        value["signal"] = inc["signal"]
    return result(ID, Status.FAIL, msg, inc["subject"], value=value, action=Action(inc["action"]))


def _warn(g: _Group, action: Action) -> Result:
    info = g.info()
    where = _where(g.subject, g.pci)
    if g.signal:
        msg = f"{where}: {info.name}{_count(g.count)} (driver message, no Xid)"
    elif not info.known:
        msg = (f"Xid {g.code} on {where}{_count(g.count)}: not in gpuhc's catalog; look it up in NVIDIA's Xid "
               "catalog for this driver (checks.xid.thresholds.severity_overrides to set its verdict)")
    else:
        kind = " (application error)" if info.app else ""
        if info.severity == "fail":  # below the catalog's drain_after: say what the repeat does
            kind = f" ({g.count} of the {info.drain_after} on one GPU in the xid window that drain: {info.action.value})"
        msg = f"Xid {g.code} on {where}{_count(g.count)}: {info.name}{kind}"
    value = {"code": g.code, "count": g.count, "new": g.new, "first": g.first, "last": g.last, "pci": g.pci,
             "last_message": g.last_message, "known": info.known}
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
        defaults={"window_s": DEFAULT_WINDOW_S, "unknown": "warn", "severity_overrides": {},
                  "rate_rules": xid_rates.DEFAULT_RULES, "gsp_node_window_s": xid_joined.DEFAULT_GSP_NODE_WINDOW_S},
        doc="NVIDIA Xid errors and driver failures in the kernel log: draining ones fail until reset or reboot, "
            "application ones warn once, storms by rate rule.",
        validate=lambda thresholds: _setting_errors(Context(thresholds=thresholds)),
        acknowledge=acknowledge,
    )
]
