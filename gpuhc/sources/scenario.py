"""Replay a scenario (or a `gpuhc snapshot` recording) as if it were the node.

The document format is described in :mod:`gpuhc.sources.snapshot_format`. This module adds time:

- ``steps:`` is a list of partial documents. Step 0 is the base document; step k is the base with
  ``steps[0] .. steps[k-1]`` applied in order, so a counter can grow from one run to the next.
  ``Scenario.steps`` is the number of distinct states (``len(steps) + 1``); a step past the end
  clamps to the last state, so a scenario "stays broken" however often the runner advances it.
- Inside a step: ``gpus`` (mapping ``{index: fields}`` or a list by position) and ``defaults``
  (every GPU) override GPU fields; NVLink lists merge by link number; ``kernel_log`` lines and
  ``kernel.events`` are *appended* (a kernel log only grows); ``ib_ports`` merge by
  ``(device, port)`` and ``aer`` by ``pci``; ``count`` can drop or add GPUs; anything else
  (``pci_gpus`` too: the whole list of GPUs on the bus; ``occupancy``: the whole section)
  replaces the base value.

``extends: healthy-8xh100.yaml`` (a path relative to the file) starts from another scenario's
base state and applies this file on top like a step, so a fault scenario holds only the fault.

Every error names file, line and key: a scenario is hand-written, and a typo in it must not come
out as a traceback or, worse, as a silently healthy node.
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from gpuhc.errors import ConfigError, SourceError
from gpuhc.text.logtext import escape
from gpuhc.model.activity import Activity
from gpuhc.model.host import AerCounters, HostReading, IbPort, ImexStatus
from gpuhc.model.kernel import KernelLog
from gpuhc.model.nvml import NvmlReading
from gpuhc.model.occupancy import Occupancy
from gpuhc.model.record import Record
from gpuhc.sources.scenario_state import State, tree_copy
from gpuhc.sources.scenario_validate import STEP_KEYS, TOP_KEYS, gpu_entries, validate_document
from gpuhc.sources.snapshot_build import (
    aer_from_dict, gpu_from_dict, ib_port_from_dict, imex_from_dict, kernel_from_dict, nvml_from_doc, occupancy_from_dict,
)
from gpuhc.sources.snapshot_validate import ErrorFn
from gpuhc.text.yamlpos import line_of, load_file_text, read_text

try:  # the C pickler that pickle.py hands out; importing pickle.py itself costs a replay ~1.5 ms
    from _pickle import dumps as _dumps, loads as _loads
except ImportError:  # (an interpreter without it)
    from pickle import dumps as _dumps, loads as _loads
_PROTOCOL = 5  # pickle.HIGHEST_PROTOCOL of every Python gpuhc supports

_MAX_EXTENDS = 8  # a chain longer than this is a loop


def _fresh(value: Any) -> Any:
    """A deep copy of a reading, by a round trip through pickle: the same objects a deepcopy
    makes (both rebuild each object by its ``__reduce_ex__``, shared parts stay shared), in about
    a quarter of the time (a replayed 8-GPU NVML reading: 0.4 ms against 1.7 ms). The bytes
    never leave this call, so nothing foreign is ever unpickled. A value pickle cannot take is
    deep-copied."""
    if value is None:
        return None
    try:
        blob = _dumps(value, _PROTOCOL)
    except Exception:  # (a local class, a function: no model type holds one)
        return copy.deepcopy(value)
    return _loads(blob)


# The replay's sources are plain classes: see gpuhc/sources/__init__.py (_Sliced). Each says
# ``in_memory``: its read only copies what the recording holds, so gpuhc/run/read.py makes it
# inline instead of in a thread of its own.
class _Fixed:
    """A replay source: hands out a fresh copy each read, so a caller cannot alter the recording."""

    __slots__ = ("value",)
    in_memory = True

    def __init__(self, value: Any):
        self.value = value

    def read(self) -> Any:
        return _fresh(self.value)


class _KernelLines:
    __slots__ = ("lines", "source", "now", "boot_id")
    in_memory = True

    def __init__(self, lines: list[str], source: str, now: float | None = None, boot_id: str | None = None):
        # now: the recording's time: its year-less stamps are of that year
        self.lines, self.source, self.now, self.boot_id = lines, source, now, boot_id

    def read(self) -> KernelLog:
        from gpuhc.sources.kernel_log import parse_lines  # lazy: only scenarios with a log need it

        log = parse_lines(self.lines, now=self.now)
        log.source, log.boot_id = self.source, self.boot_id
        return log


class _Sysfs:
    __slots__ = ("ports", "counters", "pci_gpus")
    in_memory = True

    def __init__(self, ports: list[IbPort], counters: list[AerCounters], pci_gpus: list[str] | None = None):
        self.ports, self.counters, self.pci_gpus = ports, counters, pci_gpus

    def ib_ports(self) -> list[IbPort]:
        return _fresh(self.ports)

    def aer(self) -> list[AerCounters]:
        return _fresh(self.counters)

    def nvidia_gpus(self) -> list[str] | None:
        """The scenario's ``pci_gpus``; None when it has none (unknown, never the live bus)."""
        return None if self.pci_gpus is None else list(self.pci_gpus)


