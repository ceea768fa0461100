"""ipoib: every IPoIB interface the node brought up is up on an InfiniBand port that is ACTIVE.

Jobs and services reach each other over IPoIB where the fabric carries IP (an MPI launcher's
out-of-band wiring, a parallel file system's LNet or NFS over RDMA setup, the site's storage
network). An interface the network configuration brought up whose operstate is not ``up``
(RFC 2863's word in ``/sys/class/net/<if>/operstate``: ``down``, ``lowerlayerdown``, ...) on a
port that is itself ACTIVE is an IPoIB problem of its own: a partition key the subnet manager
does not give this port, a multicast join that failed, a child interface left behind. Jobs
that start there cannot reach their peers by name.

Judged only where it is IPoIB's own finding:

- an interface set down on purpose is not read at all (gpuhc/sources/sysfs_ipoib.py);
- a port that is not ACTIVE takes its interfaces down with it, and that is the infiniband
  check's finding (down, INIT, flapping): not said twice;
- ``unknown`` (a driver that does not report) is not judged.

WARN by default: a site that does not run IP over the fabric for jobs loses nothing, and a
site whose jobs need it says ``down: fail`` (drain + ticket). Pure.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import IB, Check, CheckOutput, Context, na, result
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "ipoib"
LEVELS = {"warn": Status.WARN, "fail": Status.FAIL}
FINE = ("up", "unknown")


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    if snapshot.ib_ports is None:
        return CheckOutput([na(ID, "InfiniBand not read")])
    read = [p for p in snapshot.ib_ports if p.ipoib is not None]
    if not read:
        return CheckOutput([na(ID, "no IPoIB interface read" if snapshot.ib_ports else "no InfiniBand HCA")])
    status = LEVELS[str(ctx.t("down", "warn"))]
    results, judged, left = [], 0, 0
    for port in read:
        if port.state != "ACTIVE":
            left += len(port.ipoib)
            continue
        for name, oper in sorted(port.ipoib.items()):
            judged += 1
            if oper not in FINE:
                results.append(result(ID, status, f"IPoIB {name} on {port.subject} is {oper} (the port is ACTIVE)",
                                      f"{port.subject}/{name}", value=oper, threshold="up",
                                      action=Action.DRAIN_TICKET if status is Status.FAIL else Action.NONE))
    if results:
        return CheckOutput(results)
    tail = f"; {left} on ports not ACTIVE (the infiniband check's)" if left else ""
    if not judged and not left:
        return CheckOutput([result(ID, Status.PASS, "no IPoIB interface brought up")])
    plural = "s" * (judged != 1)
    return CheckOutput([result(ID, Status.PASS, f"{judged} IPoIB interface{plural} up{tail}", value=judged)])


def _validate(t: dict[str, Any]) -> list[str]:
    return [] if t.get("down") in LEVELS else [f"down: must be one of warn, fail, got {t.get('down')!r}"]


CHECKS = [
    Check(
        id=ID,
        needs=(IB,),
        judge=judge,
        timeout_s=5.0,
        defaults={"down": "warn"},
        validate=_validate,
        doc="IPoIB interfaces brought up are up on ACTIVE ports; WARN, or FAIL (drain + ticket) with down: fail",
    )
]
