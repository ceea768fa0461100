"""What a check is, and the context it is judged in.

A check is a pure function: ``judge(snapshot, ctx) -> CheckOutput``. It never touches the node;
the runner reads the node through the sources first and hands the check a snapshot. That is what
lets a recorded snapshot be re-judged offline and a unit test feed a literal snapshot.

Checks that judge growth ("replay counter went up since the last run") get their own slice of
the persisted state as ``ctx.prev`` and return the slice to store as ``CheckOutput.state``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from gpuhc.model.nvml import GpuReading
from gpuhc.model.record import FrozenRecord, Record
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

# Sources a check can need. The runner reads only the sources the selected checks need.
NVML = "nvml"
KERNEL_LOG = "kernel_log"
IB = "ib"
AER = "aer"
PCI = "pci"  # the NVIDIA GPUs on the PCI bus (sysfs), whether NVML sees them or not
PROCS = "gpu_procs"  # processes and memory on the GPUs (prolog, epilog, bootstrap)
IMEX = "imex"  # the IMEX daemon and its domain (nvidia-imex-ctl), where installed
ACTIVITY = "activity"  # what the GPUs running jobs hold are doing (the health check's job checks)
HOST = "host"  # the node around the GPUs: CPUs, memory, EDAC, PCI tree, mounts, services (sources/host.py)

STAGES = ("passive", "prolog", "epilog", "bootstrap")


@dataclass(frozen=True, eq=False, repr=False)
class ReadContext(FrozenRecord):
    """What a check may know before the node is read, to say how it wants it read.

    Its thresholds are the check's defaults under the config's layer only: the GPU profile is
    chosen from the GPU names this very read brings, so it cannot shape the read."""

    stage: str
    thresholds: dict[str, Any]
    timeout_s: float  # the check's own, resolved from the config
    prev: Any = None  # the check's state from the last run, as stored (perhaps damaged)


@dataclass(frozen=True, eq=False, repr=False)
class SourceNeeds(FrozenRecord):
    """How one check wants its sources read in one run (``Check.source_needs`` returns it).

    ``Check.needs`` says which sources a check reads; this says how. The runner merges the
    selected checks' answers into the run's ``SourceSpec`` without knowing which check asked
    (gpuhc/run/plan.py); each field's default is "nothing asked", and the merge rule is in the
    field's comment. A stage whose checks ask nothing reads the least (the prolog)."""

    # Sample the clock-event reasons several times (``clock_samples`` of the config), to judge
    # persistence across samples; nobody asking: one sample. Merge: any check.
    clock_samples: bool = False
    # How long the occupancy reader waits for a job's processes to exit, and for the memory in
    # use to drop to how many MiB. Merge: the longest wait, the lowest allowance.
    occupancy_wait_s: float = 0.0
    occupancy_settle_mib: float | None = None
    # Processes the occupancy reader does not wait for, as (name, owner uid): the occupancy
    # check's allowed_processes. Merge: all of them.
    occupancy_allowed: tuple[tuple[str, int], ...] = ()
    # The slice of each GPU's links the NVLink DL counters are read on: (rotation, GPU index ->
    # phase), gpuhc/sources/nvml_fields.py ``in_dl_slice``; None: every link. Merge: the
    # first check that asks (one read has one slice).
    dl_slice: tuple[int, dict[int, int]] | None = None
    # The activity reader's settings (gpuhc/sources/job_activity.py ``ActivityLive``).
    # Merge: key by key.
    activity: dict[str, Any] | None = None
    # The thresholds the host reader reads by, for this check (gpuhc/sources/host.py
    # ``settings_for`` turns them, by check id, into what to read). Merge: one entry per check.
    host: dict[str, Any] | None = None


def reads_host(r: ReadContext) -> SourceNeeds:
    """``source_needs`` of a check that reads the host: the host reader reads by its thresholds."""
    return SourceNeeds(host=r.thresholds)


@dataclass(eq=False, repr=False)
class Context(Record):
    """What a check may know besides the snapshot."""

    thresholds: dict[str, Any]  # the effective profile thresholds (profile + config overrides)
    prev: dict[str, Any] = field(default_factory=dict)  # this check's state from the last run
    baseline: dict[str, Any] | None = None  # `gpuhc baseline capture` output, when present
    config: dict[str, Any] = field(default_factory=dict)  # this check's own config section
    gpus: list[int] | None = None  # restrict to these GPU indices (prolog: the job's GPUs)
    # The job's devices as Slurm gave them (gpuhc.node.gpumap.JobScope: MIG slices, shared GPUs);
    # None: whole GPUs, or no job.
    job: Any = None

    def t(self, key: str, default: Any = None) -> Any:
        return self.thresholds.get(key, default)


@dataclass(eq=False, repr=False)
class CheckOutput(Record):
    """What a judge returns: its results and the state it keeps for the next run."""

    results: list[Result]
    state: dict[str, Any] | None = None  # None: keep the previous state unchanged


