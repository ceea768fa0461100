"""The xid check judged on literal kernel events: "this was in the log, this is the verdict"
(8x H100 from tests/helpers/snapshots.py, GPU i at PCI_IDS[i], judged at T0)."""

from __future__ import annotations

import copy

from gpuhc.checks import xid
from gpuhc.model.kernel import EventKind, KernelEvent, KernelLog
from tests.helpers.snapshots import PCI_IDS, T0, context, healthy_node

CHECK = xid.CHECKS[0]
BOOT_A, BOOT_B = "boot-a", "boot-b"
ALIEN_PCI = "0000:e1:00.0"  # on no GPU NVML lists


def ev(code: int, gpu: int | None = 0, t: float | None = T0 - 60, seq: int | None = None, msg: str = "",
       pci: str | None = None, kind: EventKind = EventKind.XID) -> KernelEvent:
    pci = pci or (PCI_IDS[gpu] if gpu is not None else ALIEN_PCI)
    return KernelEvent(kind=kind, time=t, message=msg or f"Xid (PCI:{pci[:10]}): {code}, test", pci=pci, code=code,
                       seq=seq)


def node(*events: KernelEvent, boot: str | None = BOOT_A, time: float = T0, unparsed: int = 0, snap=None):
    snap = copy.deepcopy(snap) if snap is not None else healthy_node(time=time)
    snap.time = time
    times = [e.time for e in events if e.time is not None]
    seqs = [e.seq for e in events if e.seq is not None]
    snap.kernel = KernelLog(events=list(events), source="test", boot_id=boot, last_time=max(times, default=None),
                            last_seq=max(seqs, default=None), unparsed_lines=unparsed)
    return snap


def judge(snap, prev=None, gpus=None, **thresholds):
    return CHECK.judge(snap, context(CHECK, prev=prev, gpus=gpus, **thresholds))


def brief(out):
    return [(r.status, r.action, r.subject) for r in out.results]
