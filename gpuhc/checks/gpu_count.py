"""gpu-count: is NVML alive, and does it see every GPU this node should have?

This is the one check that turns "NVML unavailable" into a failure; every other GPU check says
n/a then, so a dead driver gives one clear drain reason instead of seven. It runs in the prolog
too: a job must not land on a node whose GPU fell off the bus since the last passive run.

A node with no GPUs expected (``expected: 0``, or no expected count and no NVIDIA GPU on the
PCI bus) and no NVIDIA driver passes: a CPU node of a mixed cluster (docs/slurm.md, "Mixed
clusters"). A GPU node whose driver vanished still fails: its boards stay on the bus.

Expected count, in order (docs/slurm.md, "Expected GPUs"): what Slurm gives the node (the GPUs
in its ``Gres=`` in slurm.conf; the CLI puts it in ``node.expected_gpus`` and says so in
``node.expected_gpus_from``, gpuhc/slurm/read/slurmconf.py), else the baseline's ``gpu_count``, else
the config's ``node.expected_gpus`` (threshold ``expected``). With none, any non-zero count
passes. The count is node-wide even in the prolog: a missing GPU breaks the node, not only the
job that asked for it. A device the job was allocated (``SLURM_JOB_GPUS``, mapped through
gres.conf by gpuhc/node/gpumap.py) whose GPU NVML does not list fails too, with or without an
expected count; the GPU is held to its bus id, never to NVML's index.

The PCI bus is the expectation that needs no configuration: a GPU that fell off the bus often
drops out of NVML's list while sysfs still enumerates it (``Snapshot.pci_gpus``). Every NVIDIA
GPU on the bus that NVML does not list fails (drain + reboot: the reboot re-trains the link or
proves the board dead); threshold ``pci_bus: false`` turns this off. It is an optional source: a wedged sysfs read must not hold NVML's
verdict, so the check waits for it within its timeout and then judges without it.

Against a baseline it also checks what the boards are, node-wide like the count:
- a GPU whose NVML model is not the baseline's (``gpus.<pci>.name``, else ``gpu_model``) is the
  wrong board: FAIL, drain + hardware ticket. Unless the driver changed too: a new driver may
  name the same board differently, so that is a WARN asking to re-capture the baseline;
- another driver version than the baseline's WARNs (a roll-out is normal; re-capture);
- another serial number at a baseline bus id WARNs (the board was swapped: re-capture).
"""

from __future__ import annotations

import re

from gpuhc.checks.base import NVML, PCI, STAGES, Check, CheckOutput, Context, result
from gpuhc.model.nvml import GpuReading
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "gpu-count"


LOST_PREFIX = "unknown (NVML:"
# NVML's own word for a call that took too long (nvmlErrorString of NVML_ERROR_TIMEOUT), from
# whichever call it came back ("nvmlInit failed: Timeout", "nvmlDeviceGetCount failed: Timeout").
_TIMEOUT = re.compile(r"\bTimeout\b")
# The first words of the ERROR a timed-out NVML gives here. One such run is "could not judge";
# gpuhc/slurm/flows/wedged.py counts it with the runs whose NVML read hung, and two in a row drain.
TIMED_OUT = "NVML timed out"  # how the NVML source names a GPU that stopped answering


def _lost(gpu: GpuReading) -> str | None:
    """Why NVML gave up on this GPU, or None when it answers.

    The live source keeps a GPU that answers GPU_IS_LOST (or whose handle cannot be had) in the
    list, named ``unknown (NVML: <error>)``, so the count stays right and the name says why.
    A ``lost`` attribute, where a source sets one, means the same.
    """
    if gpu.name.startswith(LOST_PREFIX):
        return gpu.name[len(LOST_PREFIX):].rstrip(")").strip() or "GPU is lost"
    if getattr(gpu, "lost", False):
        return "GPU is lost"
    return None