@dataclass(eq=False, repr=False)
class Scenario(Record):
    """A recorded node resolved at one step: its readings, and its sources for a replay."""

    path: str
    step: int  # the state in use (after clamping)
    steps: int  # number of distinct states: 1 + len(steps:)
    nvml: NvmlReading
    hostname: str | None = None
    time: float | None = None
    boot_id: str | None = None  # the recorded boot: replays of two boots are told apart as a live node's
    description: str | None = None
    kernel_lines: list[str] | None = None
    kernel: KernelLog | None = None
    ib_ports: list[IbPort] | None = None
    aer: list[AerCounters] | None = None
    pci_gpus: list[str] | None = None
    occupancy: Occupancy | None = None
    imex: ImexStatus | None = None
    activity: Activity | None = None  # job activity
    gres: dict[str, str] | None = None  # {conf: gres.conf text, mig_minors: mig-minors text}
    host: HostReading | None = None  # the node around the GPUs (gpuhc/sources/host.py)

    def nvml_source(self) -> _Fixed:
        return _Fixed(self.nvml)

    def occupancy_source(self) -> _Fixed:
        """The recorded processes; None (the check says "not read") when the scenario has none."""
        return _Fixed(self.occupancy)

    def imex_source(self) -> _Fixed:
        """The recorded IMEX status; None (not read) when the scenario has none."""
        return _Fixed(self.imex)
    def host_source(self) -> _Fixed:
        """The recorded host; None (not read) when the scenario has none."""
        return _Fixed(self.host)

    def activity_source(self) -> _Fixed:
        """The recorded job activity; None (the jobs check says "not read") when there is none."""
        return _Fixed(self.activity)

    @property
    def has_kernel_log(self) -> bool:
        return self.kernel_lines is not None or self.kernel is not None

    def kernel_log_source(self) -> Any:
        if self.kernel is not None:
            return _Fixed(self.kernel)
        return _KernelLines(list(self.kernel_lines or []), f"{self.path} (scenario kernel_log)", self.time,
                            self.boot_id)

    @property
    def has_sysfs(self) -> bool:
        return self.ib_ports is not None or self.aer is not None or self.pci_gpus is not None

    def sysfs_source(self) -> _Sysfs:
        return _Sysfs(self.ib_ports or [], self.aer or [], self.pci_gpus)


# Inside loaded_once(): the last scenario loaded, with the text of each file it was made from. A
# replay names its node from the recording (gpuhc/cli/common.py) and then reads it
# (build_sources): within one command the recording is validated and resolved once, not twice.
# The files are read again (cheap, and surer than a file's stat); any text changed: loaded
# afresh. Outside the block every call loads afresh, so no caller sees another's Scenario.
_memo: list | None = None


@contextmanager
def loaded_once() -> Iterator[None]:
    """Within the block, a scenario loaded again at the same step is the same Scenario object:
    for one command whose callers only read it (its sources hand out copies). A block inside
    another shares the outer one's memo."""
    global _memo
    if _memo is not None:
        yield
        return
    outer, _memo = _memo, []
    try:
        yield
    finally:
        _memo = outer


def load_scenario(path: str, step: int | None = None) -> Scenario:
    """Read, validate and resolve ``path`` at ``step`` (None = 0). Raises SourceError."""
    if _memo:
        last_path, used, steps_n, files, scenario = _memo
        if last_path == path and used == (0 if step is None else max(0, min(int(step), steps_n))) \
                and all(_same_text(f, text) for f, text in files):
            return scenario
    read: list[tuple[str, str]] = []
    state, steps, err = _load_base(path, 0, read)
    used = 0 if step is None else max(0, min(int(step), len(steps)))
    for i in range(used):
        state.apply(steps[i], ("steps", i), err)
    scenario = _build(state, path, used, len(steps) + 1, err)
    if _memo is not None:
        _memo[:] = [path, used, len(steps), tuple(read), scenario]
    return scenario


def _same_text(path: str, text: str) -> bool:
    try:
        return read_text(path, follow_links=False) == text
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return False


# The base states of the scenarios others extend, by (path, depth): the files read for each (the
# parent's own parents too) and a copy of the state. A long process replaying recordings that
# extend the same few (the campaign model: 64 nodes' files, rewritten every run, on the healthy
# node and the fault scenarios) reads a parent again, and validates and merges it only when its
# text (or an ancestor's) changed. Only states made without an error are kept.
_bases: dict[tuple[str, int], tuple[tuple[tuple[str, str], ...], bytes | State]] = {}
_MAX_BASES = 64


def _parent_state(path: str, depth: int, read: list) -> State:
    """:func:`_load_base`'s state of a parent scenario, from ``_bases`` when every file it was
    made from reads the same."""
    kept = _bases.get((path, depth))
    if kept is not None and all(_same_text(f, text) for f, text in kept[0]):
        read.extend(kept[0])
        return State.thaw(kept[1])
    own: list[tuple[str, str]] = []
    state, _, _ = _load_base(path, depth, own)
    read.extend(own)
    _bases.pop((path, depth), None)
    while len(_bases) >= _MAX_BASES:
        _bases.pop(next(iter(_bases)))
    _bases[(path, depth)] = (tuple(own), state.freeze())
    return state


