"""infiniband: port state and rate, error-counter growth, and seconds down in a sliding window.

One result per port (subject ``mlx5_0/1``): every finding on a port is folded into it, worst
status first, so the report and the metrics have one line per port.

Actions, and why:

- physical link not LinkUp (Polling, Disabled, LinkErrorRecovery): the cable, transceiver or the
  switch port; a reboot does not re-seat a cable: FAIL, drain + hardware ticket.
- LinkUp but logical state INIT/ARMED: the subnet manager has not activated the port (fabric
  side, or the HCA's port GUID is unknown to it): FAIL, drain + ticket (for the fabric team).
- LinkUp but DOWN: the driver and the link disagree, which a driver reload usually clears:
  FAIL, drain + reboot.
- rate below ``expected_rate_gbps`` (InfiniBand ports) or below the baseline's rate: a link
  trained at reduced width/speed, i.e. a degraded cable or transceiver: FAIL, drain + ticket.
- down for ``down_fail_s`` (7 s) or more, cumulated over the last ``down_window_s`` (600 s):
  NCCL gives up on an IB link after ~7 s with retries, so one long outage kills a job as
  surely as many flaps; a flaky link needs hands: FAIL, drain + ticket. The number of flaps is
  not judged (docs/facts.md, "InfiniBand"); ``link_downed`` growth only WARNs.
- single flaps that recur: the port went down (after it had been up) in ``flap_hours`` (3)
  distinct clock hours of the last ``flap_window_h`` (24): FAIL, drain + ticket, the reason
  saying over how long (gpuhc/checks/persistence.py). Each flap alone is short of the downtime
  limit and only WARNs, yet a cable whose flaps come back all day costs every job started
  meanwhile a retry or its life; a burst (a switch reload, a cable bumped in the rack) touches
  one or two hours and never drains. When the port went down is kept per port (``flaps``, the
  first and last time of each clock hour) across reboots; an admin's resume forgets them
  (``acknowledge``).
- error counters growing between runs over ``counters.<name>`` = [warn, fail]: WARN / FAIL
  (drain + ticket). A counter that went down was reset: rebaseline, no verdict. IB error
  counters saturate (``link_downed`` at 255); a saturated counter cannot show growth, which
  WARNs when ``warn_saturated`` (reset them with ``perfquery -R``).
- state unreadable: ERROR (could not judge, never drains).

Ports not judged: ``ignore`` globs on ``mlx5_4/1`` or ``mlx5_4``; ports the baseline recorded
as not ACTIVE (an unused second port); Ethernet (RoCE) ports by ``ethernet``: "ignore" skips
them, "warn" (default: storage or front-end NICs must not drain a GPU node) caps their findings
at WARN, "judge" treats them as the GPU fabric. An Ethernet port whose PHY is Disabled (unused
NIC port) is n/a unless the baseline saw it ACTIVE.

Downtime comes from mlx5 ``Port: N Link STATE`` kernel-log events and from this check's own
samples of each port's state (kept in ``ctx.prev``, pruned to the window), merged into one
timeline where a state holds until the next observation; an unclosed DOWN lasts until
``snapshot.time``. Time before a port's first ACTIVE (link bring-up at boot) is not an outage;
samples are dropped when the kernel's boot id changes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from gpuhc.checks.base import IB, KERNEL_LOG, STAGES, Check, CheckOutput, Context, na, result
from gpuhc.checks.infiniband_downtime import UP_STATES, timeline
from gpuhc.checks.persistence import held, setting_errors, span_text
from gpuhc.catalog.evidence import IB_FLAPS_RECURRING
from gpuhc.model.host import IbPort
from gpuhc.model.record import Record
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "infiniband"
# The evidence class of a FAIL for single flaps that recur (the result's ``evidence``; what it
# buys: gpuhc/catalog/evidence.py)
RECURRING_FLAPS_CLASS = IB_FLAPS_RECURRING
CLEARED = "flaps_cleared_at"  # state key: an admin's resume; flaps before it are forgiven

# counter -> [warn, fail] growth between two runs; None switches that level off. Config entries
# are merged over these, so an override names only the counters it changes.
DEFAULT_COUNTER_LIMITS: dict[str, list[int | None]] = {
    "link_downed": [1, None],  # flaps are judged by seconds down, not by their number
    "link_error_recovery": [1, None],
    "symbol_error": [10, 1000],
    "port_rcv_errors": [10, 1000],
    "port_rcv_remote_physical_errors": [10, None],  # the far end's problem: report, don't drain
    "local_link_integrity_errors": [1, None],
    "local_ack_timeout_err": [1000, None],  # transport retries: the path, not necessarily this node
}
# Width of the IB PMA PortCounters fields: they stop at their maximum instead of wrapping.
_COUNTER_BITS = {
    "link_downed": 8, "link_error_recovery": 8, "symbol_error": 16, "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4, "port_xmit_discards": 16,
}

DEFAULTS: dict[str, Any] = {
    "expected_rate_gbps": None,  # floor for InfiniBand ports; the baseline's per-port rate also applies
    "expected_ports": None,  # number of InfiniBand ports the node must have
    "down_window_s": 600.0,
    "down_fail_s": 7.0,
    "down_warn_s": 1.0,
    # single flaps in this many distinct clock hours of the window: FAIL (0: off). A burst
    # touches 1-2 hours; 3 separate hours in a day is a cable or transceiver that keeps dropping.
    "flap_hours": 3,
    "flap_window_h": 24.0,
    "counters": DEFAULT_COUNTER_LIMITS,
    "warn_saturated": True,
    "ignore": [],  # globs on "mlx5_4/1" or "mlx5_4"
    "ethernet": "warn",  # ignore | warn | judge
}


@dataclass(eq=False, repr=False)
class _Finding(Record):
    """One thing seen on a port: its status, words and action."""

    status: Status
    text: str
    action: Action = Action.NONE
    evidence: str | None = None  # its class, when not the check's (gpuhc/catalog/evidence.py)


@dataclass(eq=False, repr=False)
class _Verdict(Record):
    """A port's findings with the values and thresholds they were judged against."""

    findings: list[_Finding] = field(default_factory=list)
    value: dict[str, Any] = field(default_factory=dict)
    threshold: dict[str, Any] = field(default_factory=dict)

    def add(self, status: Status, text: str, action: Action = Action.NONE, evidence: str | None = None) -> None:
        self.findings.append(_Finding(status, text, action, evidence))


