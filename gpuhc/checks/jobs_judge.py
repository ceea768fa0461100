"""The job checks' signatures, pure: what one node's view of a running job looks like.

Measured on 4x H100 SXM (issue 24; docs/checks.md, "jobs"), with NVML sampled every 2 s:

- training: utilization 98-99 %, memory utilization 30-32 %, ~695 W on every GPU;
- collective hang: the waiting GPUs at utilization 100 % (the NCCL kernel spins), memory
  utilization 0 %, ~130 W; the stalled rank's GPU at utilization 0 %, ~125 W;
- idle (data loading, a checkpoint, a paused stage): utilization 0 % on every GPU;
- straggler (a second process on one GPU): that GPU ~690 W and memory utilization 30 %, the
  three waiting for it 400-470 W and 12-16 %; utilization 99-100 % on all four, so utilization
  alone shows nothing.

So each GPU is classed over the window by its samples, and a job by its GPUs' classes. A GPU is
classed only when every sample agrees (``min``/``max``, not the mean): a brief wait inside a
healthy step must not read as a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuhc.model import GpuActivity, GpuReading

IDLE, SPIN, BUSY, OTHER, UNKNOWN = "idle", "spin", "busy", "other", "unknown"
HANG, STRAGGLER, RUNNING, ALL_IDLE = "hang", "straggler", "running", "idle"

DEFAULTS: dict[str, Any] = {
    "window_s": 15.0,  # the driver's buffered samples of the last this many seconds (H100: it keeps ~14 s)
    "gpm_window_s": 0.0,  # GPM SM activity over this long (0: not measured; it waits that long)
    "min_span_s": 2.0,  # fewer seconds of samples than this: the GPU is not judged this run
    "idle_util_max": 5.0,  # every utilization sample at or under this: idle
    "spin_util_min": 90.0,  # every utilization sample at or over this ...
    "spin_mem_util_max": 5.0,  # ... with every memory-utilization sample at or under this ...
    "spin_power_frac_max": 0.35,  # ... and mean power under this share of the limit (130 of 700 W): spin
    "busy_util_min": 90.0,  # mean utilization at or over this with memory traffic: busy
    "hang_min_s": 12.0,  # a hang is called once it has lasted this long (within the buffer: one run can call it)
    "straggler_power_ratio": 1.25,  # the busiest GPU's power over its peers' median (690 vs 400-470 W)
    "straggler_mem_ratio": 1.5,  # and its memory utilization over theirs (30 vs 12-16 %)
    "straggler_min_s": 12.0,  # a straggler is called once it has lasted this long
    "drain_culprit_jobs": 0,  # opt-in: a node that is the culprit of this many jobs is drained (0: never)
    "culprit_memory_s": 7 * 86400.0,  # how long a culprit finding counts toward that
    "drain_culprit_with_hardware": False,  # opt-in: drain when the hang's culprit GPU also shows a hardware sign
    "requeue_after_s": 0.0,  # opt-in: a job hung this long, culprit node named, is requeued without it (0: never)
    # off: a process with no slurmstepd cgroup names its job only through SLURM_JOB_ID, which its
    # owner can set to any job id (docs/security.md); on, only for a site without cgroups
    "environ_fallback": False,
}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _median(values) -> float:
    # (not the statistics module: it pulls in fractions and decimal, on every health check)
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def gpu_class(g: GpuActivity, t: dict[str, Any]) -> str:
    """idle / spin / busy / other, or unknown when the samples cover too little time."""
    if not g.gpu_util or g.span_s < float(t["min_span_s"]):
        return UNKNOWN
    if max(g.gpu_util) <= float(t["idle_util_max"]):
        return IDLE
    mem_max = max(g.mem_util) if g.mem_util else None
    power = _mean(g.power_w)
    if min(g.gpu_util) >= float(t["spin_util_min"]) and mem_max is not None and mem_max <= float(t["spin_mem_util_max"]):
        low_power = power is None or not g.power_limit_w or power <= float(t["spin_power_frac_max"]) * g.power_limit_w
        return SPIN if low_power else OTHER
    mem = _mean(g.mem_util)
    if _mean(g.gpu_util) >= float(t["busy_util_min"]) and mem is not None and mem > float(t["spin_mem_util_max"]):
        return BUSY
    return OTHER


@dataclass
class JobView:
    """One node's view of one job in one run."""

    job: str
    signature: str  # hang / straggler / running / idle / unknown
    classes: dict[int, str]  # GPU index -> class
    culprits: list[int] = field(default_factory=list)  # GPU indices (a hang's idle GPUs, the straggler)
    span_s: float = 0.0  # the shortest sample span of the job's GPUs
    evidence: str = ""


