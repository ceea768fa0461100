"""The job checks' signatures, pure: what one node's view of a running job looks like.

Measured on 4x H100 SXM (docs/checks.md, "jobs"), with NVML sampled every 2 s:

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

Issue 32 added what the GPU samples alone cannot say (docs/checks.md, "jobs"):

- **A pause is not a hang.** An idle GPU's rank whose process makes progress on the host (CPU
  time, bytes read or written, I/O wait: gpuhc/sources/job_procs.py) is pausing: rank 0 writing
  a checkpoint reads so. Only a rank that makes no progress while its peers spin is a culprit;
  a pause that lasts past ``pause_max_s`` is called a hang all the same.
- **Culprit on this node.** When every GPU of a one-node job spins, the culprit cannot be on
  another node: the GPU whose SM activity (GPM) stands out runs a kernel that does not end,
  else every rank waits (a collective mismatch or a stuck kernel), said as such. One GPU that
  computes while every peer waits is a pause too (one rank's evaluation) until ``pause_max_s``.
- **Software stragglers.** Every rank does the same work per step, so a GPU's mean memory
  utilisation over the window is its share of time at work: a peer at 10 % next to one at 24 %
  waits 58 % of each step for it, however short the steps are against the ~0.2 s samples. A
  pipeline's last stage does more work by design and reads the same: a job opts out through
  ``straggler_skip_names``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from gpuhc.model.activity import GpuActivity
from gpuhc.model.nvml import GpuReading
from gpuhc.model.record import Record

IDLE, SPIN, BUSY, OTHER, UNKNOWN = "idle", "spin", "busy", "other", "unknown"
HANG, STRAGGLER, RUNNING, ALL_IDLE, PAUSE = "hang", "straggler", "running", "idle", "pause"
EVERY_RANK_WAITS = "every rank waits: a collective mismatch or a stuck kernel"

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
    "straggler_wait_share": 0.25,  # the peers wait at least this share of each step for one GPU (1.5x its work: 0.33)
    "straggler_min_s": 12.0,  # a straggler is called once it has lasted this long
    "straggler_skip_names": [],  # jobs whose name matches one of these globs are never called slowed (pipelines)
    "pause_cpu_min": 0.5,  # an idle GPU's rank using this many CPU cores is busy on the host, not stuck
    "pause_io_min_bps": 1048576.0,  # ... or reading or writing this many bytes per second
    "pause_max_s": 900.0,  # a rank busy on the host this long while its peers wait is called a hang anyway
    "progress_window_s": 0.5,  # the health check's second look at a suspected culprit's process (0: none)
    "stuck_sm_margin": 10.0,  # one spinning GPU's SM activity this many points off its peers' (which agree): a stuck kernel
    # ... or, the SM activity alike, its SM occupancy this many times above or below its peers' (which
    # agree): one stuck block (one warp) against the waiting NCCL blocks (many warps); H200: 0.012 % vs 0.036 %
    "stuck_occupancy_ratio": 2.0,
    "drain_culprit_jobs": 0,  # opt-in: a GPU the culprit of hung jobs of this many users drains the node (0: never)
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


@dataclass(eq=False, repr=False)
class JobView(Record):
    """One node's view of one job in one run."""

    job: str
    signature: str  # hang / straggler / running / idle / unknown
    classes: dict[int, str]  # GPU index -> class
    culprits: list[int] = field(default_factory=list)  # GPU indices (a hang's idle GPUs, the straggler)
    span_s: float = 0.0  # the shortest sample span of the job's GPUs
    evidence: str = ""
    place: str = ""  # a hang with no culprit GPU named here: where the culprit is, in words


def job_view(job: str, gpus: list[GpuActivity], t: dict[str, Any], nodes: int | None = None,
             name: str | None = None) -> JobView:
    """``nodes``: the job's node count where known (1: the culprit of a hang must be here);
    ``name``: the job's name, for ``straggler_skip_names``."""
    classes = {g.index: gpu_class(g, t) for g in gpus}
    spans = [g.span_s for g in gpus if classes[g.index] != UNKNOWN]
    view = JobView(job, RUNNING, classes, span_s=min(spans) if spans else 0.0)
    kinds = set(classes.values())
    if UNKNOWN in kinds:
        view.signature = UNKNOWN
    elif kinds == {IDLE}:
        view.signature = ALL_IDLE  # data loading, a checkpoint, a paused stage: never a hang
    elif SPIN in kinds and kinds <= {SPIN, IDLE}:
        _hang(view, gpus, t, nodes)
    elif SPIN in kinds and list(classes.values()).count(BUSY) == 1 and kinds <= {SPIN, BUSY}:
        # One GPU computes the whole window while every peer waits in a collective: one rank's
        # evaluation, or a kernel that has run far longer than the job's others. Said, and
        # called a hang only once it has lasted pause_max_s (gpuhc/checks/jobs.py).
        (alone,) = [i for i, c in classes.items() if c == BUSY]
        view.signature = PAUSE
        view.culprits = [alone]
        view.evidence = (f"gpu{alone} computes alone for the whole window (one rank's evaluation, or a kernel "
                         f"that does not end); {_hang_evidence(gpus, classes)}")
    elif kinds == {BUSY} and len(gpus) >= 2:
        slow = straggler(gpus, t)
        if slow is not None and skipped(name, t):
            view.evidence = f"a straggler's pattern ({slow[1]}) not judged: job name {name!r} is in straggler_skip_names"
        elif slow is not None:
            view.signature = STRAGGLER
            view.culprits = [slow[0]]
            view.evidence = slow[1]
    return view