def _load_base(path: str, depth: int, read: list) -> tuple[State, list[dict], ErrorFn]:
    """The base state of ``path`` (its parent's base with this file applied) and its steps.

    ``extends: other.yaml`` (relative to this file) starts from that scenario's base state; the
    parent's steps are not inherited. It keeps fault scenarios down to the lines that differ
    from the healthy node they break. ``read`` gets each file's path and text (load_scenario's
    memo).
    """
    try:
        text = read_text(path, follow_links=False)
    except OSError as e:
        raise SourceError(f"{path}: cannot read scenario: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: cannot read scenario: not UTF-8 text (byte {e.start})") from None
    except ValueError as e:
        raise SourceError(f"{path}: cannot read scenario: {e}") from None
    read.append((path, text))
    try:
        doc, lines = load_file_text(text, path)
    except ConfigError as e:
        raise SourceError(str(e)) from None

    def err(p: tuple, message: str) -> SourceError:
        line = line_of(lines, p)
        where = f"{path}:{line}" if line else path
        key = ".".join(str(x) for x in p)
        # Keys and values quote the file: one printable line, whatever it holds (gpuhc.text.logtext).
        return SourceError(escape(f"{where}: {key + ': ' if key else ''}{message}"))

    if doc is None:
        # An empty file is a failed copy or a truncated download far more often than a node
        # with no GPUs; judging it would report a healthy (GPU-less) node.
        raise err((), "the scenario is empty (a node without GPUs says `count: 0`)")
    validate_document(doc, (), TOP_KEYS, err)
    steps = doc.get("steps") or []
    if not isinstance(steps, list):
        raise err(("steps",), "steps must be a list of partial scenarios")
    for i, s in enumerate(steps):
        validate_document(s, ("steps", i), STEP_KEYS, err)
    if doc.get("kernel_log") is not None and doc.get("kernel") is not None:
        raise err(("kernel",), "give either kernel_log lines or kernel events, not both")

    body = {k: v for k, v in doc.items() if k not in ("steps", "extends", "format")}
    if doc.get("extends"):
        if depth >= _MAX_EXTENDS:
            raise err(("extends",), f"more than {_MAX_EXTENDS} scenarios extend each other (a loop?)")
        parent = os.path.join(os.path.dirname(os.path.abspath(path)), doc["extends"])
        if not os.path.isfile(parent):
            raise err(("extends",), f"no such scenario: {parent}")
        state = _parent_state(parent, depth + 1, read)
    else:
        state = State()
        if "count" not in body:  # a fresh document: as many GPUs as `gpus` names
            entries = gpu_entries(body.get("gpus") or [], ("gpus",), err)
            body["count"] = max((i + 1 for i, _ in entries), default=0)
    state.apply(body, (), err)
    return state, steps, err


def _build(state: State, path: str, step: int, steps: int, err: ErrorFn) -> Scenario:
    """The records of the state reached: the Scenario the replay reads."""
    gpus = [gpu_from_dict(g, p, err) for g, p in zip(state.gpus, state.gpu_paths)]
    kernel = None
    if state.kernel is not None:
        kernel = kernel_from_dict(state.kernel, ("kernel",), err)
        kernel.source = kernel.source or f"{path} (scenario kernel events)"
        kernel.boot_id = kernel.boot_id or state.top.get("boot_id")
    ib = None if state.ib is None else [ib_port_from_dict(d, ("ib_ports", i), err) for i, d in enumerate(state.ib)]
    aer = None if state.aer is None else [aer_from_dict(d, ("aer", i), err) for i, d in enumerate(state.aer)]
    t = state.top.get("time")
    occupancy = None
    if state.occupancy is not None:
        for i, g in enumerate(state.occupancy.get("gpus") or []):
            if g["index"] >= len(gpus):
                raise err(("occupancy", "gpus", i, "index"), f"GPU {g['index']} does not exist (count is {len(gpus)})")
        occupancy = occupancy_from_dict(state.occupancy, {g.index: g.uuid for g in gpus},
                                        {g.index: g.mig for g in gpus if g.mig_mode and g.mig})
    activity = None
    if state.activity is not None:
        from gpuhc.sources.activity_io import activity_from_dict

        activity = activity_from_dict(state.activity)
    return Scenario(
        path=path, step=step, steps=steps, nvml=nvml_from_doc(state.top, gpus),
        hostname=state.top.get("hostname"), time=None if t is None else float(t), boot_id=state.top.get("boot_id"),
        description=state.top.get("description"), kernel_lines=state.kernel_lines, kernel=kernel,
        ib_ports=ib, aer=aer, pci_gpus=state.pci_gpus, occupancy=occupancy, activity=activity,
        imex=None if state.imex is None else imex_from_dict(state.imex), gres=state.gres,
        host=None if state.host is None else HostReading(**tree_copy(state.host)),
    )