# ----------------------------------------------------------------------------- downtime


def _downtime(port: IbPort, snapshot: Snapshot, ctx: Context, prev: dict, boot_changed: bool,
              v: _Verdict) -> dict[str, Any]:
    """Judge seconds down (gpuhc/checks/infiniband_downtime.py); return the port's new sample
    history for the state."""
    window = float(ctx.t("down_window_s", 600.0))
    flap_hours, flap_window = ctx.t("flap_hours", 0), float(ctx.t("flap_window_h", 24.0))
    cleared = ctx.prev.get(CLEARED)
    down, kept = timeline(port, snapshot, window, prev, boot_changed, flap_window,
                          float(cleared) if isinstance(cleared, (int, float)) and not isinstance(cleared, bool) else None)
    fail, warn = ctx.t("down_fail_s", 7.0), ctx.t("down_warn_s", 1.0)
    v.value["down_s"] = round(down, 3)
    v.threshold["down_fail_s"] = fail
    text = f"down {down:.1f} s in last {window:g} s (limit {fail:g} s)"
    if fail is not None and down >= float(fail):
        v.add(Status.FAIL, text, Action.DRAIN_TICKET)
    elif warn is not None and down > 0 and down >= float(warn):
        v.add(Status.WARN, text)
    h = held(kept["flaps"], flap_hours)
    if h is not None:
        v.value["persistent"] = {"hours": h.hours, "first": h.first, "last": h.last}
        v.threshold["flap_hours"] = flap_hours
        v.add(Status.FAIL, f"single flaps recurring {span_text(h.span_s)} (down in {h.hours} separate hours "
                           f"of the last {flap_window:g} h)", Action.DRAIN_TICKET, RECURRING_FLAPS_CLASS)
    return kept


# ----------------------------------------------------------------------------- counters


def _limits(ctx: Context) -> dict[str, tuple[int | None, int | None]]:
    override = ctx.t("counters") or {}
    if not isinstance(override, dict):
        raise ValueError(f"thresholds.counters: expected a mapping of counter to [warn, fail], got {override!r}")
    merged = {**DEFAULT_COUNTER_LIMITS, **override}
    out = {}
    for name, spec in merged.items():
        if spec is None:
            continue
        if isinstance(spec, dict):
            spec = [spec.get("warn"), spec.get("fail")]
        if not isinstance(spec, (list, tuple)) or len(spec) != 2 or not all(
                x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in spec):
            raise ValueError(f"thresholds.counters.{name}: expected [warn, fail], got {spec!r}")
        out[name] = (spec[0], spec[1])
    return out


