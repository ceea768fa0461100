"""Pick live or replay sources from the command line and config.

Imports are lazy on purpose: the health check runs every few minutes on every node, and a replay
run (tests, offline re-judging) must not pay for importing pynvml, nor a live run for YAML
scenario code it does not use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuhc.model.record import Record
from gpuhc.sources.base import ActivitySource, HostSource, ImexSource, KernelLogSource, NvmlSource, PciSource, ProcsSource, SysfsSource


@dataclass(eq=False, repr=False)
class SourceSpec(Record):
    """Where to read from. Empty fields mean "the live node"."""

    nvml_scenario: str | None = None  # YAML scenario (may also carry kernel_log and ib sections)
    # Site test mode (gpuhc/sources/testmode.py): a scenario replayed as this node, its times
    # moved to when it was put in place, a link to it followed only when root's. Below nvml_scenario.
    test_scenario: str | None = None
    step: int | None = None  # scenario time step; None: advance one step per run
    kernel_log: str | None = None  # a file; "dmesg" or "kmsg" force a live method
    sysfs_root: str | None = None  # a directory standing in for "/"
    clock_samples: int = 3  # clock-event reason samples per run
    clock_sample_interval_s: float = 0.02
    # The stage's GPUs (the prolog's and epilog's: the job's), read in full; None: every GPU.
    gpus: list[int] | None = None
    job: Any = None  # gpuhc.node.gpumap.JobScope: the epilog waits only for the job's own slices
    # GPU occupancy: how long to wait for leftover processes to exit and for the memory in use
    # to drop to this many MiB (the epilog).
    occupancy_wait_s: float = 0.0
    occupancy_settle_mib: float | None = None
    occupancy_allowed: tuple[tuple[str, int], ...] = ()  # (name, owner uid) not waited for
    # The NVLink DL error counters are read on one slice of each GPU's links: of GPU i, the links
    # with link % dl_rotation == dl_phases.get(i, 0) (gpuhc/sources/nvml_fields.py,
    # in_dl_slice); 1: every link. The runner fills these in, and the fields below, from what
    # the selected checks declare (gpuhc/run/plan.py).
    dl_rotation: int = 1
    dl_phases: dict[int, int] | None = None
    # The job checks' activity reader (gpuhc/checks/jobs.py, source_settings): window_s,
    # gpm_window_s, environ.
    activity: dict[str, Any] | None = None
    # What the host reader reads (gpuhc/sources/host.py, settings_for); None: everything, defaults.
    host: dict[str, Any] | None = None


@dataclass(eq=False, repr=False)
class Sources(Record):
    """The readers of one run (build_sources), one per source."""

    nvml: NvmlSource
    kernel_log: KernelLogSource
    sysfs: SysfsSource
    replay: bool  # True when the kernel log is a recording: judge "now" by its last line
    # Where the GPUs on the PCI bus come from; None: from ``sysfs``. A replayed NVML never meets
    # the live bus: a 4-GPU scenario replayed on a real 8-GPU node would "lose" 8 GPUs.
    pci: PciSource | None = None
    procs: ProcsSource | None = None  # who holds the GPUs; None: unknown (a recording without it)
    imex: ImexSource | None = None  # the IMEX daemon; None: unknown (a recording without it)
    activity: ActivitySource | None = None  # what the jobs' GPUs do; None: not read
    host: HostSource | None = None  # the node around the GPUs; None: unknown (a recording without it)


def build_sources(spec: SourceSpec, step: int | None = None) -> Sources:
    scenario = None
    path, placed = spec.nvml_scenario, None
    if not path and spec.test_scenario:
        from gpuhc.sources import testmode

        path, placed = testmode.resolve(spec.test_scenario)
    if path:
        from gpuhc.sources.scenario import load_scenario

        scenario = load_scenario(path, step if spec.step is None else spec.step)

    procs: ProcsSource | None
    phases = dict(spec.dl_phases or {})
    if scenario is not None:
        nvml: NvmlSource = _Sliced(scenario.nvml_source(), spec.dl_rotation, phases)
        procs = scenario.occupancy_source()
        activity: ActivitySource = scenario.activity_source()
    else:
        from gpuhc.run.nvml_early import adopt
        from gpuhc.sources.gpu_procs import OccupancyLive
        from gpuhc.sources.nvml import NvmlLive

        nvml = adopt(spec.clock_samples, spec.clock_sample_interval_s, spec.gpus, spec.dl_rotation, phases) or NvmlLive(
            clock_samples=spec.clock_samples, sample_interval_s=spec.clock_sample_interval_s, gpus=spec.gpus,
            dl_rotation=spec.dl_rotation, dl_phases=phases)
        procs = OccupancyLive(gpus=spec.gpus, wait_s=spec.occupancy_wait_s, settle_mib=spec.occupancy_settle_mib,
                              job=spec.job, allowed=spec.occupancy_allowed)
        activity = _LazyActivity(spec.activity or {})

    from gpuhc.sources import kernel_log as kl

    replay = False
    if spec.kernel_log in ("kmsg", "dmesg"):
        klog: KernelLogSource = kl.KmsgSource() if spec.kernel_log == "kmsg" else kl.DmesgSource()
    elif spec.kernel_log:
        klog, replay = kl.FileKernelLog(spec.kernel_log), True
    elif placed is not None:
        # Test mode: the scenario's log is this node's, judged at the real clock (an empty one
        # when the scenario has none: the host's own log is not the node being played).
        from gpuhc.sources.testmode import PlacedLog

        klog = PlacedLog(scenario.kernel_log_source(), placed)
    elif scenario is not None and scenario.has_kernel_log:
        klog, replay = scenario.kernel_log_source(), True
    else:
        klog = kl.LiveKernelLog()  # /dev/kmsg, falling back to dmesg

    pci: PciSource | None = None
    if spec.sysfs_root:
        from gpuhc.sources.sysfs import SysfsTree

        sysfs: SysfsSource = SysfsTree(spec.sysfs_root)
    elif scenario is not None and scenario.has_sysfs:
        sysfs = scenario.sysfs_source()
    else:
        from gpuhc.sources.sysfs import SysfsTree

        sysfs = SysfsTree("/")
        if scenario is not None:
            pci = scenario.sysfs_source()  # its pci_gpus, or None: unknown
    imex: ImexSource | None
    host: HostSource | None
    if scenario is not None:  # a replay never asks the live node's IMEX daemon, nor its host
        imex, host = scenario.imex_source(), scenario.host_source()
    else:
        from gpuhc.sources.imex import ImexLive

        imex, host = ImexLive(), _LazyHost(spec.host, spec.sysfs_root or "/")
    return Sources(nvml=nvml, kernel_log=klog, sysfs=sysfs, replay=replay, pci=pci, procs=procs, imex=imex,
                   activity=activity, host=host)


# The three readers below, and the replay's in gpuhc/sources/scenario.py, are plain classes, not
# dataclasses: nobody compares or prints them, and a dataclass costs the health check ~0.6 ms to
# create at import (its generated methods are compiled then; docs/checks.md, "What a check costs").
class _Sliced:
    """A replayed NVML reading as a live read of the same DL slice finds it: a recording holds
    every counter, and a replay judges the rotation as the node would."""

    __slots__ = ("recorded", "rotation", "phases")

    def __init__(self, recorded: NvmlSource, rotation: int, phases: dict[int, int]):
        self.recorded, self.rotation, self.phases = recorded, rotation, phases

    @property
    def in_memory(self) -> bool:
        """Read inline when the recording is (gpuhc/run/read.py)."""
        return getattr(self.recorded, "in_memory", False) is True

    def read(self):
        from gpuhc.sources.nvml_fields import keep_dl_slice

        return keep_dl_slice(self.recorded.read(), self.rotation, self.phases)


class _LazyActivity:
    """The live activity reader, imported only by a run whose checks read it (the health check)."""

    __slots__ = ("settings",)

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings

    def read(self):
        from gpuhc.sources.job_activity import ActivityLive

        return ActivityLive(**self.settings).read()


class _LazyHost:
    """The live host reader, imported only by a run whose checks read it."""

    __slots__ = ("settings", "root")

    def __init__(self, settings: dict[str, Any] | None, root: str):
        self.settings, self.root = settings, root

    def read(self):
        from gpuhc.sources.host import HostLive

        return HostLive(self.settings, self.root).read()
