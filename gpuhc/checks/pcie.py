"""pcie: is each GPU's host link as wide and as fast as it should be, and is it clean?

- Width below the expectation is always a FAIL (drain + reboot): lanes do not power down to save
  energy, so x8 on an x16 slot means a lane failed to train (riser, retimer, seating) and the
  GPU gets half its host bandwidth. A reboot retrains the link; if it stays narrow the next run
  fails again and the drain policy escalates to a ticket.
- Generation is trickier: an idle GPU legitimately trains its link down to gen1 to save power.
  So the *current* generation is judged only while the GPU is busy (see clocks.is_busy); what is
  judged always is the link's *maximum* generation against the baseline (a BIOS update or a
  retimer fault that caps the link at gen4 shows there even on an idle GPU). Without a baseline,
  a maximum below the profile's generation only warns: it may be how the host is built.
- Replay counter (link-level retransmissions) and AER fatal / non-fatal counters are cumulative,
  so their GROWTH since the last run is judged, with state keyed ``<uuid>/replay`` and
  ``aer/<pci>/<kind>``; first sight and counter resets re-baseline. Replays: WARN at 10 per run,
  FAIL at 500 (a healthy link almost never replays); a fatal AER error: FAIL; non-fatal: WARN.
  Growth failures carry a hardware ticket: retransmitting links are a physical problem.

Expected values, most specific first: the node's baseline for that GPU (by PCI id), the
profile (``expected_width``, ``expected_gen``), then the GPU's own reported maximum.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import AER, NVML, Context, GpuJudge, per_gpu_check, result
from gpuhc.checks.clocks import is_busy
from gpuhc.model.host import AerCounters
from gpuhc.model.nvml import GpuReading
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "pcie"


def _baseline_gpu(gpu: GpuReading, ctx: Context) -> dict[str, Any]:
    gpus = (ctx.baseline or {}).get("gpus")
    if isinstance(gpus, dict):
        for pci, info in gpus.items():
            if norm_pci(pci) == norm_pci(gpu.pci_bus_id) and isinstance(info, dict):
                return info
    return {}


def _expected(gpu: GpuReading, ctx: Context, base: dict, what: str) -> int | None:
    """Expected ``width`` or ``gen``: baseline max, else profile, else the GPU's own max."""
    b = base.get(f"pcie_{what}_max")
    if isinstance(b, int):
        return b
    p = ctx.t(f"expected_{what}")
    if isinstance(p, int):
        return p
    return getattr(gpu, f"pcie_{what}_max")


def _link_findings(gpu: GpuReading, ctx: Context) -> list[Result]:
    s = gpu.subject
    out: list[Result] = []
    base = _baseline_gpu(gpu, ctx)
    width = _expected(gpu, ctx, base, "width")
    if gpu.pcie_width is not None and width is not None and gpu.pcie_width < width:
        out.append(result(ID, Status.FAIL, f"{s} PCIe link x{gpu.pcie_width} < expected x{width}",
                          s, value=gpu.pcie_width, threshold=width, action=Action.DRAIN_REBOOT))

    gen_max, base_gen = gpu.pcie_gen_max, base.get("pcie_gen_max")
    if gen_max is not None and isinstance(base_gen, int) and gen_max < base_gen:
        out.append(result(ID, Status.FAIL, f"{s} PCIe max gen{gen_max} < baseline gen{base_gen}",
                          s, value=gen_max, threshold=base_gen, action=Action.DRAIN_REBOOT))
    profile_gen = ctx.t("expected_gen")
    if gen_max is not None and not isinstance(base_gen, int) and isinstance(profile_gen, int) and gen_max < profile_gen:
        out.append(result(ID, Status.WARN, f"{s} PCIe max gen{gen_max} < expected gen{profile_gen} (host limit?)",
                          s, value=gen_max, threshold=profile_gen))

    gen = _expected(gpu, ctx, base, "gen")
    if gen is not None and gen_max is not None:
        gen = min(gen, gen_max)  # a capped maximum is reported above, not again for each run
    if gpu.pcie_gen is not None and gen is not None and gpu.pcie_gen < gen and is_busy(gpu):
        out.append(result(ID, Status.FAIL, f"{s} PCIe gen{gpu.pcie_gen} < expected gen{gen} under load",
                          s, value=gpu.pcie_gen, threshold=gen, action=Action.DRAIN_REBOOT))
    return out