def _counters(port: IbPort, prev: dict, limits: dict, ctx: Context, v: _Verdict) -> dict[str, int]:
    before = prev.get("counters", {})
    for name, (warn, fail) in limits.items():
        cur, old = port.counters.get(name), before.get(name)
        if cur is None:
            continue
        ceiling = (1 << _COUNTER_BITS[name]) - 1 if name in _COUNTER_BITS else None
        if ceiling is not None and cur >= ceiling and (old is None or old >= ceiling):
            if ctx.t("warn_saturated", True) and warn is not None:
                v.add(Status.WARN, f"{name} saturated at {cur}: growth invisible until reset (perfquery -R)")
            continue
        if old is None or cur < old:
            continue  # first sight, or the counters were reset: this value is the new baseline
        grew = cur - old
        if fail is not None and grew >= fail:
            v.add(Status.FAIL, f"{name} +{grew} since last run (limit {fail})", Action.DRAIN_TICKET)
        elif warn is not None and grew >= warn and grew > 0:
            v.add(Status.WARN, f"{name} +{grew} since last run (warn at {warn})")
    return {k: port.counters[k] for k in limits if k in port.counters}


# ----------------------------------------------------------------------------- state and rate


def _link(port: IbPort, v: _Verdict) -> bool:
    """Judge the link state; True when the port is usable (ACTIVE over a LinkUp PHY)."""
    state, phys = port.state, port.phys_state
    v.value.update(state=state, phys_state=phys)
    if state is None:
        v.add(Status.ERROR, "state unreadable")
        return False
    if phys is not None and phys != "LinkUp":
        v.add(Status.FAIL, f"{state}, physical link {phys} (cable, transceiver or switch port)", Action.DRAIN_TICKET)
        return False
    if state in UP_STATES:
        return True
    if state in ("INIT", "ARMED"):
        v.add(Status.FAIL, f"{state}: link up but not activated by the subnet manager", Action.DRAIN_TICKET)
    else:
        v.add(Status.FAIL, f"{state} with physical link {phys or 'unknown'}", Action.DRAIN_REBOOT)
    return False


def _rate(port: IbPort, expected: float | None, base: dict | None, v: _Verdict) -> None:
    v.value["rate_gbps"] = port.rate_gbps
    floors = [f for f in (expected, (base or {}).get("rate_gbps")) if isinstance(f, (int, float))]
    if port.rate_gbps is None or not floors:
        return
    want = max(floors)
    v.threshold["rate_gbps"] = want
    if port.rate_gbps < want:
        v.add(Status.FAIL, f"rate {port.rate_gbps:g} Gb/s, expected {want:g} Gb/s (degraded link)", Action.DRAIN_TICKET)


# ----------------------------------------------------------------------------- the check


def _ignored(subject: str, device: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(subject, p) or fnmatch.fnmatchcase(device, p) for p in patterns)


def _fold(subject: str, v: _Verdict, ethernet_warn_only: bool, ok_text: str) -> Result:
    """One result per port: the worst finding's status and action, every finding in the text."""
    if not v.findings:
        return result(ID, Status.PASS, f"{subject} {ok_text}", subject, v.value, v.threshold or None)
    if ethernet_warn_only:
        v.findings = [_Finding(Status.WARN, f.text) if f.status is Status.FAIL else f for f in v.findings]
    v.findings.sort(key=lambda f: (-f.status.rank, -f.action.rank))
    worst = v.findings[0]
    text = "; ".join(f.text for f in v.findings)
    if ethernet_warn_only and any(f.status is Status.WARN for f in v.findings):
        text += " (Ethernet port: warn only)"
    return result(ID, worst.status, f"{subject} {text}", subject, v.value, v.threshold or None, worst.action,
                  worst.evidence)


