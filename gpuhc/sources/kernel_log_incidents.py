"""Kernel-log events into incidents, one per thing a human would count: an SXid's detail lines
join their header, a GPU's "fallen off the bus" messages join its Xid 79, a netdev "Link down"
joins the mlx5 port line that says the same. Pure; :mod:`gpuhc.sources.kernel_log_parse` finds
the events, this module merges them (:class:`~gpuhc.sources.kernel_log_record.Found`).
"""

from __future__ import annotations

from gpuhc.model.kernel import EventKind
from gpuhc.sources.kernel_log_record import Found

SXID_DETAIL_S = 5.0  # an SXid detail line this close to its header belongs to it
FALLEN_SAME_INCIDENT_S = 60.0  # fallen-off-bus messages for one GPU this close are one incident
NETDEV_SAME_CHANGE_S = 2.0  # a netdev Link up/down this close to a Port: line repeats it
UNTIMED_NEAR_LINES = 20  # without times, "close" is measured in lines


def incidents(found: list[Found]) -> list[Found]:
    """The events of one parse, merged into incidents (the module doc), in log order."""
    return _merge_netdev(_merge_fallen(_merge_sxid_details(found)))


def _near(a: Found, b: Found, seconds: float) -> bool:
    if a.time is not None and b.time is not None:
        return abs(a.time - b.time) <= seconds
    return abs(a.idx - b.idx) <= UNTIMED_NEAR_LINES


def _merge_sxid_details(found: list[Found]) -> list[Found]:
    """Severity/Data lines join their header; a detail with no header nearby becomes the event."""
    headers: dict[tuple, list[Found]] = {}
    for f in found:
        if f.kind is EventKind.SXID and not f.detail:
            headers.setdefault((f.pci, f.code), []).append(f)
    out: list[Found] = []
    orphans: dict[tuple, list[Found]] = {}
    for f in found:
        if f.kind is EventKind.SXID and f.detail:
            key = (f.pci, f.code)
            if any(_near(f, h, SXID_DETAIL_S) for h in headers.get(key, ())):
                continue
            if any(_near(f, o, SXID_DETAIL_S) for o in orphans.get(key, ())):
                continue
            orphans.setdefault(key, []).append(f)
            f.detail = False
        out.append(f)
    return out


def _merge_fallen(found: list[Found]) -> list[Found]:
    """One incident per GPU: drop fallen-off messages next to an Xid 79 or an earlier message."""
    xid79 = [f for f in found if f.kind is EventKind.XID and f.code == 79]
    kept: list[Found] = []
    out: list[Found] = []
    for f in found:
        if f.kind is EventKind.FALLEN_OFF_BUS:
            same = [g for g in xid79 + kept if f.pci is None or g.pci is None or g.pci == f.pci]
            if any(_near(f, g, FALLEN_SAME_INCIDENT_S) for g in same):
                continue
            kept.append(f)
        out.append(f)
    return out


def _merge_netdev(found: list[Found]) -> list[Found]:
    """Keep a netdev Link up/down only when no Port: line tells the same change; name its HCA."""
    ports = [f for f in found if f.kind is EventKind.IB_LINK and not f.detail]
    names = {f.pci: f.device for f in ports if f.device}
    out: list[Found] = []
    for f in found:
        if f.kind is EventKind.IB_LINK:
            if f.detail:
                twin = [p for p in ports if p.pci == f.pci and p.state == f.state]
                if any(_near(f, p, NETDEV_SAME_CHANGE_S) for p in twin):
                    continue
            if f.device is None:
                f.device = names.get(f.pci)
        out.append(f)
    return out
