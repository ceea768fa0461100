"""What the GPUs that running jobs hold are doing: the job checks' source (docs/checks.md, "jobs").

Read in the health check, which Slurm runs on busy nodes too (``HealthCheckNodeState=ANY``).
Only GPUs with a compute process are read, so an idle node pays one process listing per GPU.

- **Which job.** NVML lists each GPU's compute processes; a process belongs to the job named in
  its ``/proc/<pid>/cgroup`` (slurmstepd puts every task under ``.../job_<id>/step_<s>/...``, in
  cgroup v1 and v2 alike, per Slurm's cgroup documentation). That file is the kernel's and the
  path is slurmstepd's, so a user cannot forge it. Only a process with no such path (Slurm
  without cgroups: ``proctrack/linuxproc``) is looked up in its environment's ``SLURM_JOB_ID``,
  which the user can set: the reading says ``via: environ`` so the finding can say so.
- **What it did.** The driver keeps a buffer of recent samples per GPU (utilization, memory
  utilization, power); ``nvmlDeviceGetSamples`` hands back those newer than a time stamp, so the
  health check gets the last ``window_s`` seconds without sleeping. GPM (Hopper and later) SM
  activity needs two samples some time apart; it is taken only when ``gpm_window_s`` > 0, once
  for all GPUs.
- **Whose process.** The real uid of each process (the ``Uid:`` line of ``/proc/<pid>/status``,
  written by the kernel; read by gpuhc/node/holders.py) is kept per job and GPU (``owners``): the Slurm side acts on a job only
  when that owner is the job's user as Slurm reports it (gpuhc/slurm/jobs/act.py), and the
  repeat-culprit drain counts users, not jobs (gpuhc/checks/jobs.py). A process whose owner
  cannot be read (it ended) is counted as unmapped, never guessed.
- Every file is read bounded and without following links (gpuhc/files/untrusted.py): the processes
  are the users'.
"""

from __future__ import annotations

import os
import time
from typing import Any

from gpuhc.text.lazyre import LazyPattern
from gpuhc.text.limits import MAX_ACTIVITY_SAMPLES, MAX_JOBS_PER_GPU
from gpuhc.model.activity import Activity, GpuActivity
from gpuhc.sources import nvml_util

_CGROUP_LIMIT = 64 * 1024  # /proc/<pid>/cgroup: one line per hierarchy (a dozen in cgroup v1)
_ENVIRON_LIMIT = 256 * 1024  # the front of /proc/<pid>/environ; a longer one is cut, not refused
MAX_OWNERS = 16  # owners kept per job and GPU: one is the rule, more is already a refusal
# Only slurmstepd's own hierarchy names a job: cgroup v2's <slices>/[<node>_]slurmstepd.scope/job_N
# and cgroup v1's /slurm[_<node>]/uid_U/job_N, both made by root. A user's delegated cgroups (under
# user@UID.service) may be named anything, job_1 included, and count for nothing (docs/security.md).
_JOB_IN_PATH = LazyPattern(r"^(?:/[^/]+\.slice)*/(?:[A-Za-z0-9._-]+_)?slurmstepd\.scope/job_(\d{1,12})(?=/|$)"
                           r"|^/slurm(?:_[A-Za-z0-9._-]+)?/uid_\d{1,10}/job_(\d{1,12})(?=/|$)")
_JOB_ID = LazyPattern(r"\d{1,12}")