def _bad_thresholds(ctx: Context) -> str | None:
    """Why the thresholds cannot be used, or None. Keys whose default is None reach us
    unchecked by the config loader, so a typo there must become an ERROR, not a traceback."""
    def number(key: str, nullable: bool = True) -> bool:
        v = ctx.t(key)
        return (v is None and nullable) or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)

    for key in ("expected_rate_gbps", "expected_ports", "down_warn_s", "down_fail_s"):
        if not number(key):
            return f"thresholds.{key}: expected a number >= 0, got {ctx.t(key)!r}"
    if not number("down_window_s", nullable=False) or not ctx.t("down_window_s"):
        return f"thresholds.down_window_s: expected a number > 0, got {ctx.t('down_window_s')!r}"
    for problem in setting_errors(ctx.thresholds, "flap_hours", "flap_window_h"):
        return "thresholds." + problem
    if ctx.t("ethernet", "warn") not in ("ignore", "warn", "judge"):
        return f"thresholds.ethernet: expected ignore, warn or judge, got {ctx.t('ethernet')!r}"
    ignore = ctx.t("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        return f"thresholds.ignore: expected a list of port patterns like mlx5_4/1, got {ignore!r}"
    return None


def ib_baseline(ports: list[IbPort]) -> dict[str, dict[str, Any]]:
    """The ``ib`` section of a node baseline (``gpuhc baseline capture``), in the shape this
    check reads back: ``{"mlx5_0/1": {"rate_gbps": 400.0, "state": "ACTIVE", "link_layer": ...}}``."""
    return {p.subject: {"rate_gbps": p.rate_gbps, "state": p.state, "link_layer": p.link_layer} for p in ports}


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    if snapshot.ib_ports is None:
        return CheckOutput([na(ID, "InfiniBand ports not read")])
    try:
        problem = _bad_thresholds(ctx)
        limits = _limits(ctx)
    except ValueError as e:
        problem = str(e)
    if problem:
        return CheckOutput([result(ID, Status.ERROR, problem)])
    ignore = list(ctx.t("ignore") or [])
    eth_mode = ctx.t("ethernet", "warn")
    base_ib: dict = (ctx.baseline or {}).get("ib") or {}
    boot = snapshot.kernel.boot_id if snapshot.kernel else None
    prev_ports: dict = ctx.prev.get("ports", {})
    boot_changed = boot is not None and ctx.prev.get("boot_id") not in (None, boot)
    results: list[Result] = []
    new_ports: dict[str, Any] = {}
    seen: set[str] = set()
    ib_count = 0

    for port in snapshot.ib_ports:
        s = port.subject
        seen.add(s)
        is_eth = port.link_layer == "Ethernet"
        base = base_ib.get(s)
        if _ignored(s, port.device, ignore):
            results.append(na(ID, f"{s} ignored by config", s))
            continue
        if not is_eth:
            ib_count += 1
        if is_eth and eth_mode == "ignore":
            results.append(na(ID, f"{s} Ethernet port not judged", s))
            continue
        base_down = base is not None and base.get("state") not in (None, *UP_STATES)
        if port.state not in UP_STATES and (
                base_down or (is_eth and port.phys_state == "Disabled" and base is None)):
            why = "not ACTIVE in the baseline either" if base_down else "Ethernet port disabled (unused)"
            results.append(na(ID, f"{s} {port.state or 'unknown'}: {why}", s))
            continue
        v = _Verdict()
        prev = prev_ports.get(s, {})
        usable = _link(port, v)
        if usable:
            _rate(port, None if is_eth else ctx.t("expected_rate_gbps"), base, v)
        kept = {"counters": _counters(port, prev, limits, ctx, v)}
        kept.update(_downtime(port, snapshot, ctx, prev, boot_changed, v))
        new_ports[s] = kept
        rate = f", {port.rate_gbps:g} Gb/s" if port.rate_gbps is not None else ""
        results.append(_fold(s, v, is_eth and eth_mode == "warn", f"{port.state} {port.phys_state or ''}{rate}".rstrip()))

    for s, entry in sorted(base_ib.items()):
        if s in seen or _ignored(s, s.split("/")[0], ignore) or (entry or {}).get("state") not in UP_STATES:
            continue
        if (entry or {}).get("link_layer") == "Ethernet" and eth_mode != "judge":
            continue
        results.append(result(ID, Status.FAIL, f"{s} missing (ACTIVE in the baseline)", s,
                              action=Action.DRAIN_TICKET))

    expected = ctx.t("expected_ports")
    if expected is not None and ib_count < int(expected):
        results.append(result(ID, Status.FAIL, f"{ib_count} InfiniBand ports found, {expected} expected",
                              value=ib_count, threshold=expected, action=Action.DRAIN_TICKET))
    if not results:
        results.append(na(ID, "no InfiniBand ports"))
    state = {"boot_id": boot if boot is not None else ctx.prev.get("boot_id"), "ports": new_ports}
    if ctx.prev.get(CLEARED) is not None:
        state[CLEARED] = ctx.prev[CLEARED]
    return CheckOutput(results, state)


def acknowledge(state: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The state after an admin's resume or a retest: the ports' flaps and seconds down up to
    ``now`` are forgiven (the kernel log still shows them, so the time is kept); samples and
    counters stay. A port the admin resumed while it is still down fails by its state."""
    new = dict(state) if isinstance(state, dict) else {}
    ports = new.get("ports")
    if isinstance(ports, dict):
        new["ports"] = {s: {**p, "flaps": []} if isinstance(p, dict) else p for s, p in ports.items()}
    new[CLEARED] = now
    return new


def _setting_errors(thresholds: dict[str, Any]) -> list[str]:
    ctx = Context(thresholds=thresholds)
    try:
        problem = _bad_thresholds(ctx)
        _limits(ctx)
    except ValueError as e:
        problem = str(e)
    return [problem.removeprefix("thresholds.")] if problem else []


CHECKS = [
    Check(
        id=ID,
        needs=(IB,),
        optional=(KERNEL_LOG,),  # link-down history; port state and counters come from sysfs
        judge=judge,
        stages=STAGES,
        timeout_s=5.0,
        defaults=DEFAULTS,
        doc=__doc__ or "",
        validate=_setting_errors,
        acknowledge=acknowledge,
    )
]