def _missing_from_baseline(snapshot: Snapshot, baseline: dict | None) -> list[str]:
    """Baseline GPUs (by normalised PCI id) that NVML no longer enumerates, as 'gpuN (pci)'."""
    if not baseline or not isinstance(baseline.get("gpus"), dict):
        return []
    seen = {norm_pci(g.pci_bus_id) for g in snapshot.nvml.gpus}
    out = []
    for pci, info in sorted(baseline["gpus"].items()):
        if norm_pci(pci) not in seen:
            idx = info.get("index") if isinstance(info, dict) else None
            out.append(f"gpu{idx} ({norm_pci(pci)})" if idx is not None else norm_pci(pci))
    return out


def _invisible_on_bus(snapshot: Snapshot) -> list[str]:
    """GPUs the PCI bus lists but NVML does not (normalised PCI ids, bus order).

    A lost GPU that NVML keeps without a bus id (its handle could not be had) is one of them and
    already fails as lost; as many unmatched bus GPUs as there are such nameless GPUs are taken
    to be those. More than that, and which is which cannot be told: all are named.
    """
    if snapshot.pci_gpus is None or snapshot.nvml is None:
        return []
    listed = {norm_pci(g.pci_bus_id) for g in snapshot.nvml.gpus if g.pci_bus_id}
    nameless = sum(1 for g in snapshot.nvml.gpus if not g.pci_bus_id)
    unseen = sorted({norm_pci(p) for p in snapshot.pci_gpus} - listed)
    return unseen if len(unseen) > nameless else []


def _bus_phrase(pcis: list[str]) -> str:
    where = f"gpu at {pcis[0]}" if len(pcis) == 1 else f"gpus at {', '.join(pcis)}"
    return f"{where} on the PCI bus but not visible to NVML (fallen off the bus?)"


def _identity(snapshot: Snapshot, baseline: dict | None) -> list:
    """Model, driver and serial numbers against the baseline (see the module doc)."""
    nvml = snapshot.nvml
    if not baseline or nvml is None or not nvml.available:
        return []
    out = []
    base_driver = baseline.get("driver_version")
    driver_changed = bool(base_driver and nvml.driver_version and nvml.driver_version != base_driver)
    if driver_changed:
        out.append(result(
            ID, Status.WARN, f"driver {nvml.driver_version}, baseline captured with {base_driver} "
            "(re-capture the baseline after a driver roll-out)", value=nvml.driver_version, threshold=base_driver,
        ))
    per_gpu = baseline.get("gpus") if isinstance(baseline.get("gpus"), dict) else {}
    model = baseline.get("gpu_model")
    for gpu in nvml.gpus:
        if _lost(gpu) or not gpu.name:
            continue
        pci = norm_pci(gpu.pci_bus_id) if gpu.pci_bus_id else ""
        known = per_gpu.get(pci) if isinstance(per_gpu.get(pci), dict) else {}
        want = known.get("name") or model
        where = f"{gpu.subject} ({pci})" if pci else gpu.subject
        if want and gpu.name != want:
            if driver_changed:
                out.append(result(
                    ID, Status.WARN, f"{where} is {gpu.name}, baseline has {want} (the new driver may name it "
                    "differently: re-capture the baseline)", subject=gpu.subject, value=gpu.name, threshold=want,
                ))
            else:
                out.append(result(
                    ID, Status.FAIL, f"{where} is {gpu.name}, baseline has {want} (wrong board?)",
                    subject=gpu.subject, value=gpu.name, threshold=want, action=Action.DRAIN_TICKET,
                ))
        serial = known.get("serial")
        if serial and gpu.serial and gpu.serial != serial:
            out.append(result(
                ID, Status.WARN, f"{where} serial {gpu.serial}, baseline has {serial} (board swapped? "
                "re-capture the baseline)", subject=gpu.subject, value=gpu.serial, threshold=serial,
            ))
    return out


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    out = _judge(snapshot, ctx)
    out.results.extend(_identity(snapshot, ctx.baseline))
    nvml = snapshot.nvml
    if ctx.gpus is not None and nvml is not None and nvml.available:
        # GPUs Slurm allocated (the prolog's SLURM_JOB_GPUS, or `gpuhc check --gpus`) that NVML
        # does not list have vanished since gres.conf was written: the job would start without
        # them, and no other check would judge them. With no expected count configured this is
        # the only thing that notices, so it fails (drain + reboot, like any GPU gone from NVML).
        if ctx.job is not None:  # Slurm's devices, held to the GPU by bus id (gpuhc/node/gpumap.py)
            out.results.extend(_allocated_gone(nvml, ctx.job))
            return out
        listed = {g.index for g in nvml.gpus}
        absent = sorted(set(ctx.gpus) - listed)
        if absent:
            have = ", ".join(map(str, sorted(listed))) or "none"
            out.results.append(result(
                ID, Status.FAIL, f"allocated GPU(s) {', '.join(map(str, absent))} not listed by NVML "
                f"(it lists {have}): gone from the node?", value=absent, action=Action.DRAIN_REBOOT,
            ))
    return out


