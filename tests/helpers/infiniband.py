"""InfiniBand ports, link events, snapshots and contexts for the infiniband check's tests."""

from __future__ import annotations


from gpuhc.checks.base import Context
from gpuhc.checks.infiniband import DEFAULTS
from gpuhc.model.host import IbPort
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from gpuhc.model.snapshot import Snapshot


NOW = 1_700_000_000.0


def port(dev="mlx5_0", num=1, state="ACTIVE", phys="LinkUp", rate=400.0, layer="InfiniBand", pci=None, **counters):
    p = IbPort(dev, num, state, phys, rate, layer, dict(counters))
    if pci is not None:
        setattr(p, "pci", pci)  # the source adds the HCA's PCI id for matching PCI-only log lines
    return p


def link(t, state, dev="mlx5_0", num=1, pci=None):
    return KernelEvent(EventKind.IB_LINK, NOW + t, f"Port: {num} Link {state}", pci=pci, device=dev, port=num, state=state)


def snap(ports, events=(), now=NOW, boot_id=None):
    return Snapshot("n1", now, ib_ports=list(ports), kernel=KernelLog(events=list(events), boot_id=boot_id))


def ctx(prev=None, baseline=None, **thresholds):
    return Context(thresholds={**DEFAULTS, **thresholds}, prev=prev or {}, baseline=baseline)


def one(out, subject="mlx5_0/1"):
    (r,) = [r for r in out.results if r.subject == subject]
    return r
