"""ecc: uncorrectable memory errors, row remapping (Ampere+) and page retirement (older GPUs).

What each signal means for the node, and so which action it carries:

- volatile uncorrected ECC > 0: an uncorrectable error hit since the driver loaded. On A100/H100
  the error is contained and the page offlined, but the damaged row is repaired (remapped) only
  by a GPU reset, so: FAIL, reset GPU.
- remap pending: a row is marked for remapping and waits for a reset: FAIL, reset GPU.
- remap failure: a bank ran out of spare rows, the memory can no longer heal itself. NVIDIA's
  memory-error guidance treats this as grounds for returning the board: FAIL, drain + ticket.
- rows remapped for *uncorrectable* errors reaching ``remap_uncorrectable_fail``: each bank has
  only a few spare rows, and a GPU that keeps taking uncorrectable hits is wearing out well
  before the first bank is exhausted; we ask for a ticket at 8 (tunable per site).
- pre-Ampere page retirement: the frame buffer can retire at most 64 pages, so 60 retired
  (single- plus double-bit) is the end of the road: drain + ticket; a retirement pending until
  the next driver load: reset GPU.
- ECC switched off: the GPU silently corrupts data instead of reporting it: WARN (a site may run
  without ECC on purpose; set ``require_ecc: false``).

Corrected (single-bit) errors are not judged: they are the mechanism working.
"""

from __future__ import annotations

from gpuhc.checks.base import Context, GpuJudge, per_gpu_check, result
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "ecc"


def _gpu_findings(gpu: GpuReading, ctx: Context) -> list[Result]:
    s = gpu.subject
    out: list[Result] = []
    if gpu.ecc_mode is False and ctx.t("require_ecc", True):
        out.append(result(ID, Status.WARN, f"{s} ECC disabled", s, value=False, threshold=True))
    if gpu.ecc_volatile_uncorrected is not None and gpu.ecc_volatile_uncorrected > 0:
        n = gpu.ecc_volatile_uncorrected
        out.append(result(ID, Status.FAIL, f"{s} {n} uncorrectable ECC error(s) since driver load (reset needed)",
                          s, value=n, threshold=0, action=Action.RESET_GPU))
    if gpu.remap_failure:
        out.append(result(ID, Status.FAIL, f"{s} row remap failure (spare rows exhausted)",
                          s, value=True, action=Action.DRAIN_TICKET))
    if gpu.remap_pending:
        out.append(result(ID, Status.FAIL, f"{s} row remap pending (reset needed)",
                          s, value=True, action=Action.RESET_GPU))
    limit = ctx.t("remap_uncorrectable_fail", 8)
    if gpu.remap_uncorrectable is not None and limit and gpu.remap_uncorrectable >= limit:
        out.append(result(ID, Status.FAIL, f"{s} {gpu.remap_uncorrectable} rows remapped for uncorrectable errors (limit {limit})",
                          s, value=gpu.remap_uncorrectable, threshold=limit, action=Action.DRAIN_TICKET))
    sbe, dbe = gpu.retired_pages_sbe, gpu.retired_pages_dbe
    limit = ctx.t("retired_pages_fail", 60)
    if sbe is not None and dbe is not None and limit and sbe + dbe >= limit:
        out.append(result(ID, Status.FAIL, f"{s} {sbe + dbe} retired pages (limit {limit})",
                          s, value=sbe + dbe, threshold=limit, action=Action.DRAIN_TICKET))
    if gpu.retired_pages_pending:
        out.append(result(ID, Status.FAIL, f"{s} page retirement pending (reset needed)",
                          s, value=True, action=Action.RESET_GPU))
    return out


def _judged_anything(gpu: GpuReading) -> bool:
    fields = (gpu.ecc_mode, gpu.ecc_volatile_uncorrected, gpu.remap_pending, gpu.remap_failure,
              gpu.remap_uncorrectable, gpu.retired_pages_pending, gpu.retired_pages_sbe)
    return any(f is not None for f in fields)


def _clean(gpu: GpuReading) -> Result:
    remaps = gpu.remap_uncorrectable
    extra = f", {remaps} uncorrectable remaps" if remaps else ""
    return result(ID, Status.PASS, f"{gpu.subject} no uncorrectable ECC errors{extra}",
                  gpu.subject, value=gpu.ecc_volatile_uncorrected)


def _plan(snapshot: Snapshot, ctx: Context, gpus: list[GpuReading]) -> GpuJudge:
    return GpuJudge(unsupported=lambda gpu: None if _judged_anything(gpu) else "ECC counters not supported",
                    findings=lambda gpu: _gpu_findings(gpu, ctx), clean=_clean)


CHECKS = [
    per_gpu_check(
        ID, _plan,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        defaults={
            "require_ecc": True,
            # Ticket once this many rows were remapped for uncorrectable errors (see module doc).
            "remap_uncorrectable_fail": 8,
            # Pre-Ampere: 64 pages can be retired in all; 60 leaves no room for the next hit.
            "retired_pages_fail": 60,
        },
        doc="uncorrectable ECC, row remap pending/failure, remapped rows and retired pages",
    )
]