def _allocated_gone(nvml, job) -> list:
    """Slurm's devices of the job whose GPU NVML does not list (by bus id, or by minor where the
    GPU was already gone when the mapping was made)."""
    listed = {norm_pci(g.pci_bus_id) for g in nvml.gpus if g.pci_bus_id}  # a lost one fails above
    gone = [m for m in job.devices if m.pci is None or m.pci not in listed]
    if not gone:
        return []
    what = "; ".join(f"Slurm's GPU {m.index} (/dev/nvidia{m.minor}" + (f", {m.pci})" if m.pci else ")") for m in gone)
    return [result(ID, Status.FAIL, f"allocated {what} not listed by NVML: gone from the node?",
                   value=[m.index for m in gone], action=Action.DRAIN_REBOOT)]


def expected_count(ctx: Context) -> tuple[int | None, str]:
    """(count, where it comes from): Slurm's, else the baseline's, else the config's. A baseline
    is this node's own inventory, measured on it when it was known good; the config's count is a
    fallback written for many nodes at once."""
    expected = ctx.t("expected")
    if expected is not None and str(ctx.t("expected_from") or "").startswith("slurm.conf"):
        return expected, "slurm.conf"
    if ctx.baseline and isinstance(ctx.baseline.get("gpu_count"), int):
        return ctx.baseline["gpu_count"], "baseline"
    return expected, "configured"


def _no_gpus_here(snapshot: Snapshot, ctx: Context, why: str):
    """The verdict on a node without NVML that is not meant to have GPUs, or None when it is.

    slurm.conf's HealthCheckProgram, Prolog and Epilog run on every node, CPU nodes too
    (docs/slurm.md, "Mixed clusters"). A node configured with ``expected_gpus: 0`` has no GPUs
    to lose: no NVML is what it should look like. With no expected count (config or baseline),
    a PCI bus read that lists no NVIDIA GPU says the same. A GPU node whose driver vanished
    still has its boards on the bus (or an expected count), so it still fails below.
    """
    expected, source = expected_count(ctx)
    bus = snapshot.pci_gpus
    if expected == 0:
        said = {"slurm.conf": "Slurm gives this node no GPUs", "baseline": "the baseline's count is 0"}.get(
            source, "node.expected_gpus is 0")
        if bus:
            return result(ID, Status.WARN, f"{said}, but the PCI bus lists {len(bus)} NVIDIA "
                          f"GPU(s) and NVML is unavailable ({why}): a GPU node configured as a CPU node?",
                          value=len(bus), threshold=0)
        label = "node.expected_gpus: 0" if source == "configured" else said
        return result(ID, Status.PASS, f"no GPUs expected ({label}), no NVIDIA driver", value=0, threshold=0)
    if expected is None and bus == []:
        return result(ID, Status.PASS, "a CPU node: no NVIDIA GPU on the PCI bus and no NVIDIA driver "
                      "(no expected GPU count configured)", value=0)
    return None


