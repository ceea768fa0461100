"""GPU speed under load: the burn-in's TFLOP/s per GPU and the clocks NVML saw meanwhile.

No workload of its own: the burn-in already ran every GPU flat out, so its timings are the
speed measurement, and the NVML samples taken during it say *why* a GPU was slow. Clock-event
reasons on an idle GPU mean little; under a sustained GEMM, SW power capping is normal on
H100/H200 (they run at their power limit), while hardware slowdown, hardware thermal slowdown
and power-brake slowdown mean the GPU is protecting itself from heat or a power fault: that is
a hardware finding even when the speed still passes.

Actions: slow without a hardware reason -> drain + reboot (clears a stuck clock or power state);
hardware throttling -> drain + hardware ticket (cooling or power delivery needs a person).
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.rates import Finding, gpu_order, judge_rates
from gpuhc.model.result import Action, Result, Status

CHECK = "gpu-speed"
HW_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def judge(data: dict[str, Any], thr: dict[str, Any]) -> list[Result]:
    expected = thr.get("tflops") or {}
    findings: dict[str, Finding] = {}
    values: dict[str, dict[str, Any]] = {}
    # the timed precisions only: the burn-in's correctness pass (data["checked"]) runs a fraction
    # of a second on smaller matrices after the NVML sampler stopped, and is no speed measurement
    for dt, dd in (data.get("dtypes") or {}).items():
        rates = {s: float(g.get("tflops") or 0.0) for s, g in (dd.get("gpus") or {}).items()}
        for s, v in rates.items():
            values.setdefault(s, {})[dt] = v
        judge_rates(rates, expected.get(dt), thr, dt, "TFLOP/s", findings)
    ticket: set[str] = set()
    nvml = data.get("nvml") or {}
    limit = float(thr.get("throttle_fail_fraction", 0.2))
    for subj, summ in nvml.items():
        f = findings.setdefault(subj, Finding())
        reasons = summ.get("reasons") or {}
        hw = {r: reasons[r] for r in HW_REASONS if reasons.get(r)}
        if hw:
            worst = max(hw.values())
            text = "under load: " + ", ".join(f"{r.replace('_', ' ')} in {v:.0%} of samples" for r, v in hw.items())
            if worst >= limit:
                f.add(Status.FAIL, text)
                ticket.add(subj)
            else:
                f.add(Status.WARN, text)
        if (reasons.get("sw_thermal_slowdown") or 0) >= limit:
            f.add(Status.WARN, f"under load: software thermal slowdown in {reasons['sw_thermal_slowdown']:.0%} of samples")
        values.setdefault(subj, {})["nvml"] = summ
    out = []
    for subj in sorted(findings, key=gpu_order):
        f = findings[subj]
        v = values.get(subj, {})
        clocks = v.get("nvml") or {}
        detail = _clock_text(clocks)
        if f.status is Status.PASS:
            rates = ", ".join(f"{dt} {x:.0f} TFLOP/s" for dt, x in v.items() if dt != "nvml")
            msg = f"{subj}: {rates}{detail}"
        else:
            msg = f"{subj}: " + "; ".join(f.texts) + detail
        action = Action.NONE
        if f.status is Status.FAIL:
            action = Action.DRAIN_TICKET if subj in ticket else Action.DRAIN_REBOOT
        out.append(Result(CHECK, f.status, msg, subj, v, {k: thr.get(k) for k in (
            "tflops", "min_fraction", "straggler_fraction", "straggler_warn_fraction", "throttle_fail_fraction")},
            action, evidence=f.evidence if f.status is Status.FAIL else None))
    return out


def _clock_text(s: dict) -> str:
    if not s or not s.get("n"):
        return ""
    parts = []
    if s.get("sm_mhz_median") is not None:
        parts.append(f"SM {s['sm_mhz_median']} MHz")
    if s.get("temp_c_max") is not None:
        parts.append(f"max {s['temp_c_max']} C")
    if s.get("power_w_max") is not None:
        parts.append(f"max {s['power_w_max']:.0f} W")
    return f" ({', '.join(parts)})" if parts else ""

