"""firmware: the node's GPUs and HCAs run the firmware the site rolled out, all of them the same.

A node whose GPUs or NICs disagree on firmware was half-flashed (a board swapped by the vendor
with its own VBIOS, an update that stopped halfway, an HCA replaced in the field): jobs run, but
a known firmware bug returns on one device of eight, and NCCL across mixed ConnectX firmware is
what no vendor tested. It is configuration, not a fault of the moment, so by default it warns
(the evidence table's node-config class); a site whose rollout is strict sets it to fail (drain
+ ticket: a person flashes the device).

- **VBIOS across the GPUs** (NVML's ``nvmlDeviceGetVbiosVersion``, what ``nvidia-smi -q`` prints
  as ``VBIOS Version : 96.00.74.00.01``): the GPUs of one model must agree. Several models in one
  node are compared model by model.
- **VBIOS against the site's version** (``vbios_expected``: one version or a list): each GPU not
  on it is named. With it set, the list decides and the comparison across GPUs is not made twice.
- **HCA firmware across the ports** (``/sys/class/infiniband/<hca>/fw_ver``, gpuhc/sources/
  sysfs_ipoib.py): the HCAs of one device family (the version's first number: 28 ConnectX-7, 32
  BlueField-3) must agree. A ConnectX-7 fleet with a BlueField-3 bond beside it (a real H100
  node: 28.41.1000 eight times and 32.38.3056) is two families, both consistent.

Pure; versions are compared as the devices print them, case aside.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from gpuhc.checks.base import IB, NVML, Check, CheckOutput, Context, na, result, selected_gpus
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "firmware"
LEVELS = {"warn": Status.WARN, "fail": Status.FAIL}


def _status(ctx: Context, key: str) -> Status:
    return LEVELS[str(ctx.t(key, "warn"))]


def _found(ctx: Context, key: str, message: str, subject: str = "node", value: Any = None,
           threshold: Any = None):
    status = _status(ctx, key)
    return result(ID, status, message, subject, value=value, threshold=threshold,
                  action=Action.DRAIN_TICKET if status is Status.FAIL else Action.NONE)


def _groups(items: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """version -> the devices that run it, most devices first."""
    by: dict[str, list[str]] = defaultdict(list)
    for device, version in items:
        by[version.upper()].append(device)
    return dict(sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def _spread(by: dict[str, list[str]]) -> str:
    return "; ".join(f"{v} on {','.join(devs)}" for v, devs in by.items())


def _expected(ctx: Context) -> list[str] | None:
    want = ctx.t("vbios_expected")
    if want is None or want == []:
        return None
    return [str(v).upper() for v in (want if isinstance(want, list) else [want])]


def vbios(snapshot: Snapshot, ctx: Context) -> list:
    if snapshot.nvml is None or not snapshot.nvml.available:
        return [na(ID, "NVML unavailable: VBIOS not read")]
    gpus = [g for g in selected_gpus(snapshot, ctx) if g.vbios]
    if not gpus:
        return [na(ID, "no GPU reported its VBIOS version")]
    want = _expected(ctx)
    if want is not None:
        off = [g for g in gpus if g.vbios.upper() not in want]
        return [_found(ctx, "vbios", f"{g.subject} VBIOS {g.vbios}, not the site's ({', '.join(want)})", g.subject,
                       value=g.vbios, threshold=want) for g in off]
    out = []
    models: dict[str, list] = defaultdict(list)
    for g in gpus:
        models[g.name or "?"].append(g)
    for model, members in models.items():
        by = _groups((g.subject, g.vbios) for g in members)
        if len(by) > 1:
            out.append(_found(ctx, "vbios", f"VBIOS differs across the {len(members)} {model} GPUs: {_spread(by)}",
                              value=list(by)))
    return out


def _family(version: str) -> str:
    return version.split(".", 1)[0]


def hca_firmware(snapshot: Snapshot, ctx: Context) -> list:
    hcas = {p.device: p.fw_ver for p in snapshot.ib_ports or () if p.fw_ver}
    families: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for hca, fw in hcas.items():
        families[_family(fw)].append((hca, fw))
    out = []
    for family, members in sorted(families.items()):
        by = _groups(members)
        if len(by) > 1:
            out.append(_found(ctx, "hca_firmware", f"HCA firmware differs across the {len(members)} HCAs of family "
                              f"{family}: {_spread(by)}", value=list(by)))
    return out


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    found = vbios(snapshot, ctx) + hca_firmware(snapshot, ctx)
    problems = [r for r in found if r.status is not Status.NA]
    if problems:
        return CheckOutput(found)
    return CheckOutput(found + [result(ID, Status.PASS, _summary(snapshot, ctx))])


def _summary(snapshot: Snapshot, ctx: Context) -> str:
    parts = []
    gpus = [g for g in selected_gpus(snapshot, ctx) if g.vbios] if snapshot.nvml and snapshot.nvml.available else []
    if gpus:
        by = _groups((g.subject, g.vbios) for g in gpus)
        parts.append("VBIOS " + ", ".join(f"{v} on {len(d)} GPU{'s' * (len(d) > 1)}" for v, d in by.items()))
    hcas = {p.device: p.fw_ver for p in snapshot.ib_ports or () if p.fw_ver}
    if hcas:
        by = _groups(hcas.items())
        parts.append("HCA firmware " + ", ".join(f"{v} on {len(d)} HCA{'s' * (len(d) > 1)}" for v, d in by.items()))
    elif snapshot.ib_ports is None:
        parts.append("HCAs not read")
    return "; ".join(parts) or "no firmware version reported"


def _validate(t: dict[str, Any]) -> list[str]:
    errors = [f"{key}: must be one of warn, fail, got {t.get(key)!r}" for key in ("vbios", "hca_firmware")
              if t.get(key) not in LEVELS]
    want = t.get("vbios_expected")
    if want is not None and not (isinstance(want, str) and want) and not (
            isinstance(want, list) and all(isinstance(v, str) and v for v in want)):
        errors.append(f"vbios_expected: must be a version or a list of versions, got {want!r}")
    return errors


CHECKS = [
    Check(
        id=ID,
        needs=(NVML,),
        optional=(IB,),  # a node without HCAs still has its GPUs' VBIOS judged
        judge=judge,
        stages=("passive", "bootstrap"),  # firmware changes at a flash and a reboot, not between jobs
        timeout_s=10.0,
        defaults={"vbios_expected": None, "vbios": "warn", "hca_firmware": "warn"},
        validate=_validate,
        doc="GPUs' VBIOS the same per model (or the site's vbios_expected), HCA firmware the same per device "
            "family; WARN, or FAIL (drain + ticket) where vbios/hca_firmware say fail",
    )
]