def _judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    nvml = snapshot.nvml
    if nvml is None or not nvml.available:
        why = (nvml.error if nvml else None) or "no reading"
        cpu_node = _no_gpus_here(snapshot, ctx, why)
        if cpu_node is not None:
            return CheckOutput([cpu_node])
        if _TIMEOUT.search(why):
            # Busy, not gone: a driver that answers "Timeout" once (a GPU in a long call) is no
            # fault; one that keeps timing out is the wedged driver that docs/slurm.md drains.
            return CheckOutput([result(
                ID, Status.ERROR, f"{TIMED_OUT}: {why} (could not judge; timing out on consecutive health "
                "checks drains: a wedged driver)", value=why,
            )])
        return CheckOutput([result(
            ID, Status.FAIL, f"NVML unavailable: {why} (driver not loaded / GPU lost)",
            value=why, action=Action.DRAIN_REBOOT,
        )])

    results = []
    for gpu in nvml.gpus:
        why = _lost(gpu)
        if why:
            where = f" ({norm_pci(gpu.pci_bus_id)})" if gpu.pci_bus_id else ""
            results.append(result(
                ID, Status.FAIL, f"{gpu.subject}{where} lost: {why}",
                # A reboot first, as for Xid 79 (gpuhc/data/xid_catalog.yaml): it is the same fault.
                subject=gpu.subject, value=why, action=Action.DRAIN_REBOOT,
            ))

    count = len(nvml.gpus)
    expected, source = expected_count(ctx)
    missing = _missing_from_baseline(snapshot, ctx.baseline)
    # Node-wide, also in the prolog: a GPU gone from NVML is the node's problem, whoever's it is.
    on_bus = _invisible_on_bus(snapshot) if ctx.t("pci_bus", True) is not False else []
    if on_bus and (expected is None or count >= expected):
        # (Short of an expected count, the count's own FAIL below names them: one reason, not two.)
        for pci in on_bus:
            results.append(result(ID, Status.FAIL, _bus_phrase([pci]), subject=pci, value=pci,
                                  action=Action.DRAIN_REBOOT))

    if expected is None:
        if count == 0:
            results.append(result(ID, Status.WARN, "NVML sees no GPUs (no expected count configured)", value=0))
        elif not results:
            results.append(result(ID, Status.PASS, f"{count} GPUs visible", value=count))
        return CheckOutput(results)

    if count < expected:
        names = f"; missing {', '.join(missing)}" if missing else ""
        if on_bus:
            names += f"; {_bus_phrase(on_bus)}"
        results.append(result(
            ID, Status.FAIL, f"{count} of {expected} GPUs visible{names}",
            value=count, threshold=expected, action=Action.DRAIN_REBOOT,
        ))
    elif count > expected:
        # More GPUs than expected hurts no job; the config or baseline is out of date.
        results.append(result(
            ID, Status.WARN, f"{count} GPUs visible, {source} count is {expected}", value=count, threshold=expected,
        ))
    elif missing and not results:
        # Right count, wrong GPUs: a board was swapped or re-enumerated at another bus id. (A lost
        # GPU may have no bus id any more; its FAIL above already says enough.)
        results.append(result(
            ID, Status.WARN, f"GPU bus ids differ from baseline: {', '.join(missing)} not seen",
            value=count, threshold=expected,
        ))
    elif not results:
        results.append(result(ID, Status.PASS, f"{count} of {expected} GPUs visible", value=count, threshold=expected))
    return CheckOutput(results)


CHECKS = [
    Check(
        id=ID,
        needs=(NVML,),
        optional=(PCI,),  # the GPUs on the bus: names one NVML lost even with no expected count
        judge=judge,
        stages=STAGES,
        timeout_s=10.0,
        # pci_bus: false where NVML sees a subset of the bus on purpose (a container given some of
        # the host's GPUs still sees the whole bus in sysfs).
        defaults={"expected": None, "pci_bus": True},
        from_config={"expected": ("node", "expected_gpus"), "expected_from": ("node", "expected_gpus_from")},
        doc="NVML reachable, every expected GPU (and every GPU on the PCI bus) enumerated, none lost",
    )
]