def job_from_cgroup(text: str) -> str | None:
    """The Slurm job id in a ``/proc/<pid>/cgroup`` text, or None (not in a Slurm job)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _JOB_IN_PATH.match(path)
        if m:
            return str(int(m.group(1) or m.group(2)))
    return None


def job_from_environ(data: bytes) -> str | None:
    """``SLURM_JOB_ID`` from a ``/proc/<pid>/environ`` (NUL-separated), when it is a job id."""
    for entry in data.split(b"\0"):
        if entry.startswith(b"SLURM_JOB_ID="):
            value = entry[len(b"SLURM_JOB_ID="):].decode("ascii", "replace")
            return str(int(value)) if _JOB_ID.fullmatch(value) else None  # 0000778 is job 778
    return None


class JobResolver:
    """pid -> (job id, how it was found), from ``/proc``; one instance per read."""

    def __init__(self, proc_root: str = "/proc", environ: bool = True):
        self.proc_root = proc_root
        self.environ = environ

    def job_of(self, pid: int) -> tuple[str | None, str]:
        from gpuhc.files.untrusted import UntrustedInputError, open_regular, read_bounded, read_upto

        base = os.path.join(self.proc_root, str(int(pid)))
        try:
            job = job_from_cgroup(read_bounded(os.path.join(base, "cgroup"), _CGROUP_LIMIT, "process cgroup")
                                  .decode("utf-8", "replace"))
        except (UntrustedInputError, OSError):
            job = None
        if job is not None or not self.environ:
            return job, "cgroup"
        try:
            fd = open_regular(os.path.join(base, "environ"), "process environment")
            try:
                data = read_upto(fd, _ENVIRON_LIMIT)
            finally:
                os.close(fd)
        except (UntrustedInputError, OSError):
            return None, "environ"
        return job_from_environ(data), "environ"

    def owner_of(self, pid: int) -> int | None:
        """The real uid of the process, or None (gone, or not readable as the kernel writes it):
        gpuhc/node/holders.py, the one reader of who a process is."""
        from gpuhc.node.holders import real_uid

        return real_uid(self.proc_root, pid)


class ActivityLive:
    """One read of the held GPUs. The node watcher keeps one instance: it then measures the
    processes' progress and GPM SM activity between its reads, without waiting."""

    def __init__(self, window_s: float = 15.0, gpm_window_s: float = 0.0, module: Any = None,
                 proc_root: str = "/proc", environ: bool = True, clock=time.time, progress_window_s: float = 0.5,
                 idle_util_max: float = 5.0, spin_util_min: float = 90.0, spin_mem_util_max: float = 5.0,
                 gpm_between_reads: bool = False):
        self.window_s = max(0.5, float(window_s))
        self.gpm_window_s = max(0.0, float(gpm_window_s))
        self._module = module
        self.resolver = JobResolver(proc_root, environ)
        self._clock = clock
        self.progress_window_s = max(0.0, float(progress_window_s))
        self._idle, self._spin, self._spin_mem = float(idle_util_max), float(spin_util_min), float(spin_mem_util_max)
        from gpuhc.sources.job_procs import HostSampler

        self.host = HostSampler(proc_root)
        self.gpm_between_reads = gpm_between_reads
        self._gpm_prev: dict[int, Any] = {}  # GPU index -> its GPM sample of the last read

    def read(self) -> Activity:
        return nvml_util.session(self._module, self._read, lambda why: Activity(available=False, error=why))

    def _read(self, nv: Any) -> Activity:
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as e:
            return Activity(available=False, error=f"nvmlDeviceGetCount failed: {e}")
        out = Activity(available=True)
        held: list[tuple[GpuActivity, Any]] = []
        me = os.getpid()
        for i in range(count):
            try:
                h = nv.nvmlDeviceGetHandleByIndex(i)
                devices = [(instance, [int(p.pid) for p in nv.nvmlDeviceGetComputeRunningProcesses(dh) or []
                                       if int(p.pid) != me]) for instance, dh in _devices(nv, h)]
            except nv.NVMLError:
                continue  # a GPU NVML cannot talk to is the gpu-count and xid checks' business
            for instance, procs in devices:  # a MIG GPU: each slice is its own device, its jobs its own
                jobs: dict[str, str] = {}
                owners: dict[str, set[int]] = {}
                pids: list[int] = []
                for pid in procs:
                    job, via = self.resolver.job_of(pid)
                    owner = self.resolver.owner_of(pid) if job is not None else None
                    if job is None or owner is None:
                        out.unmapped_pids += 1
                    elif len(jobs) < MAX_JOBS_PER_GPU or job in jobs:
                        jobs.setdefault(job, via)
                        owners.setdefault(job, set()).add(owner)
                        pids.append(pid)
                if jobs:
                    vias = set(jobs.values())
                    held.append((GpuActivity(index=i, jobs=sorted(jobs), via=vias.pop() if len(vias) == 1 else "mixed",
                                             instance=instance, pids=sorted(set(pids))[:MAX_ACTIVITY_SAMPLES],
                                             owners={j: sorted(u)[:MAX_OWNERS] for j, u in sorted(owners.items())}), h))
        if not held:
            self.host.keep({})
            self._gpm_drop(nv, set())
            return out
        for gpu, _ in held:  # one rank's environment per GPU: its rank number, its job's node count and name
            env = self.host.job_env(gpu.pids[0]) if gpu.pids else None
            if env is None:
                continue
            gpu.rank = env.rank
            for job in gpu.jobs[:1]:
                if env.nodes is not None:
                    out.job_nodes.setdefault(job, env.nodes)
                if env.name is not None:
                    out.job_names.setdefault(job, env.name)
        all_pids = sorted({p for g, _ in held for p in g.pids})
        before = self.host.previous(all_pids)
        first = self.host.take(all_pids)
        gpm = self._gpm_start(nv, held)
        since_us = int((self._clock() - self.window_s) * 1e6)
        for gpu, h in held:
            self._samples(nv, h, gpu, since_us)
        self._gpm_finish(nv, held, gpm)
        if self.gpm_between_reads:
            self._gpm_carry(nv, held)
        now = first
        if before is None and self.progress_window_s and self._looks_hung([g for g, _ in held]):
            # A second look at the processes a moment later, and GPM SM activity over the same
            # moment where it was not measured: only when a hang is suspected.
            unmeasured = not any(g.sm_activity is not None for g, _ in held)
            gpm = self._gpm_start(nv, held, force=True) if unmeasured else {}
            wait = self.progress_window_s - (time.monotonic() - min((s.t for s in first.values()), default=time.monotonic()))
            time.sleep(max(0.0, wait))
            before, now = first, self.host.take(all_pids)
            self._gpm_finish(nv, held, gpm, window_s=0.0)
        from gpuhc.sources.job_procs import summarise

        for gpu, _ in held:
            for key, value in summarise(gpu.pids, now, before).items():
                setattr(gpu, key, value)
        self.host.keep(now)
        out.gpus = [g for g, _ in held]
        return out

    def _looks_hung(self, gpus: list[GpuActivity]) -> bool:
        """Some job has, in its GPUs' latest samples, one idle and another spinning, or every
        one spinning with no memory traffic (a hang's two shapes, as the jobs check classes them)."""
        last: dict[str, list[tuple[float, float]]] = {}
        for g in gpus:
            if g.gpu_util:
                mem = g.mem_util[-1] if g.mem_util else 0.0
                for job in g.jobs:
                    last.setdefault(job, []).append((g.gpu_util[-1], mem))
        for v in last.values():
            util = [u for u, _ in v]
            if min(util) <= self._idle and max(util) >= self._spin:
                return True
            if min(util) >= self._spin and max(m for _, m in v) <= self._spin_mem:
                return True
        return False

    def _samples(self, nv: Any, h: Any, gpu: GpuActivity, since_us: int) -> None:
        stamps: list[int] = []
        for kind, attr, scale in ((nv.NVML_GPU_UTILIZATION_SAMPLES, "gpu_util", 1.0),
                                  (nv.NVML_MEMORY_UTILIZATION_SAMPLES, "mem_util", 1.0),
                                  (nv.NVML_TOTAL_POWER_SAMPLES, "power_w", 1000.0)):
            values, ts = _buffered(nv, h, kind, since_us, scale)
            setattr(gpu, attr, values)
            stamps.extend(ts)
        if stamps:
            gpu.span_s = round((max(stamps) - min(stamps)) / 1e6, 3)
        try:
            gpu.power_limit_w = int(nv.nvmlDeviceGetEnforcedPowerLimit(h)) / 1000.0
        except nv.NVMLError:
            pass
        try:
            gpu.sm_clock_mhz = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        except nv.NVMLError:
            pass

    # GPM: two samples of every GPU some milliseconds apart, one wait for all of them.
    def _gpm_start(self, nv: Any, held: list[tuple[GpuActivity, Any]], force: bool = False) -> dict[int, Any]:
        if not (self.gpm_window_s or force) or not hasattr(nv, "nvmlGpmSampleAlloc"):
            return {}
        first: dict[int, Any] = {}
        for gpu, h in held:
            try:
                if not nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                    continue
                s = nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(h, s)
                first[gpu.index] = s
            except nv.NVMLError:
                continue
        if first:
            first["t"] = time.monotonic()
        return first

    def _gpm_finish(self, nv: Any, held: list[tuple[GpuActivity, Any]], first: dict, window_s: float | None = None) -> None:
        if not first:
            return
        window = self.gpm_window_s if window_s is None else window_s
        time.sleep(max(0.0, window - (time.monotonic() - first.pop("t"))))
        for gpu, h in held:
            s1 = first.get(gpu.index)
            if s1 is None:
                continue
            s2 = None
            try:
                s2 = nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(h, s2)
                _gpm_read(nv, s1, s2, gpu)
            except nv.NVMLError:
                pass
            finally:
                for s in (s1, s2):
                    if s is not None:
                        try:
                            nv.nvmlGpmSampleFree(s)
                        except nv.NVMLError:
                            pass

    # GPM between reads (the watcher): this read's sample against the last one, no wait.
    def _gpm_carry(self, nv: Any, held: list[tuple[GpuActivity, Any]]) -> None:
        if not hasattr(nv, "nvmlGpmSampleAlloc"):
            return
        for gpu, h in held:
            s2 = None
            try:
                if not nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                    continue
                s2 = nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(h, s2)
            except nv.NVMLError:
                if s2 is not None:
                    _gpm_free(nv, s2)
                continue
            s1 = self._gpm_prev.get(gpu.index)
            if s1 is not None and gpu.sm_activity is None:
                try:
                    _gpm_read(nv, s1, s2, gpu)
                except nv.NVMLError:
                    pass
            if s1 is not None:
                _gpm_free(nv, s1)
            self._gpm_prev[gpu.index] = s2
        self._gpm_drop(nv, {g.index for g, _ in held})

    def _gpm_drop(self, nv: Any, keep: set[int]) -> None:
        for index in [i for i in self._gpm_prev if i not in keep]:
            _gpm_free(nv, self._gpm_prev.pop(index))


