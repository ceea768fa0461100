"""A scenario's state while its documents and steps are applied (gpuhc/sources/scenario.py):
plain dicts, merged as the format says (gpuhc/sources/scenario.py, the module's docstring), then
built into a Scenario's records once.
"""

from __future__ import annotations

import copy
import marshal
from typing import Any

from gpuhc.model.pci import norm_pci
from gpuhc.sources.scenario_validate import gpu_entries
from gpuhc.sources.snapshot_build import merge_nvlinks
from gpuhc.sources.snapshot_validate import ErrorFn


class State:
    """The scenario's current state while steps are applied; plain dicts until built
    (gpuhc/sources/scenario.py)."""

    def __init__(self) -> None:
        self.top: dict[str, Any] = {}
        self.defaults: dict[str, Any] = {}
        self.gpus: list[dict[str, Any]] = []
        self.gpu_paths: list[tuple] = []
        self.kernel_lines: list[str] | None = None
        self.kernel: dict[str, Any] | None = None
        self.ib_defaults: dict[str, Any] = {}
        self.ib: list[dict[str, Any]] | None = None
        self.aer: list[dict[str, Any]] | None = None
        self.pci_gpus: list[str] | None = None
        self.occupancy: dict[str, Any] | None = None
        self.imex: dict[str, Any] | None = None
        self.activity: dict[str, Any] | None = None  # job activity: the whole section, replaced by a step
        self.gres: dict[str, str] | None = None
        self.host: dict[str, Any] | None = None  # the node around the GPUs: replaced whole by a step

    def copy(self) -> State:
        """A copy to apply more to, leaving this one as it was."""
        new = State.__new__(State)
        for name, value in vars(self).items():  # gpu_paths: tuples of keys, shared as they are
            setattr(new, name, list(value) if name == "gpu_paths" else tree_copy(value))
        return new

    def freeze(self) -> bytes | State:
        """This state kept for copies made later (gpuhc/sources/scenario.py keeps a parent
        scenario's state between loads): marshalled where it holds plain data only, so that a
        copy is one call in C (a parsed 8-GPU node: ~2,000 values), else a copy."""
        from gpuhc.files.parsecache import contains_foreign

        fields = vars(self)
        return self.copy() if contains_foreign(fields) else marshal.dumps(fields)

    @staticmethod
    def thaw(kept: bytes | State) -> State:
        """A fresh copy of a state that freeze() kept."""
        if isinstance(kept, State):
            return kept.copy()
        new = State.__new__(State)
        new.__dict__.update(marshal.loads(kept))
        return new

    def _resize(self, count: int) -> None:
        while len(self.gpus) > count:
            self.gpus.pop()
            self.gpu_paths.pop()
        while len(self.gpus) < count:
            i = len(self.gpus)
            gpu: dict[str, Any] = {"index": i}
            self._override(gpu, self.defaults, template=True)
            self.gpus.append(gpu)
            self.gpu_paths.append(("defaults",))

    def apply(self, part: dict[str, Any], path: tuple, err: ErrorFn) -> None:
        """Apply one partial document: the base itself, an extending file, or a step."""
        if "ib_defaults" in part:
            self.ib_defaults.update(tree_copy(part["ib_defaults"]))
            if self.ib is not None:
                self.ib = [{**d, **tree_copy(part["ib_defaults"])} for d in self.ib]
        if "defaults" in part:  # existing GPUs get them now, GPUs added by `count` later
            self._override(self.defaults, part["defaults"], template=False)
            for gpu in self.gpus:
                self._override(gpu, part["defaults"], template=True)
        if "count" in part:
            self._resize(part["count"])
        for idx, entry in gpu_entries(part.get("gpus") or [], path + ("gpus",), err):
            if idx >= len(self.gpus):
                raise err(path + ("gpus", idx), f"GPU {idx} does not exist (count is {len(self.gpus)})")
            if entry is None:
                continue
            if entry.get("index", idx) != idx:
                raise err(path + ("gpus", idx, "index"), f"this entry is GPU {idx}, not {entry['index']}")
            self._override(self.gpus[idx], entry, template=False)
            self.gpu_paths[idx] = path + ("gpus", idx)
        for key in ("hostname", "time", "boot_id", "driver_version", "cuda_driver_version", "description"):
            if key in part:
                self.top[key] = part[key]
        if "nvml" in part:
            self.top.setdefault("nvml", {}).update(part["nvml"])
        if "kernel_log" in part:
            if self.kernel is not None:
                raise err(path + ("kernel_log",), "the scenario records kernel events; add to kernel.events")
            self.kernel_lines = (self.kernel_lines or []) + list(part["kernel_log"])
        if "kernel" in part:
            if self.kernel_lines is not None:
                raise err(path + ("kernel",), "the scenario has kernel_log lines; add lines, not events")
            new = tree_copy(part["kernel"])
            events = (self.kernel or {}).get("events", []) + new.pop("events", [])
            self.kernel = {**(self.kernel or {}), **new, "events": events}
        if "ib_ports" in part:
            self.ib = _merge_by(self.ib or [], part["ib_ports"], ("device", "port"), self.ib_defaults)
        if "aer" in part:
            self.aer = _merge_by(self.aer or [], [dict(a, pci=norm_pci(str(a.get("pci", "")))) for a in part["aer"]],
                                 ("pci",), {})
        if "pci_gpus" in part:
            self.pci_gpus = None if part["pci_gpus"] is None else [norm_pci(x) for x in part["pci_gpus"]]
        if "occupancy" in part:
            self.occupancy = tree_copy(part["occupancy"])
        if "imex" in part:
            self.imex = tree_copy(part["imex"])
        if "activity" in part:
            self.activity = tree_copy(part["activity"])
        if "gres" in part:
            self.gres = dict(part["gres"])
        if "host" in part:
            self.host = tree_copy(part["host"])

    @staticmethod
    def _override(gpu: dict[str, Any], fields: dict[str, Any], template: bool) -> None:
        for key, value in fields.items():
            if key == "nvlinks":
                gpu["nvlinks"] = merge_nvlinks(gpu.get("nvlinks", []), value)
            elif template and isinstance(value, str):
                gpu[key] = value.replace("{index}", str(gpu["index"]))
            else:
                gpu[key] = tree_copy(value)


_LEAVES = frozenset((str, int, float, bool, type(None)))


def tree_copy(value: Any) -> Any:
    """A deep copy of parsed YAML (gpuhc/text/yamlpos.py builds a fresh tree: no part shared, no
    loop), several times faster than copy.deepcopy, which it calls for anything else (a
    timestamp). The state copies what it keeps, so no two GPUs and no two steps share a list."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict:
        return {k: tree_copy(v) for k, v in value.items()}
    if kind is list:
        return [tree_copy(v) for v in value]
    return copy.deepcopy(value)


def _merge_by(base: list[dict], updates: list[dict], keys: tuple[str, ...], defaults: dict) -> list[dict]:
    """Merge mappings into ``base`` by the values of ``keys``; unknown ones are appended."""
    out = [dict(b) for b in base]
    index = {tuple(b.get(k) for k in keys): i for i, b in enumerate(out)}
    for u in updates:
        ident = tuple(u.get(k) for k in keys)
        if ident in index:
            cur = out[index[ident]]
            counters = {**cur.get("counters", {}), **u.get("counters", {})} if "counters" in cur else None
            cur.update(tree_copy(u))
            if counters is not None:
                cur["counters"] = counters
        else:
            index[ident] = len(out)
            out.append({**tree_copy(defaults), **tree_copy(u)})
    return out
