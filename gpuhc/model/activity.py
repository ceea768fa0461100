"""What the GPUs that running jobs hold did over the last seconds (the health check's job checks)."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
from dataclasses import dataclass, field

from gpuhc.model.record import Record


@dataclass(eq=False, repr=False)
class GpuActivity(Record):
    """What one GPU that a running job holds did over the last seconds: the driver's own
    buffered samples (docs/checks.md, "jobs"), plus the job ids of the processes on it."""

    index: int
    jobs: list[str] = field(default_factory=list)  # Slurm job ids, from the processes' cgroups (or environ)
    span_s: float = 0.0  # how many seconds the samples cover
    gpu_util: list[float] = field(default_factory=list)  # percent, oldest first
    mem_util: list[float] = field(default_factory=list)  # percent of time the memory was read or written
    power_w: list[float] = field(default_factory=list)
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_activity: float | None = None  # GPM SM activity, percent; None: not measured or not supported
    sm_occupancy: float | None = None  # GPM SM occupancy (resident warps of the most the SMs hold), percent
    via: str = "cgroup"  # how the job ids were found: "cgroup", "environ" or "mixed"
    instance: str | None = None  # a MIG slice ("gi13/ci0"): the jobs of that slice alone; samples are the GPU's
    # job -> the real uids that own its processes on this GPU (/proc/<pid>/status, the kernel's
    # word): the Slurm side acts on a job only when they are the job's user (docs/security.md)
    owners: dict[str, list[int]] = field(default_factory=dict)
    # The host side of the job's processes on this GPU (/proc/<pid>/stat and io), so that a rank
    # that is busy on the host (writing a checkpoint) is told from one that is stuck:
    pids: list[int] = field(default_factory=list)  # the job processes on this GPU
    rank: int | None = None  # the rank of the first of them in its job (SLURM_PROCID or RANK in its environment)
    host_state: str | None = None  # the busiest thread state of those processes: D, R, S (or T, Z)
    host_cpu_total_s: float | None = None  # their CPU time so far (user + system), summed
    host_dt_s: float | None = None  # the interval the deltas below were measured over (None: not measured)
    host_cpu_s: float | None = None  # CPU seconds they used in that interval
    host_read_bytes: float | None = None  # bytes they read in it (read syscalls: files, pipes)
    host_write_bytes: float | None = None  # bytes they wrote in it (write syscalls)

    @property
    def subject(self) -> str:
        return f"gpu{self.index}"


@dataclass(eq=False, repr=False)
class Activity(Record):
    """The GPUs running jobs hold, and what each did (only those: an idle GPU costs no read)."""

    available: bool
    error: str | None = None
    gpus: list[GpuActivity] = field(default_factory=list)
    unmapped_pids: int = 0  # processes on a GPU no job could be found for (not Slurm's, or gone)
    job_nodes: dict[str, int] = field(default_factory=dict)  # job -> its node count (SLURM_JOB_NUM_NODES of a rank)
    job_names: dict[str, str] = field(default_factory=dict)  # job -> its name (SLURM_JOB_NAME of a rank)
