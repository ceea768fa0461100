"""thermal: GPU and memory temperatures, absolute and relative to the node's other GPUs.

Absolute limits come from the profile (NVIDIA's max-operating and slowdown temperatures per
model, see gpuhc/data/profiles/); at or above ``*_warn_c`` WARN, at or above ``*_fail_c`` FAIL
with drain + hardware ticket — a reboot does not fix fans, airflow or a dried thermal interface.

The gradient catches a cooling fault before the absolute limit does: GPUs in one chassis doing
the same work sit within a few degrees of each other, so a GPU far hotter than the median of its
busy siblings has a cooling problem of its own. It is judged only among busy GPUs (an idle GPU
next to a busy one is naturally cooler) and only when at least ``gradient_min_gpus`` are busy, so
that the median means something. ``gradient_warn_c`` above the median: WARN; ``gradient_fail_c``:
FAIL (0 disables a level).
"""

from __future__ import annotations

from gpuhc.checks.base import Context, GpuJudge, per_gpu_check, result
from gpuhc.checks.clocks import is_busy
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "thermal"


def _absolute(gpu: GpuReading, ctx: Context) -> list[Result]:
    out: list[Result] = []
    for what, temp in (("gpu", gpu.temp_gpu_c), ("mem", gpu.temp_mem_c)):
        if temp is None:
            continue
        warn, fail = ctx.t(f"{what}_warn_c"), ctx.t(f"{what}_fail_c")
        label = "GPU" if what == "gpu" else "memory"
        if fail and temp >= fail:
            out.append(result(ID, Status.FAIL, f"{gpu.subject} {label} temperature {temp} C >= {fail} C",
                              gpu.subject, value=temp, threshold=fail, action=Action.DRAIN_TICKET))
        elif warn and temp >= warn:
            out.append(result(ID, Status.WARN, f"{gpu.subject} {label} temperature {temp} C >= {warn} C",
                              gpu.subject, value=temp, threshold=warn))
    return out


def _gradient(all_gpus: list[GpuReading], judged: list[GpuReading], ctx: Context) -> dict[int, Result]:
    """Findings for GPUs much hotter than the median of their busy siblings, by GPU index.

    Siblings are all busy GPUs of the node, not only the judged ones: the prolog judges the
    job's GPUs, but the comparison needs the whole chassis.
    """
    warn, fail = ctx.t("gradient_warn_c", 0) or 0, ctx.t("gradient_fail_c", 0) or 0
    busy = [g for g in all_gpus if g.temp_gpu_c is not None and is_busy(g)]
    if (not warn and not fail) or len(busy) < max(2, ctx.t("gradient_min_gpus", 3) or 0):
        return {}
    busy_idx = {g.index for g in busy}
    out: dict[int, Result] = {}
    for gpu in judged:
        if gpu.index not in busy_idx:
            continue
        ref = median(g.temp_gpu_c for g in busy if g.index != gpu.index)
        delta = gpu.temp_gpu_c - ref
        msg = f"{gpu.subject} {gpu.temp_gpu_c} C is {delta:g} C above its busy siblings' median {ref:g} C"
        if fail and delta >= fail:
            out[gpu.index] = result(ID, Status.FAIL, msg, gpu.subject, value=delta, threshold=fail,
                                    action=Action.DRAIN_TICKET)
        elif warn and delta >= warn:
            out[gpu.index] = result(ID, Status.WARN, msg, gpu.subject, value=delta, threshold=warn)
    return out


def _clean(gpu: GpuReading, ctx: Context) -> Result:
    temps = [f"GPU {gpu.temp_gpu_c} C" if gpu.temp_gpu_c is not None else None,
             f"memory {gpu.temp_mem_c} C" if gpu.temp_mem_c is not None else None]
    return result(ID, Status.PASS, f"{gpu.subject} {', '.join(t for t in temps if t)}",
                  gpu.subject, value=gpu.temp_gpu_c, threshold=ctx.t("gpu_warn_c"))


def _plan(snapshot: Snapshot, ctx: Context, judged: list[GpuReading]) -> GpuJudge:
    gradient = _gradient(snapshot.nvml.gpus, judged, ctx)

    def findings(gpu: GpuReading) -> list[Result]:
        found = _absolute(gpu, ctx)
        if gpu.index in gradient:
            found.append(gradient[gpu.index])
        return found

    return GpuJudge(
        unsupported=lambda gpu: "temperatures not supported" if gpu.temp_gpu_c is None and gpu.temp_mem_c is None else None,
        findings=findings, clean=lambda gpu: _clean(gpu, ctx))


CHECKS = [
    per_gpu_check(
        ID, _plan,
        stages=("passive", "epilog", "bootstrap"),
        defaults={
            # Conservative, model-agnostic: above the slowdown point of current data-centre
            # parts (A100/H100: 89 C); profiles lower them to each model's own limits.
            "gpu_warn_c": 85,
            "gpu_fail_c": 90,
            "mem_warn_c": 90,
            "mem_fail_c": 95,
            "gradient_warn_c": 15,
            "gradient_fail_c": 25,
            "gradient_min_gpus": 3,
        },
        doc="GPU and HBM temperature limits; one GPU much hotter than its busy siblings",
    )
]


def median(values) -> float:
    # statistics.median would do, but importing statistics costs ~15 ms on every health check.
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
