"""The live NVML source: one read of every GPU counter the checks use, through pynvml.

Why it is shaped this way:

- ``pynvml`` is imported inside :meth:`NvmlLive.read`, so a replay run never pays for it and a node
  without the package gets a clear "NVML unavailable" reading instead of an ImportError.
- A missing library, an unloaded driver or a failed ``nvmlInit`` is a *reading*
  (``available=False`` with the reason), never an exception: the checks turn it into one clear
  result and the node is judged on the rest.
- One failing getter must not hide the rest of the GPU: NOT_SUPPORTED becomes ``None`` (a check
  says "n/a"), any other NVML error becomes ``None`` plus a line in :attr:`NvmlLive.notes`.
- A GPU whose handle cannot be obtained, or that answers "GPU is lost", still appears in the
  reading with its index and ``name = "unknown (NVML: <error>)"``, empty ``uuid`` and
  ``pci_bus_id`` unless they were read before the GPU went away. An inventory check sees the
  GPU count it expects and a name that says what happened, instead of a silently shorter list.
- Speed (docs/ARCHITECTURE.md, "Hot path"): two batched ``nvmlDeviceGetFieldValues`` calls per
  GPU (device-wide fields; every NVLink's state and error counters as ``(fieldId, link)``
  pairs: gpuhc/sources/nvml_links.py) instead of one getter per counter. Measured on H200,
  driver 580.159.04 (bench/nvml_probe.py, bench/nvml_field_cost.py): simple getters 1-30 us,
  the device batch 0.7 ms, nvmlInit + nvmlShutdown 21 ms, each of the three NVLink DL error
  counters ~0.8 ms *per link* however they are asked for. So those are asked for on one slice
  of the links per run, the clock-event sample rounds after the first are taken between two
  GPUs' link batches once the interval has passed, and a stage that concerns some GPUs only
  (the prolog: the job's) reads of the others only who they are, how hot and how busy.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from gpuhc.model.nvml import GpuReading, NvmlReading
from gpuhc.model.pci import norm_pci
from gpuhc.run.phases import mark
from gpuhc.sources import nvml_mig, nvml_util
from gpuhc.sources.nvml_fabric import c2c_errors, read_fabric
from gpuhc.sources.nvml_fields import BOOL_FIELDS, DEVICE_FIELDS, SIMPLE_GETTERS
from gpuhc.sources.nvml_links import LinkReads
from gpuhc.sources.nvml_util import error_name as _error_name
from gpuhc.sources.nvml_util import Field, GpuGone, Rounds, field_value, pci_getter
from gpuhc.sources.nvml_util import text as _text

log = logging.getLogger("gpuhc.sources.nvml")


class NvmlLive(LinkReads):
    """Read the node's GPUs through NVML. See the module docstring for the rules."""

    def __init__(self, clock_samples: int = 3, sample_interval_s: float = 0.02, module: Any = None,
                 gpus: list[int] | None = None, dl_rotation: int | None = 1, dl_phases: dict[int, int] | None = None):
        self.clock_samples = max(1, int(clock_samples))
        # The stage's GPUs (the prolog's: the job's), read in full; the others only who they are,
        # their temperature and how busy (see _sibling). None: all.
        self.gpus = None if gpus is None else frozenset(gpus)
        # The DL counters of GPU i are asked for on the links of slice dl_phases.get(i, 0) of
        # dl_rotation (1: every link); None: on no link, for top_up to add later.
        self.dl_rotation = dl_rotation if dl_rotation is None else max(1, int(dl_rotation))
        self.dl_phases = dict(dl_phases or {})
        self.sample_interval_s = max(0.0, float(sample_interval_s))
        self._module = module  # tests pass a fake pynvml; None imports the real one
        self.notes: list[str] = []  # per-field NVML errors of the last read, for humans

    # ------------------------------------------------------------------ entry point

    def read(self) -> NvmlReading:
        self.notes = []
        mark("nvml_start")
        nv, why = nvml_util.start(self._module)
        if nv is None:
            return NvmlReading(available=False, error=why)
        mark("nvml_init")
        self._nv = nv
        try:
            reading = self._read_all()
            reading.notes = list(self.notes)
            mark("nvml_read")
            return reading
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        nv = self._nv
        try:
            nv.nvmlShutdown()
        except nv.NVMLError as e:
            self._note(f"nvmlShutdown: {e}")

    # ------------------------------------------------------------------ whole node

    def _read_all(self) -> NvmlReading:
        nv = self._nv
        reading = NvmlReading(available=True)
        reading.driver_version = self._call(nv.nvmlSystemGetDriverVersion, what="driver version")
        cuda = self._call(nv.nvmlSystemGetCudaDriverVersion, what="CUDA driver version")
        if isinstance(cuda, int) and cuda > 0:
            reading.cuda_driver_version = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            return NvmlReading(False, f"nvmlDeviceGetCount failed: {e}", reading.driver_version,
                               reading.cuda_driver_version)

        # One GPU after the other: a thread per GPU was measured on 2x H200 and gained nothing
        # (73.7 vs 76.7 ms, medians of 7) -- the driver serialises these calls. The NVLink error
        # counters (most of the time) come last, with the clock-event rounds taken between two
        # GPUs' counters once an interval has passed, so the sampling window mostly costs nothing.
        clock = Rounds(self.clock_samples, self.sample_interval_s)
        reading.dl_rotation = self.dl_rotation or 1
        reads = [self._read_gpu(index) for index in range(count)]
        reading.gpus = [gpu for gpu, _, _ in reads]
        live = [(gpu, h) for gpu, h, _ in reads]
        for gpu, h, links in reads:
            if h is None or links is False:
                continue
            if clock.due():
                self._clock_round(live)
            try:
                gpu.nvlinks = self._nvlinks(h, gpu.index, links)
                if gpu.nvlinks and self.dl_rotation is not None:
                    self._record(reading, gpu.index, self._phase(gpu.index))
            except GpuGone as e:
                self._lose(gpu, e)
                live = [(g, hh) for g, hh in live if g is not gpu]
        while clock.wait():
            self._clock_round(live)
        return reading

    def _clock_round(self, live: list[tuple[GpuReading, Any]]) -> None:
        """One more clock-event sample of every GPU that gave the first one."""
        for gpu, handle in live:
            if handle is None or not gpu.clock_event_samples:
                continue
            try:
                mask = self._clock_reasons(handle, gpu.index)
            except GpuGone:
                continue
            if mask is not None:
                gpu.clock_event_samples.append(mask)

    # ------------------------------------------------------------------ one GPU

    def _read_gpu(self, index: int) -> tuple[GpuReading, Any, Any]:
        """(reading, handle or None when lost, NVLink-count field; False: read no links)."""
        nv = self._nv
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as e:
            self._note(f"gpu{index}: no handle: {e}")
            return GpuReading(index=index, name=f"unknown (NVML: {e})", uuid="", pci_bus_id="", lost=True), None, False
        gpu = GpuReading(index=index, name="", uuid="", pci_bus_id="")
        try:
            if self.gpus is not None and index not in self.gpus:
                self._sibling(gpu, handle)
                return gpu, handle, False
            links = self._fill_gpu(gpu, handle)
        except GpuGone as e:
            self._lose(gpu, e)
            return gpu, None, False
        return gpu, handle, links

    def _lose(self, gpu: GpuReading, e: Exception) -> None:
        self._note(f"gpu{gpu.index}: {e}")
        gpu.name = f"unknown (NVML: {e})"
        gpu.lost = True

    def _inventory(self, gpu: GpuReading, h: Any) -> None:
        nv, i = self._nv, gpu.index
        gpu.name = _text(self._call(nv.nvmlDeviceGetName, h, gpu=i, what="name")) or "unknown"
        gpu.uuid = _text(self._call(nv.nvmlDeviceGetUUID, h, gpu=i, what="UUID")) or ""
        pci = self._call(pci_getter(nv), h, gpu=i, what="PCI info")
        if pci is not None:
            gpu.pci_bus_id = norm_pci(_text(pci.busId) or "")
        gpu.serial = _text(self._call(nv.nvmlDeviceGetSerial, h, gpu=i, what="serial"))
        # How Slurm names it (/dev/nvidia<minor>) and its MIG layout: gpuhc/node/gpumap.py maps Slurm's
        # GPUs with them, and gpu-count holds the layout to the baseline.
        gpu.minor = nvml_mig.minor(nv, h)
        gpu.mig_mode = nvml_mig.mig_mode(nv, h)
        if gpu.mig_mode:
            gpu.mig = [inst for _, inst in nvml_mig.mig_devices(nv, h, lambda t: self._note(f"gpu{i}: {t}"))]

    def _sibling(self, gpu: GpuReading, h: Any) -> None:
        """Not this stage's GPU: who it is (gpu-count, xid) and how hot and busy (thermal compares
        a GPU with all its siblings); a few getters of microseconds each, no counters."""
        nv, i = self._nv, gpu.index
        self._inventory(gpu, h)
        mask = self._clock_reasons(h, i)
        gpu.clock_event_samples = [] if mask is None else [mask]
        for attr, getter, arg, convert in SIMPLE_GETTERS:
            if attr in ("temp_gpu_c", "utilization_gpu"):
                args = (h,) if arg is None else (h, getattr(nv, arg))
                value = self._call(getattr(nv, getter), *args, gpu=i, what=attr)
                setattr(gpu, attr, value if value is None or convert is None else convert(value))

    def _fill_gpu(self, gpu: GpuReading, h: Any) -> Field | None:
        """Everything but the NVLink counters; returns the link-count field for those."""
        nv, i = self._nv, gpu.index
        self._inventory(gpu, h)
        gpu.vbios = _text(self._call(nv.nvmlDeviceGetVbiosVersion, h, gpu=i, what="VBIOS"))
        pm = self._call(nv.nvmlDeviceGetPersistenceMode, h, gpu=i, what="persistence mode")
        gpu.persistence_mode = None if pm is None else pm == nv.NVML_FEATURE_ENABLED

        fields = self._device_fields(h, i)
        for attr, _ in DEVICE_FIELDS:
            f = fields.get(attr)
            if attr.startswith("_") or f is None or not f.ok:
                continue
            setattr(gpu, attr, bool(f.value) if attr in BOOL_FIELDS else int(f.value))
        self._fallbacks(gpu, h, fields)

        mask = self._clock_reasons(h, i)
        gpu.clock_event_samples = [] if mask is None else [mask]
        for attr, getter, arg, convert in SIMPLE_GETTERS:
            args = (h,) if arg is None else (h, getattr(nv, arg))
            value = self._call(getattr(nv, getter), *args, gpu=i, what=attr)
            setattr(gpu, attr, value if value is None or convert is None else convert(value))
        read_fabric(nv, h, gpu, self._note, self._raise_if_gone)
        gpu.c2c_errors = c2c_errors(fields)
        return fields.get("_nvlink_count")

    # ------------------------------------------------------------------ batched counters

    def _device_fields(self, h: Any, i: int) -> dict[str, Field]:
        wanted = [(attr, getattr(self._nv, const)) for attr, const in DEVICE_FIELDS if hasattr(self._nv, const)]
        return self._field_batch(h, i, [(attr, (fid, 0)) for attr, fid in wanted])

    def _field_batch(self, h: Any, i: int, wanted: list[tuple[Any, tuple[int, int]]]) -> dict[Any, Field]:
        """One nvmlDeviceGetFieldValues call; key -> Field. A failed call yields no keys."""
        nv = self._nv
        if not wanted:
            return {}
        try:
            values = nv.nvmlDeviceGetFieldValues(h, [pair for _, pair in wanted])
        except nv.NVMLError as e:
            self._raise_if_gone(e)
            if not _is(nv, e, "NVML_ERROR_NOT_SUPPORTED"):
                self._note(f"gpu{i}: field values: {e}")
            return {}
        out: dict[Any, Field] = {}
        for (key, _), v in zip(wanted, values):
            ret = int(v.nvmlReturn)
            if ret == nv.NVML_SUCCESS:
                out[key] = Field(True, field_value(v))
            elif ret == nv.NVML_ERROR_NOT_SUPPORTED:
                out[key] = Field(False)
            else:
                if ret == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
                    raise GpuGone("GPU is lost")
                out[key] = Field(False, error=_error_name(nv, ret))
        return out

    def _fallbacks(self, gpu: GpuReading, h: Any, fields: dict[str, Field]) -> None:
        """Dedicated getters for the counters that matter most, when the batch did not give them
        (older drivers without these field ids, or a batch that failed as a whole)."""
        nv, i = self._nv, gpu.index

        def missing(attr: str) -> bool:
            f = fields.get(attr)
            return f is None or (not f.ok and f.error is not None)

        if missing("ecc_mode"):
            mode = self._call(nv.nvmlDeviceGetEccMode, h, gpu=i, what="ECC mode")
            gpu.ecc_mode = None if mode is None else mode[0] == nv.NVML_FEATURE_ENABLED
        ecc = (("ecc_volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
               ("ecc_aggregate_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
               ("ecc_volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"))
        for attr, etype, ctype in ecc:
            if missing(attr):
                setattr(gpu, attr, self._call(nv.nvmlDeviceGetTotalEccErrors, h, getattr(nv, etype),
                                              getattr(nv, ctype), gpu=i, what=attr))
        if missing("remap_pending"):
            rows = self._call(nv.nvmlDeviceGetRemappedRows, h, gpu=i, what="remapped rows")
            if rows is not None:
                cor, unc, pending, failure = rows
                gpu.remap_correctable, gpu.remap_uncorrectable = int(cor), int(unc)
                gpu.remap_pending, gpu.remap_failure = bool(pending), bool(failure)
        if missing("pcie_replay"):
            gpu.pcie_replay = self._call(nv.nvmlDeviceGetPcieReplayCounter, h, gpu=i, what="PCIe replay counter")

    # ------------------------------------------------------------------ single getters

    def _clock_reasons(self, h: Any, i: int) -> int | None:
        nv = self._nv
        getter = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is not None:
            try:
                return int(getter(h))
            except nv.NVMLError as e:
                self._raise_if_gone(e)
                if not _is(nv, e, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                    if not _is(nv, e, "NVML_ERROR_NOT_SUPPORTED"):
                        self._note(f"gpu{i}: clock event reasons: {e}")
                    return None
        # older drivers know only the pre-rename entry point; the bit values are the same
        old = getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if old is None:
            return None
        value = self._call(old, h, gpu=i, what="clock throttle reasons")
        return None if value is None else int(value)

    def _call(self, fn: Callable[..., Any], *args: Any, gpu: int | None = None, what: str = "",
              quiet: bool = False) -> Any:
        """Call one getter: NOT_SUPPORTED -> None; other NVML errors -> None and a note;
        GPU_IS_LOST -> abort this GPU's read."""
        nv = self._nv
        try:
            return fn(*args)
        except nv.NVMLError as e:
            if gpu is not None:
                self._raise_if_gone(e)
            if not quiet and not _is(nv, e, "NVML_ERROR_NOT_SUPPORTED"):
                self._note(f"{'' if gpu is None else f'gpu{gpu}: '}{what}: {e}")
            return None

    def _raise_if_gone(self, e: Exception) -> None:
        if _is(self._nv, e, "NVML_ERROR_GPU_IS_LOST"):
            raise GpuGone(str(e))

    def _note(self, text: str) -> None:
        self.notes.append(text)
        log.debug("nvml: %s", text)


def _is(nv: Any, e: Exception, const: str) -> bool:
    return nvml_util.is_error(nv, e, const)