def _gpm_free(nv: Any, sample: Any) -> None:
    try:
        nv.nvmlGpmSampleFree(sample)
    except nv.NVMLError:
        pass


def _devices(nv: Any, h: Any) -> list[tuple[str | None, Any]]:
    """The devices Slurm can give of one GPU (docs/checks.md, "Which GPUs a job's stages judge"):
    the GPU itself, or in MIG mode each MIG device, whose own process list holds its jobs alone."""
    from gpuhc.sources import nvml_mig

    if not nvml_mig.mig_mode(nv, h):
        return [(None, h)]
    return [(inst.label, mh) for mh, inst in nvml_mig.mig_devices(nv, h)]


def _gpm_read(nv: Any, s1: Any, s2: Any, gpu: GpuActivity) -> None:
    """SM activity and SM occupancy between two GPM samples, in one call. Occupancy tells a
    single stuck block (one warp resident) from a waiting NCCL kernel (a block of many warps),
    which keep the same one SM busy (docs/checks.md, "jobs")."""
    m = nv.c_nvmlGpmMetricsGet_t()
    m.version = nv.NVML_GPM_METRICS_GET_VERSION
    m.numMetrics = 2
    m.sample1, m.sample2 = s1, s2
    m.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
    m.metrics[1].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
    nv.nvmlGpmMetricsGet(m)
    gpu.sm_activity = _percent(m.metrics[0].value, 1)
    gpu.sm_occupancy = _percent(m.metrics[1].value, 4)  # a single warp is ~0.01 %: four decimals


def _percent(value: Any, digits: int) -> float | None:
    v = float(value)
    return round(v, digits) if 0.0 <= v <= 100.0 else None


def _buffered(nv: Any, h: Any, kind: int, since_us: int, scale: float) -> tuple[list[float], list[int]]:
    """The driver's samples of one kind newer than ``since_us`` (values, time stamps), oldest
    first; none when the driver has none newer (NOT_FOUND) or cannot sample this (NOT_SUPPORTED)."""
    try:
        vtype, samples = nv.nvmlDeviceGetSamples(h, kind, since_us)
    except nv.NVMLError:
        return [], []
    pairs = sorted((int(s.timeStamp), float(nvml_util.union_value(s.sampleValue, int(vtype)))) for s in samples)
    pairs = pairs[-MAX_ACTIVITY_SAMPLES:]
    return [round(v / scale, 2) for _, v in pairs], [t for t, _ in pairs]