def job_view(job: str, gpus: list[GpuActivity], t: dict[str, Any]) -> JobView:
    classes = {g.index: gpu_class(g, t) for g in gpus}
    spans = [g.span_s for g in gpus if classes[g.index] != UNKNOWN]
    view = JobView(job, RUNNING, classes, span_s=min(spans) if spans else 0.0)
    kinds = set(classes.values())
    if UNKNOWN in kinds:
        view.signature = UNKNOWN
    elif kinds == {IDLE}:
        view.signature = ALL_IDLE  # data loading, a checkpoint, a paused stage: never a hang
    elif SPIN in kinds and kinds <= {SPIN, IDLE}:
        view.signature = HANG
        view.culprits = sorted(i for i, c in classes.items() if c == IDLE)
        view.evidence = _hang_evidence(gpus, classes)
    elif kinds == {BUSY} and len(gpus) >= 2:
        slow = straggler(gpus, t)
        if slow is not None:
            view.signature = STRAGGLER
            view.culprits = [slow[0]]
            view.evidence = slow[1]
    return view


def _hang_evidence(gpus: list[GpuActivity], classes: dict[int, str]) -> str:
    parts = []
    for g in gpus:
        power = _mean(g.power_w)
        watts = f" {power:.0f} W" if power is not None else ""
        parts.append(f"gpu{g.index} {classes[g.index]} (util {min(g.gpu_util):.0f}-{max(g.gpu_util):.0f} %, "
                     f"mem {max(g.mem_util) if g.mem_util else 0:.0f} %{watts})")
    return "; ".join(parts)


def straggler(gpus: list[GpuActivity], t: dict[str, Any]) -> tuple[int, str] | None:
    """(GPU index, evidence) of the one GPU markedly busier than its peers, which wait for it:
    more power and more memory traffic (and SM activity where GPM measured it) than the peers'
    median by the configured ratios. None when no GPU stands out."""
    power = {g.index: _mean(g.power_w) for g in gpus}
    if any(p is None for p in power.values()):
        return None
    top = max(gpus, key=lambda g: power[g.index])
    peers = [g for g in gpus if g is not top]
    peer_power = _median(power[g.index] for g in peers)
    if peer_power <= 0 or power[top.index] < float(t["straggler_power_ratio"]) * peer_power:
        return None
    mem = _mean(top.mem_util) or 0.0
    peer_mem = _median(_mean(g.mem_util) or 0.0 for g in peers)
    if mem < float(t["straggler_mem_ratio"]) * max(peer_mem, 1.0):
        return None
    text = (f"gpu{top.index} {power[top.index]:.0f} W, memory {mem:.0f} % while its {len(peers)} peers wait "
            f"at {peer_power:.0f} W, {peer_mem:.0f} %")
    sm = [g.sm_activity for g in peers if g.sm_activity is not None]
    if top.sm_activity is not None and sm:
        text += f"; SM activity {top.sm_activity:.0f} % vs {_median(sm):.0f} %"
    clocks = [g.sm_clock_mhz for g in peers if g.sm_clock_mhz]
    if top.sm_clock_mhz and clocks:
        text += f"; SM clock {top.sm_clock_mhz:.0f} vs {_median(clocks):.0f} MHz"
    return top.index, text


def hardware_signs(g: GpuReading) -> list[str]:
    """What the GPU's own counters say is wrong with it in this run (the NVML read the health
    check makes anyway): the evidence that turns "this GPU stalled a job" into a hardware fault."""
    from gpuhc.checks.clocks import HW_POWER_BRAKE, HW_SLOWDOWN, HW_THERMAL

    signs = []
    if g.lost:
        signs.append("GPU lost")
    if g.ecc_volatile_uncorrected:
        signs.append(f"{g.ecc_volatile_uncorrected} uncorrectable ECC errors")
    if g.remap_pending or g.remap_failure:
        signs.append("row remapping pending" if g.remap_pending else "row remapping failed")
    bits = 0
    for sample in g.clock_event_samples:
        bits |= sample
    for bit, words in ((HW_THERMAL, "HW thermal slowdown"), (HW_POWER_BRAKE, "HW power brake"), (HW_SLOWDOWN, "HW slowdown")):
        if bits & bit:
            signs.append(words)
    if g.fabric_state not in (None, "completed", "not_supported"):
        signs.append(f"fabric {g.fabric_state}")
    return signs


def validate(t: dict[str, Any]) -> list[str]:
    problems = []
    for key, default in DEFAULTS.items():
        v = t.get(key)
        if isinstance(default, bool):
            if not isinstance(v, bool):
                problems.append(f"{key}: must be true or false, got {v!r}")
        elif not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or v < 0:
            problems.append(f"{key}: must be a number >= 0, got {v!r}")
    for key in ("straggler_power_ratio", "straggler_mem_ratio"):
        v = t.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 1:
            problems.append(f"{key}: must be over 1 (a ratio to the peers), got {v!r}")
    w = t.get("window_s")
    if isinstance(w, (int, float)) and not isinstance(w, bool) and not 0.5 <= w <= 600:
        problems.append(f"window_s: must be between 0.5 and 600 seconds, got {w!r}")
    g = t.get("gpm_window_s")
    if isinstance(g, (int, float)) and not isinstance(g, bool) and g > 1:
        problems.append(f"gpm_window_s: at most 1 second (the health check waits that long), got {g!r}")
    return problems
