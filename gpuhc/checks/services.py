"""services: the GPU services a node needs, running and answering (docs/checks.md, "services").

Which are needed, per service (threshold ``auto``, ``on`` or ``off``):

- ``fabricmanager``: NVIDIA Fabric Manager, needed where NVSwitches sit on the node's own PCI bus
  (HGX/DGX Hopper and earlier; a GB200 compute tray has none: its switches are managed off the
  node) or its systemd unit is enabled. Whether it *answered* is the fabric registration the
  nvswitch check reads from NVML; here: is it running.
- ``persistenced``: nvidia-persistenced, needed where its unit is enabled; answering: its socket
  accepts a connection within ``probe_timeout_s``.
- ``dcgm``: DCGM's host engine, needed where its unit is enabled (turn it ``on`` where the dcgm
  active checks run); answering: ``dcgmi discovery -l`` within ``probe_timeout_s``.

The IMEX daemon is the fabric check's (``nvidia-imex-ctl``), not repeated here. A probe that
fails is asked again within the run, after a short pause, all probes within ``probe_budget_s``
(gpuhc/sources/host_probes.py ``retried``). A needed service that is not running, or runs but does not
answer, is a FAIL (NVSentinel issue 883: a Fabric Manager outage went unnoticed for 20 days, and
every NCCL job on the node failed) of evidence class ``service``, drain + ticket (the table says
why: a restart of the service is the cure, and a reboot cures no reason it would not start): a
WARN until held over consecutive runs spanning ``evidence.host`` (gpuhc/catalog/evidence.py,
gpuhc/run/hold.py), so one slow ``dcgmi`` on a busy node is no drain, and never toward
a lemon. A service running where nobody asked for it is not judged.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import HOST, Check, CheckOutput, Context, na, reads_host, result
from gpuhc.catalog.evidence import by_id
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot

ID = "services"
NAMES = {"fabricmanager": "Fabric Manager", "persistenced": "nvidia-persistenced", "dcgm": "DCGM host engine"}


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    h = snapshot.host
    if h is None or h.services is None:
        return CheckOutput([na(ID, "the GPU services were not read")])
    out = []
    fine = []
    act = by_id("service").act
    for name, info in sorted(h.services.items()):
        if not isinstance(info, dict) or not info.get("expected"):
            continue
        label = NAMES.get(name, name)
        if not info.get("running"):
            out.append(result(ID, Status.FAIL, f"{label} is not running", name, value=info, action=act))
        elif info.get("answering") is False:
            tries = f", {info['attempts']} tries" if isinstance(info.get("attempts"), int) else ""
            why = f" ({info['error']}{tries})" if info.get("error") else ""
            out.append(result(ID, Status.FAIL, f"{label} is running but not answering{why}", name, value=info,
                              action=act))
        else:
            fine.append(label)
    if not out:
        text = f"running: {', '.join(fine)}" if fine else "no GPU service is needed on this node"
        out.append(result(ID, Status.PASS, text))
    return CheckOutput(out)


def _validate(t: dict[str, Any]) -> list[str]:
    out = []
    for name in NAMES:
        v = t.get(name)
        if v not in ("auto", "on", "off", True, False):
            out.append(f"{name}: want auto, on or off, got {v!r}")
    v = t.get("probe_timeout_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 30:
        out.append(f"probe_timeout_s: want seconds in (0, 30], got {v!r}")
    b = t.get("probe_budget_s")
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b <= 30:
        out.append(f"probe_budget_s: want seconds in (0, 30], got {b!r}")
    elif isinstance(v, (int, float)) and not isinstance(v, bool) and b < v:
        out.append(f"probe_budget_s: want at least probe_timeout_s ({v:g}), got {b!r}")
    return out


CHECKS = [
    Check(
        id=ID,
        needs=(HOST,),
        source_needs=reads_host,  # the services and their probes' timeout
        judge=judge,
        stages=("passive", "bootstrap"),
        timeout_s=10.0,
        defaults={"fabricmanager": "auto", "persistenced": "auto", "dcgm": "auto",
                  "probe_timeout_s": 3.0,  # chosen here: a healthy daemon answers in well under a second
                  # every probe and its retries together (sources/host_probes.py ``retried``): two
                  # tries of a slow host engine, inside this check's 10 s and the stage's 45 s
                  "probe_budget_s": 7.0},
        doc="Fabric Manager (NVSwitch nodes), nvidia-persistenced and DCGM's host engine where needed: running "
            "and answering a bounded probe.",
        validate=_validate,
    )
]