def skipped(name: str | None, t: dict[str, Any]) -> bool:
    return name is not None and any(fnmatch.fnmatchcase(name, pat) for pat in t["straggler_skip_names"])


def _hang(view: JobView, gpus: list[GpuActivity], t: dict[str, Any], nodes: int | None) -> None:
    """Some GPUs spin, the others are idle: whose rank is it? An idle GPU whose process makes
    progress on the host is pausing; one that makes none is the culprit; with every GPU
    spinning, the culprit is here only when the job has no other node."""
    classes = view.classes
    idle = [g for g in gpus if classes[g.index] == IDLE]
    view.evidence = _hang_evidence(gpus, classes)
    view.signature = HANG
    if idle:
        busy = {g.index: host_busy(g, t) for g in idle}
        who = {g.index: f"rank {g.rank} (gpu{g.index})" if g.rank is not None else f"gpu{g.index}'s rank" for g in idle}
        stuck = [g.index for g in idle if busy[g.index] is None]
        if not stuck:
            view.signature = PAUSE
            view.culprits = sorted(busy)
            view.evidence = "; ".join(f"{who[i]} busy on the host ({busy[i]})" for i in sorted(busy))
        else:
            view.culprits = sorted(stuck)
            paused = [f"{who[i]} busy on the host ({b})" for i, b in sorted(busy.items()) if b is not None]
            if paused:
                view.evidence += "; " + "; ".join(paused)
        return
    if nodes != 1:
        view.place = ("on another node" if nodes else
                      f"on another node, or here if the job has one node ({EVERY_RANK_WAITS}): its node count is not known")
        return
    odd = stuck_kernel(gpus, t)
    if odd is not None:
        view.culprits = [odd[0]]
        view.evidence = f"{odd[1]}; {view.evidence}"
    else:
        view.place = EVERY_RANK_WAITS + " (the job has no other node)"


def host_busy(g: GpuActivity, t: dict[str, Any]) -> str | None:
    """What the GPU's rank is doing on the host when it makes progress there, else None
    (stuck, or not measured: the GPU samples alone then decide, as they used to)."""
    if g.host_state == "D":
        return "in I/O wait" + _host_rates(g)
    if not g.host_dt_s:
        return None
    cpu = (g.host_cpu_s or 0.0) / g.host_dt_s
    io = max(g.host_write_bytes or 0.0, g.host_read_bytes or 0.0) / g.host_dt_s
    if cpu >= float(t["pause_cpu_min"]) or io >= float(t["pause_io_min_bps"]):
        return _host_rates(g).removeprefix(", ")
    return None


def _host_rates(g: GpuActivity) -> str:
    if not g.host_dt_s:
        return ""
    parts = []
    for verb, n in (("writing", g.host_write_bytes), ("reading", g.host_read_bytes)):
        if n:
            parts.append(f"{verb} {_bytes(n / g.host_dt_s)}/s")
    parts.append(f"{(g.host_cpu_s or 0.0) / g.host_dt_s:.1f} CPU cores")
    return ", " + ", ".join(parts)


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def stuck_kernel(gpus: list[GpuActivity], t: dict[str, Any]) -> tuple[int, str] | None:
    """The one spinning GPU whose SM activity (GPM) differs from its peers', which agree: the
    waiting NCCL kernels keep the same few SMs busy on every GPU (one block per channel), a
    kernel that does not end keeps another number busy (all of them, or a single block)."""
    sm = {g.index: g.sm_activity for g in gpus if g.sm_activity is not None}
    if len(sm) != len(gpus) or len(gpus) < 3:
        return None  # two GPUs that differ do not say which one is odd
    margin = float(t["stuck_sm_margin"])
    for odd in sm:
        peers = [v for i, v in sm.items() if i != odd]
        mid = _median(peers)
        if abs(sm[odd] - mid) >= margin and max(peers) - min(peers) < margin / 2:
            return odd, f"gpu{odd} SM activity {sm[odd]:.0f} % vs its peers' {mid:.0f} %: a kernel that does not end"
    return _odd_occupancy(gpus, t) if max(sm.values()) - min(sm.values()) < margin / 2 else None


