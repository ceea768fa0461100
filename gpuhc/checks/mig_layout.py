"""mig-layout: are the GPUs' MIG instances the ones the node should have, and the job's there?

A GPU in MIG mode keeps its mode across a reboot, but its GPU and compute instances are gone
after a reboot or a GPU reset until something re-creates them (nvidia-mig-parted, a boot
script). Slurm then schedules jobs onto slices that do not exist. That is a configuration lost,
not a broken board, so it is its own finding (docs/checks.md, "mig-layout"):

- Against the baseline (``gpuhc baseline capture`` records each GPU's MIG mode and instances,
  ``gi<N>/ci<M> <profile>``): MIG mode changed, or an instance missing, FAILs with action
  ``drain + recreate MIG instances`` (no ladder step: re-creating a layout is the admin's tool's
  job; not counted by the lemon rule, gpuhc/slurm/repair/lemons.py). An instance the baseline lacks
  WARNs (re-capture after an intended change).
- A job's slice (the prolog and epilog, gpuhc/node/gpumap.py) that is not on its GPU now FAILs the
  same way, whatever the baseline says: the job was given a device that is not there.
- No baseline, no MIG anywhere and no job slice: nothing to say (n/a).

The parent GPU's hardware (ECC, Xid, NVLink, thermal, power) is judged by the other checks on
the parent, as for any GPU.
"""

from __future__ import annotations

from gpuhc.checks.base import NVML, STAGES, Check, CheckOutput, Context, na, result
from gpuhc.model.nvml import MigInstance
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "mig-layout"


def layout_entry(inst: MigInstance) -> str:
    """How the baseline records one MIG device: ``gi1/ci0 1g.10gb`` (the profile from its name)."""
    name = inst.name or ""
    profile = name.rsplit(" ", 1)[-1] if " MIG " in name else name
    return f"{inst.label} {profile}".strip()


def _against_baseline(snapshot: Snapshot, baseline: dict | None) -> list:
    gpus = baseline.get("gpus") if baseline else None
    if not isinstance(gpus, dict):
        return []
    out = []
    for gpu in snapshot.nvml.gpus:
        known = gpus.get(norm_pci(gpu.pci_bus_id)) if gpu.pci_bus_id else None
        if not isinstance(known, dict) or "mig_mode" not in known or gpu.lost:
            continue
        s = gpu.subject
        if bool(known["mig_mode"]) != bool(gpu.mig_mode):
            now, was = ("on" if gpu.mig_mode else "off"), ("on" if known["mig_mode"] else "off")
            out.append(result(ID, Status.FAIL, f"{s} MIG mode {now}, baseline has it {was}", s,
                              value=now, threshold=was, action=Action.RECREATE_MIG))
            continue
        want = {str(e) for e in known.get("mig") or [] if isinstance(e, str)}
        have = {layout_entry(i) for i in gpu.mig}
        missing, extra = sorted(want - have), sorted(have - want)
        if missing:
            out.append(result(ID, Status.FAIL, f"{s} MIG instances missing: {', '.join(missing)} "
                              f"({len(have)} of {len(want)} present; lost in a reboot or reset?)", s,
                              value=sorted(have), threshold=sorted(want), action=Action.RECREATE_MIG))
        elif extra:
            out.append(result(ID, Status.WARN, f"{s} MIG instances not in the baseline: {', '.join(extra)} "
                              "(re-capture the baseline after an intended change)", s,
                              value=sorted(have), threshold=sorted(want)))
        elif want:
            out.append(result(ID, Status.PASS, f"{s} MIG layout as in the baseline ({len(have)} instances)", s,
                              value=len(have)))
    return out


def _job_slices(snapshot: Snapshot, ctx: Context) -> list:
    job = ctx.job
    if job is None:
        return []
    by_pci = {norm_pci(g.pci_bus_id): g for g in snapshot.nvml.gpus if g.pci_bus_id}
    out = []
    for m in job.devices:
        if not m.mig or m.pci is None:
            continue  # a whole GPU; one gone from NVML is gpu-count's finding
        gpu = by_pci.get(m.pci)
        if gpu is None:
            continue
        there = [i for i in gpu.mig if i.gi == m.gi and (m.ci is None or i.ci == m.ci)]
        where = f"gi{m.gi}" + ("" if m.ci is None else f"/ci{m.ci}")
        if not there:
            out.append(result(ID, Status.FAIL, f"{gpu.subject}: Slurm's GPU {m.index} is MIG {where}, which the GPU "
                              "does not have now (MIG instances lost?)", gpu.subject, value=m.index,
                              action=Action.RECREATE_MIG))
        else:
            out.append(result(ID, Status.PASS, f"{gpu.subject} MIG {where} present (Slurm's GPU {m.index})",
                              gpu.subject, value=m.index))
    return out


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    nvml = snapshot.nvml
    if nvml is None or not nvml.available:
        return CheckOutput([na(ID, "NVML unavailable (gpu-count judges that)")])
    results = _job_slices(snapshot, ctx) + _against_baseline(snapshot, ctx.baseline)
    if not results:
        on = [g.subject for g in nvml.gpus if g.mig_mode]
        why = (f"{len(on)} GPU(s) in MIG mode, no MIG layout in the baseline" if on
               else "no GPU in MIG mode")
        return CheckOutput([na(ID, why)])
    return CheckOutput(results)


CHECKS = [
    Check(
        id=ID,
        needs=(NVML,),
        judge=judge,
        stages=STAGES,
        timeout_s=10.0,
        doc="the GPUs' MIG instances as in the baseline, and a job's MIG slice present on its GPU",
    )
]
