"""power: is any GPU power-capped below what the model should run at, and is persistence on?

A GPU whose enforced power limit sits below its model's rated limit runs every job slowly and,
in a synchronous training job, slows all the other GPUs to its pace. The cap is usually left
behind by someone's ``nvidia-smi -pl`` or by an out-of-band (BMC) power policy; a driver reload
restores the default, so the action is drain + reboot. The expectation is the profile's
``expected_limit_w`` (700 W on H100/H200 SXM, 400 W on A100 SXM4) or, for unknown models, the
GPU's own default limit; ``tolerance_pct`` absorbs rounding (NVML reports milliwatts).

Persistence mode off is a WARN: without it the driver tears the GPU state down whenever no
process holds it, and every NVML init (every health check, every job start) pays seconds per
GPU instead of ~10 ms (docs/facts.md, "NVML").
"""

from __future__ import annotations

from gpuhc.checks.base import Context, GpuJudge, per_gpu_check, result
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "power"


def _expected(gpu: GpuReading, ctx: Context) -> float | None:
    expected = ctx.t("expected_limit_w")
    if not isinstance(expected, (int, float)) or isinstance(expected, bool) or expected <= 0:
        return gpu.power_default_limit_w
    return expected


def _findings(gpu: GpuReading, ctx: Context) -> list[Result]:
    s = gpu.subject
    out: list[Result] = []
    expected = _expected(gpu, ctx)
    if gpu.power_limit_w is not None and expected:
        floor = expected * (1 - (ctx.t("tolerance_pct", 5.0) or 0) / 100.0)
        if gpu.power_limit_w < floor:
            out.append(result(ID, Status.FAIL, f"{s} power limit {gpu.power_limit_w:.0f} W < expected {expected:.0f} W",
                              s, value=gpu.power_limit_w, threshold=expected, action=Action.DRAIN_REBOOT))
    if gpu.persistence_mode is False and ctx.t("require_persistence", True):
        out.append(result(ID, Status.WARN, f"{s} persistence mode off (slow NVML init)", s, value=False, threshold=True))
    return out


def _plan(snapshot: Snapshot, ctx: Context, gpus: list[GpuReading]) -> GpuJudge:
    def unsupported(gpu: GpuReading) -> str | None:
        # Judged when the limit has something to be compared with, or persistence was read.
        if (gpu.power_limit_w is not None and _expected(gpu, ctx)) or gpu.persistence_mode is not None:
            return None
        return "power limit not supported"

    def clean(gpu: GpuReading) -> Result:
        limit = f"power limit {gpu.power_limit_w:.0f} W" if gpu.power_limit_w is not None else "power limit n/a"
        return result(ID, Status.PASS, f"{gpu.subject} {limit}", gpu.subject, value=gpu.power_limit_w)

    return GpuJudge(unsupported, lambda gpu: _findings(gpu, ctx), clean)


CHECKS = [
    per_gpu_check(
        ID, _plan,
        stages=("passive", "epilog", "bootstrap"),
        defaults={
            "expected_limit_w": None,  # the profile's rated limit; else the GPU's default limit
            "tolerance_pct": 5.0,
            "require_persistence": True,
        },
        doc="enforced power limit vs the model's rated limit; persistence mode",
    )
]