@dataclass(frozen=True, eq=False, repr=False)
class Check(FrozenRecord):
    """One passive check, declared once: what it reads, how it judges, where it runs."""

    id: str
    needs: tuple[str, ...]  # sources, see the constants above: no answer, no verdict
    judge: Callable[[Snapshot, Context], CheckOutput]
    stages: tuple[str, ...] = ("passive", "epilog", "bootstrap")  # add "prolog" for the fast subset
    timeout_s: float = 10.0  # default; config `checks.<id>.timeout_s` overrides
    defaults: dict[str, Any] = field(default_factory=dict)  # thresholds; profile and config override
    # Sources that help but must not hold the verdict hostage: waited for within the check's
    # timeout, then judged without (a wedged NVML must not hide an Xid 79 in the kernel log).
    optional: tuple[str, ...] = ()
    doc: str = ""
    # Threshold values a type cannot judge (words, mappings, [warn, fail] pairs): given the
    # defaults with the config's thresholds on top, return ["key: why", ...]. The config loader
    # runs it, so a typo is rejected with its file and line before any check runs.
    validate: Callable[[dict[str, Any]], list[str]] | None = None
    # Thresholds a core config key sets (when it is not null), beneath `checks.<id>.thresholds`:
    # threshold name -> (section, key), e.g. gpu-count's ``expected`` <- ``node.expected_gpus``.
    from_config: dict[str, tuple[str, str]] = field(default_factory=dict)
    nested_thresholds: bool = False  # True: mapping thresholds merge key by key across layers
    # A check that holds evidence across runs (kernel-log incidents, warnings that stayed): given
    # its state and "now", its state once an admin's resume or retest acknowledged them
    # (gpuhc/slurm/flows/handover.py asks every check that sets it; docs/slurm.md, "An admin's
    # resume is an acknowledgement").
    acknowledge: Callable[[dict[str, Any] | None, float], dict[str, Any]] | None = None
    # How the check wants its sources read in this run (waits, link slices, reader settings),
    # from its stage, thresholds and last state; None: the sources' least. The runner merges
    # every selected check's answer (``SourceNeeds``) and never asks for a check by id.
    source_needs: Callable[[ReadContext], SourceNeeds] | None = None
    # True: the check judges who holds the GPUs (a process on them is its finding). A run that
    # cannot tell the job's processes from other jobs' (``RunOptions.occupancy`` False) leaves
    # it out, and the active checks then take a busy GPU for a job's, not for a finding.
    judges_holders: bool = False


class Declared(Protocol):
    """What the config, the profiles and the runner read of any check, passive (``Check``) or
    active (``gpuhc.active.registry.ActiveCheck``): one registry serves both."""

    id: str
    needs: tuple[str, ...]
    stages: tuple[str, ...]
    timeout_s: float
    defaults: dict[str, Any]
    validate: Callable[[dict[str, Any]], list[str]] | None
    from_config: dict[str, tuple[str, str]]
    nested_thresholds: bool


def result(
    check: str,
    status: Status,
    message: str,
    subject: str = "node",
    value: Any = None,
    threshold: Any = None,
    action: Action = Action.NONE,
    evidence: str | None = None,
) -> Result:
    """Shorthand used by checks; keeps their bodies readable."""
    return Result(check, status, message, subject, value, threshold, action, evidence)


def na(check: str, message: str, subject: str = "node") -> Result:
    return Result(check, Status.NA, message, subject)


def selected_gpus(snapshot: Snapshot, ctx: Context):
    """The GPUs a check should look at: all of them, or the prolog's job GPUs."""
    gpus = snapshot.nvml.gpus if snapshot.nvml else []
    if ctx.gpus is None:
        return gpus
    return [g for g in gpus if g.index in ctx.gpus]


@dataclass(eq=False, repr=False)
class GpuJudge(Record):
    """How a per-GPU check judges each GPU of one run; :func:`per_gpu_check` runs the loop.

    Built per run by the check's plan, so what a run computes once (thermal's busy siblings,
    pcie's AER by bus id, nvlink's counter state) is shared by its GPUs through closures. What
    the statuses mean (n/a for unsupported, never a failure) is docs/ARCHITECTURE.md "Judging".
    """

    # Why this GPU cannot be judged at all (the words after its subject in an n/a), or None.
    unsupported: Callable[[GpuReading], str | None]
    findings: Callable[[GpuReading], list[Result]]  # its problems, in the order found
    clean: Callable[[GpuReading], Result]  # its one result when nothing was found (pass, or n/a)
    first: tuple[Result, ...] = ()  # node results ahead of the GPUs' (a bad setting)
    state: Callable[[], dict[str, Any] | None] = lambda: None  # CheckOutput.state, asked after the loop


Plan = Callable[[Snapshot, Context, list[GpuReading]], GpuJudge]


def per_gpu_check(id: str, plan: Plan, needs: tuple[str, ...] = (NVML,), **declared: Any) -> Check:
    """A check that judges NVML's GPUs one at a time, declared by how it judges one GPU.

    The shared part: no NVML answer is one n/a for the node; otherwise every GPU of the stage
    (``selected_gpus``) gets its n/a, its findings, or its one clean result, in GPU order, so a
    report lists the same GPU lines whichever check wrote them. ``declared`` are the rest of
    the :class:`Check` fields.
    """

    def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
        if snapshot.nvml is None or not snapshot.nvml.available:
            return CheckOutput([na(id, "NVML unavailable")])
        gpus = selected_gpus(snapshot, ctx)
        run = plan(snapshot, ctx, gpus)
        results = list(run.first)
        for gpu in gpus:
            why = run.unsupported(gpu)
            if why:
                results.append(na(id, f"{gpu.subject} {why}", gpu.subject))
                continue
            found = run.findings(gpu)
            if found:
                results.extend(found)
            else:
                results.append(run.clean(gpu))
        return CheckOutput(results, state=run.state())

    return Check(id=id, needs=needs, judge=judge, **declared)
