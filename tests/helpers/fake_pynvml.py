"""A stand-in for the ``pynvml`` module, for testing the live NVML source without a GPU.

Only the hardware boundary is faked: constants, error classes and ctypes structures come from the
real nvidia-ml-py (installed with gpuhc), so a wrong constant name or error code in gpuhc fails
here just as it would on a node. Each fake GPU is a plain dataclass; ``fail`` makes one getter
raise a chosen NVML error, ``lost`` makes every getter answer GPU_IS_LOST.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml as real

NS = real.NVML_ERROR_NOT_SUPPORTED


@dataclass
class FakeMig:
    """One MIG device of a fake GPU in MIG mode: its GPU and compute instance, and what NVML
    answers on its own handle (UUID, name, memory of its GPU instance, its processes)."""

    gi: int
    ci: int = 0
    uuid: str = "MIG-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    memory: tuple[int, int] = (13 << 20, 9728 << 20)  # (used, total) bytes
    compute_procs: list[tuple[int, int | None]] = field(default_factory=list)
    graphics_procs: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass(frozen=True)
class MigHandle:
    """A MIG device handle: the parent GPU's position and the MIG slot."""

    parent: int
    slot: int


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci: str = "00000000:18:00.0"
    serial: str = "1650923000001"
    vbios: str = "96.00.99.00.01"
    persistence: int = 1
    # device-wide field values; a key absent here answers NOT_SUPPORTED
    fields: dict[str, Any] = field(default_factory=lambda: {
        "NVML_FI_DEV_ECC_CURRENT": 1,
        "NVML_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
        "NVML_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "NVML_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
        "NVML_FI_DEV_REMAPPED_COR": 0,
        "NVML_FI_DEV_REMAPPED_UNC": 0,
        "NVML_FI_DEV_REMAPPED_PENDING": 0,
        "NVML_FI_DEV_REMAPPED_FAILURE": 0,
        "NVML_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "NVML_FI_DEV_MEMORY_TEMP": 38,
        "NVML_FI_DEV_NVLINK_LINK_COUNT": 18,
    })
    link_state: dict[int, int] = field(default_factory=dict)  # link -> GET_STATE value; default ACTIVE
    link_errors: dict[str, int] = field(default_factory=lambda: {
        "NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY": 0,
        "NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY": 0,
        "NVML_FI_DEV_NVLINK_ERROR_DL_CRC": 0,
    })
    per_link_errors: dict[tuple[int, str], int] = field(default_factory=dict)  # overrides
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16)  # gen, max gen, width, max width
    clock_reasons: list[int] = field(default_factory=lambda: [0x1])  # cycled through
    clocks: tuple[int, int] = (345, 2619)
    util: int = 0
    temp: int = 36
    power_mw: tuple[int, int, int] = (70000, 700000, 700000)  # draw, enforced, default
    fabric: tuple[int, int] | None = (3, 0)  # (state, status); None: NOT_SUPPORTED
    # NVLink5 fabric info beyond state and status: struct field -> value (cliqueId, clusterUuid
    # as 16 bytes, healthMask, healthSummary), and the newest fabric-info struct version this
    # fake driver knows (3; 2: a driver before the health summary; 1: only the unversioned call).
    fabric_info: dict[str, Any] = field(default_factory=dict)
    fabric_struct_max: int = 3
    # processes: (pid, usedGpuMemory in bytes or None); memory: (used, total) bytes, v2 semantics
    compute_procs: list[tuple[int, int | None]] = field(default_factory=list)
    graphics_procs: list[tuple[int, int | None]] = field(default_factory=list)
    memory: tuple[int, int] = (4 << 20, 80 << 30)
    memory_v1_extra: int = 500 << 20  # v1's "used" also counts the driver's reserve
    procs_exit_after: int | None = None  # the processes are gone after this many listings
    mig_mode: int | None = None  # current MIG mode; None: NOT_SUPPORTED (no MIG on this GPU)
    # MIG devices by slot (nvmlDeviceGetMigDeviceHandleByIndex); None: an empty slot (NOT_FOUND)
    mig_devices: list[FakeMig | None] = field(default_factory=list)
    max_mig: int = 7  # nvmlDeviceGetMaxMigDeviceCount
    minor: int | None = None  # /dev/nvidia<minor>; None: the GPU's position
    # Job activity (issue 24): the driver's sample buffer per NVML_*_SAMPLES type, as
    # (time stamp in microseconds, value) pairs; a type absent here answers NOT_SUPPORTED.
    # Power samples are milliwatts, as the driver keeps them. gpm_sm: GPM SM activity, None: no GPM;
    # gpm_occupancy: GPM SM occupancy (the driver answers a value for every metric asked).
    samples: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    gpm_sm: float | None = None
    gpm_occupancy: float = 0.0
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code
    lost: bool = False
    handle_error: int | None = None


