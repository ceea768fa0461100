"""The NVLink half of the live NVML read: each link's state and error counters.

Kept apart from the rest of the reader (gpuhc/sources/nvml.py, whose ``NvmlLive`` this mixin is
part of) because it is most of the read's time and the part that changes with the stage:

- One ``nvmlDeviceGetFieldValues`` batch per GPU asks for every link's state and counters as
  ``(fieldId, link)`` pairs (gpuhc/sources/nvml_fields.py says which).
- The three DL error counters cost ~0.8 ms per link each in the driver, every other link field
  almost nothing (docs/verification.md run 14). So they are asked for on one slice of the links
  only: of GPU i, the links ``in_dl_slice(link, dl_rotation, dl_phases.get(i, 0))``; the nvlink
  check picks the slice from its state (gpuhc/checks/nvlink.py) and reads the rest from there.
  The reading says which slice it holds (``NvmlReading.dl_rotation``/``dl_phases``).
- The early read (gpuhc/run/nvml_early.py) starts before the state is loaded and asks for no DL
  counter (``dl_rotation=None``); :meth:`LinkReads.top_up` adds the slice once it is known, one
  more batch per GPU, while the early thread still holds NVML started.
"""

from __future__ import annotations

from typing import Any

from gpuhc.model.nvml import NvLinkState, NvmlReading
from gpuhc.run.phases import mark
from gpuhc.sources import nvml_util
from gpuhc.sources.nvml_fields import DL_COUNTERS, LEGACY_LINK_FIELDS, LEGACY_MAX_LINKS, LINK_FIELDS, LINK_UP_STATES, in_dl_slice
from gpuhc.sources.nvml_util import Field, GpuGone


class LinkReads:
    """The NVLink methods of ``NvmlLive`` (which provides ``_nv``, ``_field_batch``, ``_call``,
    ``_note``, ``_lose``, ``_shutdown``, ``_module``, ``dl_rotation`` and ``dl_phases``)."""

    _nv: Any
    _module: Any
    dl_rotation: int | None
    dl_phases: dict[int, int]
    notes: list[str]

    def _nvlinks(self, h: Any, i: int, count_field: Field | None) -> list[NvLinkState]:
        """Every link of GPU i: its state and counters in one batch, the DL ones of its slice."""
        nv = self._nv
        if count_field is not None and count_field.ok:
            count = int(count_field.value)
        else:  # no link-count field: probe link states until the driver says there are no more
            count = 0
            limit = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
            while count < limit and self._call(nv.nvmlDeviceGetNvLinkState, h, count, gpu=i,
                                               what="NVLink state", quiet=True) is not None:
                count += 1
        if count <= 0:
            return []
        scoped = [(name, getattr(nv, const)) for name, const in LINK_FIELDS
                  if hasattr(nv, const) and name not in DL_COUNTERS]
        wanted: list[tuple[Any, tuple[int, int]]] = []
        if self.dl_rotation is not None:
            wanted += self._dl_wanted(list(range(count)), self._phase(i))
        for link in range(count):
            wanted += [((link, name), (fid, link)) for name, fid in scoped]
            if link < LEGACY_MAX_LINKS:
                for name, const in LEGACY_LINK_FIELDS:
                    fid = getattr(nv, const.format(n=link), None)
                    if fid is not None:
                        wanted.append(((link, name), (fid, 0)))
        got = self._field_batch(h, i, wanted)
        links: list[NvLinkState] = []
        for link in range(count):
            state = got.get((link, "_state"))
            if state is not None and state.ok:
                active: bool | None = int(state.value) in LINK_UP_STATES
            else:
                up = self._call(nv.nvmlDeviceGetNvLinkState, h, link, gpu=i, what=f"NVLink {link} state")
                active = None if up is None else up == nv.NVML_FEATURE_ENABLED
            links.append(NvLinkState(link=link, active=active))
        self._merge(i, {link.link: link for link in links}, got)
        return links

    def _phase(self, i: int) -> int:
        return self.dl_phases.get(i, 0) if self.dl_rotation and self.dl_rotation > 1 else 0

    def _record(self, reading: NvmlReading, i: int, phase: int) -> None:
        """Say on the reading which slice of GPU i's links its DL counters come from."""
        if self.dl_rotation and self.dl_rotation > 1:
            reading.dl_phases[i] = phase

    def _dl_wanted(self, links: list[int], phase: int) -> list[tuple[Any, tuple[int, int]]]:
        """The (key, (fieldId, link)) pairs of the DL counters of the slice's links."""
        nv, rotation = self._nv, self.dl_rotation or 1
        fields = [(name, getattr(nv, const)) for name, const in LINK_FIELDS
                  if name in DL_COUNTERS and hasattr(nv, const)]
        return [((link, name), (fid, link)) for link in links if in_dl_slice(link, rotation, phase)
                for name, fid in fields]

    def _merge(self, i: int, links: dict[int, NvLinkState], got: dict[Any, Field]) -> None:
        """Per-link answers into each link's ``errors``; NOT_SUPPORTED leaves the counter out."""
        for (lk, name), f in got.items():
            if f.ok and not name.startswith("_") and lk in links:
                links[lk].errors[name] = int(f.value)
        errs = {f.error for f in got.values() if f.error}
        if errs:
            self._note(f"gpu{i}: some NVLink counters failed: {', '.join(sorted(errs))}")

    def top_up(self, reading: NvmlReading, rotation: int, phases: dict[int, int]) -> NvmlReading:
        """Add the DL counters of a slice to a reading taken without them (``dl_rotation=None``):
        one more field batch per GPU whose links were read. Called while the early read still
        holds NVML, so the init here only counts up."""
        if not reading.available:
            return reading
        mark("nvml_topup_start")
        self.notes, self.dl_rotation, self.dl_phases = [], max(1, int(rotation)), dict(phases)
        nv, why = nvml_util.start(self._module)
        if nv is None:
            reading.notes.append(f"NVLink DL counters not read: {why}")
            return reading
        self._nv = nv
        try:
            for gpu in reading.gpus:
                if gpu.lost or not gpu.nvlinks:
                    continue
                try:
                    h = nv.nvmlDeviceGetHandleByIndex(gpu.index)
                    by_link = {link.link: link for link in gpu.nvlinks}
                    phase = self._phase(gpu.index)
                    got = self._field_batch(h, gpu.index, self._dl_wanted(list(by_link), phase))
                except GpuGone as e:
                    self._lose(gpu, e)
                    continue
                except nv.NVMLError as e:
                    self._note(f"gpu{gpu.index}: NVLink DL counters: {e}")
                    continue
                self._merge(gpu.index, by_link, got)
                self._record(reading, gpu.index, phase)
            reading.dl_rotation = self.dl_rotation
        finally:
            self._shutdown()
        reading.notes.extend(self.notes)
        mark("nvml_topup")
        return reading