def _odd_occupancy(gpus: list[GpuActivity], t: dict[str, Any]) -> tuple[int, str] | None:
    """A kernel of one block keeps as few SMs busy as a waiting NCCL kernel, so SM activity is
    alike on every GPU; the warps resident differ (one thread against a block of hundreds):
    the one GPU whose occupancy is ``stuck_occupancy_ratio`` times off its peers', which agree
    within a quarter (docs/verification.md, "Job checks, round two": 0.0118 % against 0.0355 %)."""
    occ = {g.index: g.sm_occupancy for g in gpus if g.sm_occupancy is not None and g.sm_occupancy > 0}
    if len(occ) != len(gpus):
        return None
    ratio = float(t["stuck_occupancy_ratio"])
    for odd in occ:
        peers = [v for i, v in occ.items() if i != odd]
        mid = _median(peers)
        off = max(occ[odd] / mid, mid / occ[odd])
        if off >= ratio and max(peers) <= 1.25 * min(peers):
            return odd, (f"gpu{odd} SM occupancy {occ[odd]:.4f} % vs its peers' {mid:.4f} % (the same SMs busy): "
                         "a kernel that does not end")
    return None


def _hang_evidence(gpus: list[GpuActivity], classes: dict[int, str]) -> str:
    parts = []
    for g in gpus:
        power = _mean(g.power_w)
        watts = f" {power:.0f} W" if power is not None else ""
        parts.append(f"gpu{g.index} {classes[g.index]} (util {min(g.gpu_util):.0f}-{max(g.gpu_util):.0f} %, "
                     f"mem {max(g.mem_util) if g.mem_util else 0:.0f} %{watts})")
    return "; ".join(parts)


def straggler(gpus: list[GpuActivity], t: dict[str, Any]) -> tuple[int, str] | None:
    """(GPU index, evidence) of the GPU its peers wait for: the ranks do the same work per step,
    so each GPU's mean memory utilisation is its share of time at work, and a peer's wait is
    one less its share over the busiest GPU's. Called when the peers' median wait is at least
    ``straggler_wait_share`` and the busiest GPU itself never waits (no sample spinning with
    no memory traffic). None when no GPU stands out."""
    mem = {g.index: _mean(g.mem_util) or 0.0 for g in gpus}
    top = max(gpus, key=lambda g: mem[g.index])
    if mem[top.index] <= 0:
        return None
    peers = [g for g in gpus if g is not top]
    waits = {g.index: 1.0 - mem[g.index] / mem[top.index] for g in peers}
    wait = _median(waits.values())
    if wait < float(t["straggler_wait_share"]) or _spin_share(top, t) >= wait / 2:
        return None
    text = (f"peers wait {wait * 100:.0f} % of each step for gpu{top.index} (memory busy {mem[top.index]:.0f} % "
            f"vs their {_median(mem[g.index] for g in peers):.0f} %)")
    power = {g.index: _mean(g.power_w) for g in gpus}
    if all(p is not None for p in power.values()):
        text += f"; {power[top.index]:.0f} W vs {_median(power[g.index] for g in peers):.0f} W"
    sm = [g.sm_activity for g in peers if g.sm_activity is not None]
    if top.sm_activity is not None and sm:
        text += f"; SM activity {top.sm_activity:.0f} % vs {_median(sm):.0f} %"
    clocks = [g.sm_clock_mhz for g in peers if g.sm_clock_mhz]
    if top.sm_clock_mhz and clocks:
        text += f"; SM clock {top.sm_clock_mhz:.0f} vs {_median(clocks):.0f} MHz"
    return top.index, text


def _spin_share(g: GpuActivity, t: dict[str, Any]) -> float:
    """The share of a GPU's samples in the waiting pattern (spinning with no memory traffic)."""
    pairs = list(zip(g.gpu_util, g.mem_util))
    if not pairs:
        return 0.0
    spin = sum(1 for u, m in pairs if u >= float(t["spin_util_min"]) and m <= float(t["spin_mem_util_max"]))
    return spin / len(pairs)


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
        if isinstance(default, list):
            if not isinstance(v, list) or len(v) > 256 or not all(isinstance(x, str) and 0 < len(x) <= 256 for x in v):
                problems.append(f"{key}: must be a list of at most 256 glob patterns (strings), got {v!r}")
        elif isinstance(default, bool):
            if not isinstance(v, bool):
                problems.append(f"{key}: must be true or false, got {v!r}")
        elif not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or v < 0:
            problems.append(f"{key}: must be a number >= 0, got {v!r}")
    v = t.get("straggler_wait_share")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not 0 < v < 1:
        problems.append(f"straggler_wait_share: must be a share between 0 and 1 (exclusive), got {v!r}")
    v = t.get("stuck_occupancy_ratio")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and not v > 1:
        problems.append(f"stuck_occupancy_ratio: must be more than 1 (a factor between one GPU and its peers), got {v!r}")
    v = t.get("progress_window_s")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 5:
        problems.append(f"progress_window_s: at most 5 seconds (the health check waits that long on a suspected hang), got {v!r}")
    w = t.get("window_s")
    if isinstance(w, (int, float)) and not isinstance(w, bool) and not 0.5 <= w <= 600:
        problems.append(f"window_s: must be between 0.5 and 600 seconds, got {w!r}")
    g = t.get("gpm_window_s")
    if isinstance(g, (int, float)) and not isinstance(g, bool) and g > 1:
        problems.append(f"gpm_window_s: at most 1 second (the health check waits that long), got {g!r}")
    return problems
