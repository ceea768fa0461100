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

from gpuhc.checks.base import NVML, Check, CheckOutput, Context, na, result, selected_gpus
from gpuhc.model import Action, GpuReading, Result, Snapshot, Status

ID = "power"


def _findings(gpu: GpuReading, ctx: Context) -> tuple[list[Result], bool]:
    """Problems, and whether anything could be judged at all."""
    s = gpu.subject
    out: list[Result] = []
    judged = False
    expected = ctx.t("expected_limit_w")
    if not isinstance(expected, (int, float)) or isinstance(expected, bool) or expected <= 0:
        expected = gpu.power_default_limit_w
    if gpu.power_limit_w is not None and expected:
        judged = True
        floor = expected * (1 - (ctx.t("tolerance_pct", 5.0) or 0) / 100.0)
        if gpu.power_limit_w < floor:
            out.append(result(ID, Status.FAIL, f"{s} power limit {gpu.power_limit_w:.0f} W < expected {expected:.0f} W",
                              s, value=gpu.power_limit_w, threshold=expected, action=Action.DRAIN_REBOOT))
    if gpu.persistence_mode is not None:
        judged = True
        if gpu.persistence_mode is False and ctx.t("require_persistence", True):
            out.append(result(ID, Status.WARN, f"{s} persistence mode off (slow NVML init)", s, value=False, threshold=True))
    return out, judged


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    if snapshot.nvml is None or not snapshot.nvml.available:
        return CheckOutput([na(ID, "NVML unavailable")])
    results: list[Result] = []
    for gpu in selected_gpus(snapshot, ctx):
        found, judged = _findings(gpu, ctx)
        if found:
            results.extend(found)
        elif not judged:
            results.append(na(ID, f"{gpu.subject} power limit not supported", gpu.subject))
        else:
            limit = f"power limit {gpu.power_limit_w:.0f} W" if gpu.power_limit_w is not None else "power limit n/a"
            results.append(result(ID, Status.PASS, f"{gpu.subject} {limit}", gpu.subject, value=gpu.power_limit_w))
    return CheckOutput(results)


CHECKS = [
    Check(
        id=ID,
        needs=(NVML,),
        judge=judge,
        stages=("passive", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={
            "expected_limit_w": None,  # the profile's rated limit; else the GPU's default limit
            "tolerance_pct": 5.0,
            "require_persistence": True,
        },
        doc="enforced power limit vs the model's rated limit; persistence mode",
    )
]
