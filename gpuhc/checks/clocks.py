"""clocks: is the hardware holding a GPU's clocks down?

NVML's clock-event (throttle) reasons are a bitmask read several times per run
(``GpuReading.clock_event_samples``). Most reasons are normal operation: GPU_IDLE, application
clocks, the software power cap under full load, sync boost. Four mean the GPU is being slowed
against the job's will:

- HW_SLOWDOWN (0x8): the hardware's emergency brake, engaged by over-temperature, an external
  power-brake signal or excessive draw;
- HW_THERMAL_SLOWDOWN (0x40): the GPU or its memory passed the slowdown temperature;
- HW_POWER_BRAKE_SLOWDOWN (0x80): the baseboard asserted power brake (power supply trouble);
- SW_THERMAL_SLOWDOWN (0x20): the driver cuts clocks because the GPU runs above its max
  operating temperature.

A reason set in every sample is a stuck condition: FAIL with a hardware ticket, because none of
these are cured by a reboot (cooling, power delivery, a sensor). A reason seen in only some
samples is a transient: WARN. ``fail_on`` lists the reasons that may fail; a persistent reason
not in it only warns (a hot site might move ``sw_thermal`` out of it).

:func:`is_busy` also lives here because "is this GPU working?" is read from the same bitmask; the
PCIe and thermal checks ask it before judging link generation and temperature spread.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import Context, GpuJudge, SourceNeeds, per_gpu_check, result
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "clocks"

GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80

# Judged reasons: config name, bit, words for the drain reason. HW_SLOWDOWN comes last: it is
# the umbrella bit, reported alone only when the specific cause is not one of the others.
REASONS = (
    ("hw_thermal", HW_THERMAL, "HW thermal slowdown"),
    ("hw_power_brake", HW_POWER_BRAKE, "HW power brake"),
    ("sw_thermal", SW_THERMAL, "SW thermal slowdown"),
    ("hw_slowdown", HW_SLOWDOWN, "HW slowdown"),
)


def is_busy(gpu: GpuReading) -> bool | None:
    """True when the GPU is working, False when idle, None when the reading cannot tell.

    Idle wins any tie: a GPU_IDLE bit in any sample means it was idle for part of the run, and
    the callers (PCIe generation, temperature spread) must not judge a GPU that may be powering
    down its link or cooling off.
    """
    samples = gpu.clock_event_samples
    if any(s & GPU_IDLE for s in samples):
        return False
    if gpu.utilization_gpu is not None:
        return gpu.utilization_gpu > 0
    return True if samples else None


def _gpu_findings(gpu: GpuReading, fail_on: set[str]) -> list[Result]:
    samples = gpu.clock_event_samples
    n = len(samples)
    out: list[Result] = []
    explained = False  # a specific HW cause was present in every sample
    # The umbrella bit is worth its own finding only when some sample shows it without a
    # specific cause; otherwise the thermal / power-brake finding already says it all.
    unexplained = any(s & HW_SLOWDOWN and not s & (HW_THERMAL | HW_POWER_BRAKE) for s in samples)
    for name, bit, words in REASONS:
        hits = sum(1 for s in samples if s & bit)
        if not hits:
            continue
        if bit == HW_SLOWDOWN and (explained or not unexplained):
            continue
        if bit in (HW_THERMAL, HW_POWER_BRAKE) and hits == n:
            explained = True
        subject = gpu.subject
        if hits == n and name in fail_on:
            out.append(result(ID, Status.FAIL, f"{subject} clocks held down by {words} ({hits}/{n} samples)",
                              subject, value=hits, threshold=n, action=Action.DRAIN_TICKET))
        else:
            kind = "persistent" if hits == n else "intermittent"
            out.append(result(ID, Status.WARN, f"{subject} {kind} {words} ({hits}/{n} samples)",
                              subject, value=hits, threshold=n))
    return out


def _clean(gpu: GpuReading) -> Result:
    state = "idle" if is_busy(gpu) is False else "no slowdown"
    return result(ID, Status.PASS, f"{gpu.subject} clocks: {state}", gpu.subject,
                  value=f"0x{gpu.clock_event_samples[-1]:x}")


def _plan(snapshot: Snapshot, ctx: Context, gpus: list[GpuReading]) -> GpuJudge:
    fail_on = set(ctx.t("fail_on", []) or [])
    first: tuple[Result, ...] = ()
    unknown = _unknown_reasons(fail_on)
    if unknown:
        # A typo here would silently stop failing a real slowdown; say so (ERROR never drains).
        known = ", ".join(name for name, _, _ in REASONS)
        first = (result(ID, Status.ERROR, f"unknown fail_on reason(s) {', '.join(unknown)} (known: {known})",
                        value=unknown),)
    return GpuJudge(unsupported=lambda gpu: None if gpu.clock_event_samples else "no clock-event reason samples",
                    findings=lambda gpu: _gpu_findings(gpu, fail_on), clean=_clean, first=first)


def _unknown_reasons(fail_on: Any) -> list[str]:
    return sorted(map(str, set(fail_on) - {name for name, _, _ in REASONS}))


def _setting_errors(thresholds: dict[str, Any]) -> list[str]:
    fail_on = thresholds.get("fail_on") or []
    if not isinstance(fail_on, list) or not all(isinstance(x, str) for x in fail_on):
        return [f"fail_on: must be a list of clock-event reason names, got {fail_on!r}"]
    unknown = _unknown_reasons(fail_on)
    if unknown:
        return [f"fail_on: unknown reason(s) {', '.join(unknown)} (known: {', '.join(n for n, _, _ in REASONS)})"]
    return []


CHECKS = [
    per_gpu_check(
        ID, _plan,
        stages=("passive", "epilog", "bootstrap"),
        defaults={"fail_on": ["hw_thermal", "hw_power_brake", "hw_slowdown", "sw_thermal"]},
        doc="HW/SW thermal slowdown, power brake and HW slowdown clock-event reasons",
        validate=_setting_errors,
        # persistence is judged across samples; a stage without this check takes one
        source_needs=lambda r: SourceNeeds(clock_samples=True),
    )
]
