"""Who holds the GPUs a stage concerns: their processes and memory (prolog, epilog, bootstrap)."""

# No ``from __future__ import annotations`` (gpuhc/model/__init__.py says why).
from dataclasses import dataclass, field

from gpuhc.model.nvml import MigInstance
from gpuhc.model.record import Record


@dataclass(eq=False, repr=False)
class GpuProcess(Record):
    """One process NVML lists on a GPU (compute, graphics, or both)."""

    pid: int
    name: str | None = None  # /proc/<pid>/comm; None when /proc could not say
    used_mib: float | None = None  # NVML's usedGpuMemory; None where NVML cannot tell (MIG, no permission)
    kinds: str = "compute"  # "compute", "graphics" or "compute+graphics"
    gone: bool = False  # NVML lists it but /proc has no such pid (exited, or another PID namespace)
    # The MIG instance it runs in (NVML's per-instance process lists); None: not a MIG GPU
    gi: int | None = None
    ci: int | None = None
    uid: int | None = None  # the real uid (/proc/<pid>/status); None when /proc could not say

    def allowed(self, rules: tuple[tuple[str, int], ...]) -> bool:
        """Whether a (name, uid) rule of the occupancy check's ``allowed_processes`` names this
        process: its exact name AND its owner. A name is the process's own choice (any user can
        call a process nv-hostengine); its real uid is the kernel's, so a user's
        process named like a monitor is still a stray (docs/security.md)."""
        return (not self.gone and self.name is not None and self.uid is not None
                and (self.name, self.uid) in rules)


@dataclass(eq=False, repr=False)
class GpuOccupancy(Record):
    """Who holds one GPU, and how much of its memory."""

    index: int
    uuid: str = ""
    memory_used_mib: float | None = None  # excluding what the driver reserves, where NVML can tell
    memory_total_mib: float | None = None
    # What the driver reserves for itself, where NVML gives it apart (the v2 memory query): then
    # ``memory_used_mib`` leaves it out and an idle GPU reads 0 MiB. None: the v1 figure, reserve included.
    memory_reserved_mib: float | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    mig: bool | None = None  # MIG mode on: the parent's memory use is the instances', not judged
    error: str | None = None  # NVML could not list this GPU's processes: cannot judge it
    # The process lists NVML does not give here (NOT_SUPPORTED): "compute", "graphics". Read as
    # no process by the occupancy check; as unknown holders by the reset plan (reset_probe.py).
    unlisted: list[str] = field(default_factory=list)
    instances: list[MigInstance] = field(default_factory=list)  # MIG on: each instance's memory use

    @property
    def subject(self) -> str:
        return f"gpu{self.index}"

    def unallowed_used_mib(self, rules: tuple[tuple[str, int], ...]) -> float:
        """The memory in use less what allowed processes (:meth:`GpuProcess.allowed`) say they
        hold; a process whose share NVML does not give leaves the figure as it is."""
        mine = sum(p.used_mib or 0.0 for p in self.processes if p.allowed(rules))
        return max(0.0, (self.memory_used_mib or 0.0) - mine)


@dataclass(eq=False, repr=False)
class Occupancy(Record):
    """Who holds the GPUs a stage concerns: read only in the stages that judge it (prolog,
    epilog, bootstrap), never in the passive health check (a running job is not a finding)."""

    available: bool
    error: str | None = None
    gpus: list[GpuOccupancy] = field(default_factory=list)
    waited_s: float = 0.0  # how long the read waited for leftover processes to exit (epilog)