class FakeNvml:
    """Module-like object: ``NvmlLive(module=FakeNvml([...]))``."""

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None, driver: str = "580.95.05",
                 cuda: int = 13000, has_field_values: bool = True):
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.calls: Counter[str] = Counter()
        self.listings: Counter[tuple[str, int]] = Counter()  # process listings per (getter, GPU)
        # every (GPU, fieldId, scopeId) asked of nvmlDeviceGetFieldValues, in order
        self.asked: list[tuple[int, int, int]] = []
        self.initialised = 0
        self._sample = [0] * len(gpus)
        if not has_field_values:
            self.nvmlDeviceGetFieldValues = self._missing  # type: ignore[method-assign]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml") and callable(getattr(real, name, None)):
            # a getter gpuhc calls that this fake lacks: fail loudly (constants such as
            # nvmlMemory_v2 come from the real module)
            raise AttributeError(f"fake pynvml has no {name}")
        return getattr(real, name)

    def __dir__(self) -> list[str]:  # like the real module: its constants are listed too
        return sorted(set(dir(real)) | set(super().__dir__()))

    # ------------------------------------------------------------ helpers
    def asked_links(self, const: str, gpu: int | None = None) -> list[int]:
        """The links (scope ids) whose field ``const`` was asked for, of one GPU or all, in order."""
        fid = getattr(real, const)
        return [scope for h, f, scope in self.asked if f == fid and (gpu is None or h == gpu)]

    def _missing(self, *a: Any) -> Any:
        raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _gpu(self, fn: str, h: Any) -> FakeGpu:
        self.calls[fn] += 1
        if isinstance(h, MigHandle):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)  # a getter that takes no MIG handle
        gpu = self.gpus[h]
        if gpu.lost:
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.fail:
            raise real.NVMLError(gpu.fail[fn])
        return gpu

    # ------------------------------------------------------------ library
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        self.calls["nvmlDeviceGetHandleByIndex"] += 1
        if self.gpus[i].handle_error is not None:
            raise real.NVMLError(self.gpus[i].handle_error)
        return i

    # ------------------------------------------------------------ inventory
    def nvmlDeviceGetName(self, h: Any) -> str:
        if isinstance(h, MigHandle):
            return self._mig("nvmlDeviceGetName", h).name
        return self._gpu("nvmlDeviceGetName", h).name

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        if isinstance(h, MigHandle):
            return self._mig("nvmlDeviceGetUUID", h).uuid
        return self._gpu("nvmlDeviceGetUUID", h).uuid

    # ------------------------------------------------------------ MIG
    def _mig(self, fn: str, h: MigHandle) -> FakeMig:
        self.calls[fn] += 1
        gpu = self.gpus[h.parent]
        if gpu.lost:
            raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
        mig = gpu.mig_devices[h.slot]
        assert mig is not None
        return mig

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        g = self._gpu("nvmlDeviceGetMinorNumber", h)
        return h if g.minor is None else g.minor

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        g = self._gpu("nvmlDeviceGetMaxMigDeviceCount", h)
        if g.mig_mode is None:
            raise real.NVMLError(NS)
        return g.max_mig

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, slot: int) -> MigHandle:
        g = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if not g.mig_mode or slot >= g.max_mig:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if slot >= len(g.mig_devices) or g.mig_devices[slot] is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return MigHandle(h, slot)

    def nvmlDeviceGetGpuInstanceId(self, h: MigHandle) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", h).gi

    def nvmlDeviceGetComputeInstanceId(self, h: MigHandle) -> int:
        return self._mig("nvmlDeviceGetComputeInstanceId", h).ci

    def nvmlDeviceGetPciInfo_v3(self, h: int) -> Any:
        return SimpleNamespace(busId=self._gpu("nvmlDeviceGetPciInfo_v3", h).pci.encode())

    def nvmlDeviceGetSerial(self, h: int) -> str:
        return self._gpu("nvmlDeviceGetSerial", h).serial

    def nvmlDeviceGetVbiosVersion(self, h: int) -> str:
        return self._gpu("nvmlDeviceGetVbiosVersion", h).vbios

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetPersistenceMode", h).persistence

    # ------------------------------------------------------------ counters
    def nvmlDeviceGetFieldValues(self, h: int, ids: list[Any]) -> list[Any]:
        gpu = self._gpu("nvmlDeviceGetFieldValues", h)
        by_id = {getattr(real, k): v for k, v in gpu.fields.items()}
        link_by_id = {getattr(real, k): k for k in gpu.link_errors}
        out = []
        for asked in ids:
            # like pynvml: a (fieldId, scopeId) pair, or a bare fieldId (scope 0)
            fid, scope = asked if isinstance(asked, tuple) else (asked, 0)
            self.asked.append((h, fid, scope))
            value: Any = None
            if fid == real.NVML_FI_DEV_NVLINK_GET_STATE:
                value = gpu.link_state.get(scope, real.NVML_NVLINK_STATE_ACTIVE)
            elif fid in link_by_id:
                name = link_by_id[fid]
                value = gpu.per_link_errors.get((scope, name), gpu.link_errors[name])
            elif fid in by_id:
                value = by_id[fid]
            if isinstance(value, tuple):  # (error code,) forces a per-field error
                out.append(SimpleNamespace(nvmlReturn=value[0], valueType=3, value=SimpleNamespace(ullVal=0)))
            elif value is None:
                out.append(SimpleNamespace(nvmlReturn=NS, valueType=3, value=SimpleNamespace(ullVal=0)))
            else:
                # the value is a C union: its 32-bit member reads the low half
                out.append(SimpleNamespace(nvmlReturn=real.NVML_SUCCESS, valueType=3,
                                           value=SimpleNamespace(ullVal=value, uiVal=value & 0xFFFFFFFF)))
        return out

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        g = self._gpu("nvmlDeviceGetEccMode", h)
        return [g.fields.get("NVML_FI_DEV_ECC_CURRENT", 1)] * 2

    def nvmlDeviceGetTotalEccErrors(self, h: int, etype: int, ctype: int) -> int:
        self._gpu("nvmlDeviceGetTotalEccErrors", h)
        return 0

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        self._gpu("nvmlDeviceGetRemappedRows", h)
        return (1, 2, 1, 0)

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        self._gpu("nvmlDeviceGetPcieReplayCounter", h)
        return 7

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        g = self._gpu("nvmlDeviceGetNvLinkState", h)
        if link >= g.fields.get("NVML_FI_DEV_NVLINK_LINK_COUNT", 0):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return 1 if g.link_state.get(link, 1) in (1, 2) else 0

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", h).pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", h).pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetCurrPcieLinkWidth", h).pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", h).pcie[3]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        g = self._gpu("nvmlDeviceGetCurrentClocksEventReasons", h)
        value = g.clock_reasons[self._sample[h] % len(g.clock_reasons)]
        self._sample[h] += 1
        return value

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return 0x4

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        g = self._gpu("nvmlDeviceGetClockInfo", h)
        return g.clocks[0] if kind == real.NVML_CLOCK_SM else g.clocks[1]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self._gpu("nvmlDeviceGetUtilizationRates", h).util, memory=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._gpu("nvmlDeviceGetTemperature", h).temp

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", h).power_mw[0]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", h).power_mw[1]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementDefaultLimit", h).power_mw[2]

    # ------------------------------------------------------------ occupancy
    def _procs(self, fn: str, h: Any, which: str) -> list[Any]:
        if isinstance(h, MigHandle):  # a MIG device's own list; as pynvml shapes it, ids included
            m = self._mig(fn, h)
            return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=m.gi, computeInstanceId=m.ci)
                    for pid, used in getattr(m, which)]
        g = self._gpu(fn, h)
        self.listings[(fn, h)] += 1
        if g.procs_exit_after is not None and self.listings[(fn, h)] > g.procs_exit_after:
            return []
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for pid, used in getattr(g, which)]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses", h, "compute_procs")

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses", h, "graphics_procs")

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        g = self._gpu("nvmlDeviceGetMigMode", h)
        if g.mig_mode is None:
            raise real.NVMLError(NS)
        return [g.mig_mode, g.mig_mode]

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        if isinstance(h, MigHandle):
            used, total = self._mig("nvmlDeviceGetMemoryInfo", h).memory
            return SimpleNamespace(used=used, total=total, free=total - used)
        g = self._gpu("nvmlDeviceGetMemoryInfo", h)
        used, total = g.memory
        if version is None:
            used += g.memory_v1_extra
        elif "nvmlDeviceGetMemoryInfo_v2" in g.fail:
            raise real.NVMLError(g.fail["nvmlDeviceGetMemoryInfo_v2"])
        else:  # the v2 struct says the reserve it left out (c_nvmlMemory_v2_t's reserved)
            return SimpleNamespace(used=used, total=total, free=total - used - g.memory_v1_extra,
                                   reserved=g.memory_v1_extra)
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetGpuFabricInfoV(self, h: int, ref: Any) -> int:
        g = self._gpu("nvmlDeviceGetGpuFabricInfoV", h)
        if g.fabric_struct_max < 2:
            raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        info = getattr(ref, "_obj", ref)  # ctypes.byref(...) keeps the struct in _obj
        if int(info.version) >> 24 > g.fabric_struct_max:
            raise real.NVMLError(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self._fabric_fill(g, info)

    def nvmlDeviceGetGpuFabricInfo(self, h: int, ref: Any) -> int:
        return self._fabric_fill(self._gpu("nvmlDeviceGetGpuFabricInfo", h), getattr(ref, "_obj", ref))

    def _fabric_fill(self, g: FakeGpu, info: Any) -> int:
        if g.fabric is None:
            raise real.NVMLError(NS)
        info.state, info.status = g.fabric
        for name, value in g.fabric_info.items():
            if any(name == f[0] for f in type(info)._fields_):  # an older struct lacks the newer fields
                if name == "clusterUuid":
                    for i, b in enumerate(value):
                        info.clusterUuid[i] = b
                else:
                    setattr(info, name, value)
        return real.NVML_SUCCESS

    # ------------------------------------------------------------ job activity (issue 24)
    def nvmlDeviceGetSamples(self, h: int, kind: int, since_us: int) -> tuple[int, list[Any]]:
        g = self._gpu("nvmlDeviceGetSamples", h)
        if kind not in g.samples:
            raise real.NVMLError(NS)
        newer = [(t, v) for t, v in g.samples[kind] if t > since_us]
        if not newer:
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)  # what the driver answers with no newer sample
        out = []
        for t, v in newer:
            sample = real.c_nvmlSample_t()
            sample.timeStamp = t
            sample.sampleValue.uiVal = v
            out.append(sample)
        return real.NVML_VALUE_TYPE_UNSIGNED_INT, out

    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        g = self._gpu("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(isSupportedDevice=int(g.gpm_sm is not None))

    def c_nvmlGpmMetricsGet_t(self) -> Any:  # the real struct holds pointers only real samples fit
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None,
                               metrics=[SimpleNamespace(metricId=0, value=0.0) for _ in range(8)])

    def nvmlGpmSampleAlloc(self) -> Any:
        self.calls["nvmlGpmSampleAlloc"] += 1
        return SimpleNamespace(gpu=None)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.calls["nvmlGpmSampleFree"] += 1

    def nvmlGpmSampleGet(self, h: int, sample: Any) -> None:
        self._gpu("nvmlGpmSampleGet", h)
        sample.gpu = h

    def nvmlGpmMetricsGet(self, m: Any) -> Any:
        self.calls["nvmlGpmMetricsGet"] += 1
        gpu = self.gpus[m.sample1.gpu]
        by_id = {real.NVML_GPM_METRIC_SM_UTIL: gpu.gpm_sm, real.NVML_GPM_METRIC_SM_OCCUPANCY: gpu.gpm_occupancy}
        for metric in m.metrics[:m.numMetrics]:
            metric.value = by_id[metric.metricId]
        return m


def live_with(monkeypatch: Any, gpus: int = 2) -> FakeNvml:
    """``gpus`` fake GPUs (uuid GPU-<i>) behind the runner's live NVML source, for tests that run
    the real runner: the source is built on this module and the early NVML start forgotten."""
    import functools

    import gpuhc.sources.nvml as nvml_mod
    from gpuhc.run import nvml_early

    nv = FakeNvml([FakeGpu(uuid=f"GPU-{i}", pci=f"00000000:{0x18 + i:02X}:00.0") for i in range(gpus)])
    monkeypatch.setattr(nvml_mod, "NvmlLive", functools.partial(nvml_mod.NvmlLive, module=nv))
    monkeypatch.setattr(nvml_early, "_early", None)
    monkeypatch.setattr(nvml_early, "_started", False)
    return nv