def _grew(key: str, value: int | None, prev: dict, state: dict) -> int | None:
    """Growth of a cumulative counter since the last run; None on first sight or after a reset."""
    if value is None:
        return None
    state[key] = value
    before = prev.get(key)
    if not isinstance(before, int) or value < before:
        return None
    return value - before


def _counter_findings(gpu: GpuReading, aer: AerCounters | None, ctx: Context, state: dict) -> list[Result]:
    s = gpu.subject
    out: list[Result] = []
    prev = ctx.prev or {}
    delta = _grew(f"{gpu.uuid or gpu.subject}/replay", gpu.pcie_replay, prev, state)
    warn, fail = ctx.t("replay_warn", 0) or 0, ctx.t("replay_fail", 0) or 0
    if delta:
        if fail and delta >= fail:
            out.append(result(ID, Status.FAIL, f"{s} PCIe replays +{delta} since last run",
                              s, value=delta, threshold=fail, action=Action.DRAIN_TICKET))
        elif warn and delta >= warn:
            out.append(result(ID, Status.WARN, f"{s} PCIe replays +{delta} since last run", s, value=delta, threshold=warn))
    if aer is None:
        return out
    pci = norm_pci(aer.pci)
    fatal = _grew(f"aer/{pci}/fatal", aer.fatal, prev, state)
    limit = ctx.t("aer_fatal_fail", 1) or 0
    if fatal and limit and fatal >= limit:
        out.append(result(ID, Status.FAIL, f"{s} PCIe AER fatal errors +{fatal} since last run",
                          s, value=fatal, threshold=limit, action=Action.DRAIN_TICKET))
    nonfatal = _grew(f"aer/{pci}/nonfatal", aer.nonfatal, prev, state)
    limit = ctx.t("aer_nonfatal_warn", 1) or 0
    if nonfatal and limit and nonfatal >= limit:
        out.append(result(ID, Status.WARN, f"{s} PCIe AER non-fatal errors +{nonfatal} since last run",
                          s, value=nonfatal, threshold=limit))
    return out


def _clean(gpu: GpuReading) -> Result:
    link = f"gen{gpu.pcie_gen if gpu.pcie_gen is not None else '?'} x{gpu.pcie_width if gpu.pcie_width is not None else '?'}"
    idle = " (idle)" if is_busy(gpu) is False else ""
    return result(ID, Status.PASS, f"{gpu.subject} PCIe {link}{idle}", gpu.subject,
                  value={"gen": gpu.pcie_gen, "width": gpu.pcie_width})


def _plan(snapshot: Snapshot, ctx: Context, gpus: list[GpuReading]) -> GpuJudge:
    aer_by_pci = {norm_pci(a.pci): a for a in (snapshot.aer or [])}
    aer_of = {gpu.pci_bus_id: aer_by_pci.get(norm_pci(gpu.pci_bus_id)) for gpu in gpus}
    # Subset runs (prolog) keep the other GPUs' counter baselines; full runs start clean.
    state: dict[str, Any] = dict(ctx.prev or {}) if ctx.gpus is not None else {}

    def unsupported(gpu: GpuReading) -> str | None:
        if gpu.pcie_width is None and gpu.pcie_gen is None and gpu.pcie_replay is None and aer_of[gpu.pci_bus_id] is None:
            return "PCIe link state not supported"
        return None

    def findings(gpu: GpuReading) -> list[Result]:
        return _link_findings(gpu, ctx) + _counter_findings(gpu, aer_of[gpu.pci_bus_id], ctx, state)

    return GpuJudge(unsupported, findings, _clean, state=lambda: state)


CHECKS = [
    per_gpu_check(
        ID, _plan, needs=(NVML, AER),
        stages=("passive", "prolog", "epilog", "bootstrap"),
        defaults={
            "expected_width": None,  # profile / baseline; else the GPU's own max width
            "expected_gen": None,
            "replay_warn": 10,
            "replay_fail": 500,
            "aer_fatal_fail": 1,
            "aer_nonfatal_warn": 1,
        },
        doc="PCIe width always, generation under load or vs baseline; replay and AER growth",
    )
]
