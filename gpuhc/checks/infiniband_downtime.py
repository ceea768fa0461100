"""infiniband's timeline of a port: seconds not ACTIVE within a sliding window, and when it went
down over the last day, from the port's own samples (kept in the check's state) and mlx5's link
and module events in the kernel log.

Pure: the observations in, the seconds down and the samples to keep out; the infiniband check
(gpuhc/checks/infiniband.py) judges the seconds against its limits. A state holds until the
next observation and an unclosed DOWN lasts until now; time before a port's first ACTIVE (link
bring-up at boot) is not an outage; samples are dropped when the kernel's boot id changes.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.persistence import remember
from gpuhc.model.host import IbPort
from gpuhc.model.kernel import NIC_FATAL, EventKind, KernelEvent
from gpuhc.model.pci import norm_pci
from gpuhc.model.snapshot import Snapshot

UP_STATES = ("ACTIVE", "ACTIVE_DEFER")
MAX_SAMPLES = 512  # keeps the state file small if something runs the check in a tight loop
# mlx5 module events (kernel_log_host): a cable pulled or failed starts an outage; module
# numbers are not ports, so the event is matched by the HCA's PCI address, as is the mlx5
# driver's fatal health (gpuhc/sources/node_reports.py).
_MODULE_DOWN = ("Cable unplugged", "Cable error")


def down_stretches(obs: list[tuple[float, bool]], now: float, first_up: float | None) -> list[tuple[float, float]]:
    """The (start, end) of each stretch a port was not ACTIVE, oldest first.

    ``obs`` are (time, up) observations in any order; the state holds until the next one and
    the last one holds until ``now``. A down stretch counts only if the port had been up
    before it started (``first_up``): the link training after boot is not an outage.
    """
    out: list[tuple[float, float]] = []
    cur, start = None, None
    for t, up in sorted(obs):
        t = min(t, now)  # a timestamp a little ahead of "now" is clock skew, not the future
        if not up and cur is not False:  # a down stretch starts here
            start = t if first_up is not None and t > first_up else None
        elif up and cur is False and start is not None:
            out.append((start, t))
        cur = up
    if cur is False and start is not None:
        out.append((start, now))
    return out


def down_seconds(obs: list[tuple[float, bool]], now: float, window: float, first_up: float | None) -> float:
    """Seconds a port spent not ACTIVE within ``[now - window, now]`` (:func:`down_stretches`)."""
    start = now - window
    return sum(max(0.0, min(b, now) - max(a, start)) for a, b in down_stretches(obs, now, first_up))


def events_for(port: IbPort, pci: str | None, events: list[KernelEvent]) -> list[tuple[float, bool]]:
    """The kernel log's (time, up) observations of this port."""
    out = []
    for ev in events:
        if ev.kind is EventKind.IB_MODULE:  # no Port: line needed
            if ev.state in _MODULE_DOWN and ev.time is not None and ev.pci and ev.pci == pci:
                out.append((float(ev.time), False))
            continue
        if ev.kind is EventKind.NIC_HEALTH:  # the firmware went fatal: down until the port says ACTIVE
            if ev.state in NIC_FATAL and ev.time is not None and ev.pci and ev.pci == pci:
                out.append((float(ev.time), False))
            continue
        if ev.kind is not EventKind.IB_LINK or ev.time is None or not ev.state:
            continue
        if ev.port is not None and ev.port != port.port:
            continue
        if ev.device == port.device or (pci and (ev.device and norm_pci(ev.device) == pci or
                                                 (ev.device is None and ev.pci == pci))):
            out.append((float(ev.time), ev.state.upper() in UP_STATES))
    return out


def timeline(port: IbPort, snapshot: Snapshot, window: float, prev: dict, boot_changed: bool,
             flap_window_h: float = 24.0, since: float | None = None) -> tuple[float, dict[str, Any]]:
    """Seconds down in the last ``window`` seconds and after ``since`` (an acknowledgement: an
    admin's resume or a retest answers for the outage before it; a port still down fails by its
    state), and the port's history to keep: its samples, and when it went down (``flaps``: kept
    across boots, for ``flap_window_h`` hours, none up to ``since``; gpuhc/checks/persistence.py)."""
    now = snapshot.time
    samples = [] if boot_changed else _prev_samples(prev, now)
    first_up = None if boot_changed else number(prev.get("first_up"))
    if port.state is not None:
        samples.append((now, port.state in UP_STATES))
    events = snapshot.kernel.events if snapshot.kernel else []
    obs = samples + events_for(port, getattr(port, "pci", None), events)
    ups = [t for t, up in obs if up]
    if ups:
        first_up = min(ups + ([first_up] if first_up is not None else []))
    stretches = down_stretches(obs, now, first_up)
    start = now - window
    counted = start if since is None else max(start, since)
    down = sum(max(0.0, min(b, now) - max(a, counted)) for a, b in stretches)
    flaps = remember(prev.get("flaps"), [a for a, _ in stretches], now, flap_window_h, since)
    # keep the window, plus the last sample before it: it tells the state at the window's start
    samples = sorted(dict(samples).items())  # one sample per time: a replay may run twice at one "now"
    keep = [s for s in samples if s[0] >= start]
    older = [s for s in samples if s[0] < start]
    keep = (older[-1:] + keep)[-MAX_SAMPLES:]
    return down, {"samples": [[round(t, 3), int(u)] for t, u in keep], "first_up": first_up, "flaps": flaps}


def number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _prev_samples(prev: dict, now: float) -> list[tuple[float, bool]]:
    """The stored samples, skipping anything malformed (a hand-edited state file) and anything
    after ``now`` (the clock went back, or a replay judged an earlier time)."""
    out = []
    for item in prev.get("samples") or []:
        if isinstance(item, (list, tuple)) and len(item) == 2 and number(item[0]) is not None:
            if item[0] <= now:
                out.append((float(item[0]), bool(item[1])))
    return out
