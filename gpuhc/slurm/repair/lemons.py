"""Lemon memory's rule: a node, or a GPU, drained K times within D days is a lemon. Pure.

A node that fails, passes its retest and fails again a week later starts every hold from zero:
the quarantine count (``[qN]`` in the reason) is dropped at each resume. Large
operators call such machines "lemon nodes" and find that a few of them cause an outsized share
of job failures (Meta, "Revisiting Reliability in Large-Scale Machine Learning Research
Clusters", arXiv 2410.21680). So gpuhc keeps a fault history apart from the reason: one
:class:`Fault` per drain gpuhc decided, with the node and the serial and UUID of the GPUs the
failing results named (a GPU moved to another node takes its record along). The rule:
``slurm.lemon.faults`` (K) drains of one node, or of one GPU wherever it sat, within
``slurm.lemon.window_days`` (D) retire it with a ``gpuhc: RETIRED lemon ...`` reason, whatever
later retests say. The defaults and their arithmetic are in docs/facts.md ("Lemon nodes").

A fault that was one of a switch incident (the same check on K nodes under one leaf within a
window, :mod:`gpuhc.slurm.policy.shared_cause`) counts for the switch, not the node (:func:`without_shared`).

Where the history lives and how it is rebuilt: :mod:`gpuhc.slurm.repair.lemon_memory`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from gpuhc.catalog.evidence import by_id, counts_toward_lemon
from gpuhc.slurm.policy.reason import format_reason, parse_reason
from gpuhc.slurm.policy.shared_cause import group_runs

MAX_TEXT = 256  # a node name, serial, UUID or check read back from a record is cut to this
# Only drains for the hardware count (gpuhc/catalog/evidence.py's ``lemon`` column): a GPU,
# NVLink, PCIe fatal or failed recovery, uncorrected memory. A process left on a GPU is a job's
# leftover (the month-long campaign, docs/campaign.md, retired healthy nodes for stray processes
# until it was left out), and a service, a mount, the host or a wedged NVML say nothing of the
# hardware a retirement takes out.
MAX_GPUS = 1024  # gpuhc.text.limits' bound on GPUs per node, for records read back
# The check a previous boot's hardware panic is recorded under (gpuhc/slurm/repair/lemon_panics.py):
# its evidence class, which says what happened; no drain, yet one fault of the node.
PANIC = by_id("panic-hardware").id
_GPU_SUBJECT = re.compile(r"gpu(\d{1,4})\b")


@dataclass(frozen=True)
class GpuId:
    """A GPU as the hardware names it: serial (the board's) and UUID (the chip's)."""

    serial: str | None = None
    uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"serial": self.serial, "uuid": self.uuid}


@dataclass(frozen=True)
class Fault:
    """One drain gpuhc decided: when, which node, which check, which GPUs it named."""

    time: float
    node: str
    check: str
    gpus: tuple[GpuId, ...] = ()
    # Whether a failing result behind it was hardware evidence (gpuhc/catalog/evidence.py); None: a
    # record written before that was kept, judged by its check's class
    hardware: bool | None = None

    @property
    def counts(self) -> bool:
        """Toward a lemon (:func:`standings`): hardware evidence only."""
        return self.hardware if self.hardware is not None else counts_toward_lemon(self.check)

    def to_dict(self) -> dict[str, Any]:
        return {"time": round(self.time, 3), "node": self.node, "check": self.check,
                "gpus": [g.to_dict() for g in self.gpus],
                **({"hardware": self.hardware} if self.hardware is not None else {})}

    @classmethod
    def from_dict(cls, data: Any) -> Fault | None:
        """Tolerant and bounded: anything that is not a fault record reads as None."""
        if not isinstance(data, dict):
            return None
        t, node, check = data.get("time"), _text(data.get("node")), _text(data.get("check")) or "?"
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or node is None:
            return None
        raw = data.get("gpus")
        gpus = [GpuId(_text(g.get("serial")), _text(g.get("uuid"))) for g in (raw if isinstance(raw, list) else [])
                if isinstance(g, dict) and (_text(g.get("serial")) or _text(g.get("uuid")))]
        hardware = data.get("hardware")
        return cls(float(t), node, check, tuple(gpus[:MAX_GPUS]), hardware if isinstance(hardware, bool) else None)


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:MAX_TEXT]


@dataclass(frozen=True)
class LemonSettings:
    enabled: bool = True
    faults: int = 3  # K
    window_s: float = 30 * 86400.0  # D

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> LemonSettings:
        return cls(bool(section["enabled"]), int(section["faults"]), float(section["window_days"]) * 86400.0)

    @property
    def window_text(self) -> str:
        days = self.window_s / 86400.0
        return f"{days:g}d" if days >= 1 else f"{self.window_s:g}s"


@dataclass(frozen=True)
class Standing:
    """One node's or one GPU's drains inside the window, newest last."""

    kind: str  # "node" / "gpu"
    key: str  # the node's name; the GPU's serial, else its UUID
    faults: tuple[Fault, ...]
    lemon: bool
    near: bool  # one drain short of a lemon

    @property
    def nodes(self) -> list[str]:
        return list(dict.fromkeys(f.node for f in self.faults))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "count": len(self.faults), "lemon": self.lemon,
                "near": self.near, "nodes": self.nodes, "faults": [f.to_dict() for f in self.faults]}


def fault_of(results: Iterable[Any], snapshot: Any, node: str, reason: str, now: float) -> Fault:
    """The fault a drain for these results records: the check that named the reason, and every
    GPU a failing result names (``gpu3``, ``gpu3/nvlink2``), identified from the run's NVML reading."""
    mine = parse_reason(reason)
    indices = set()
    failing = [r for r in results if r.status.value == "fail"]
    for r in failing:
        if m := _GPU_SUBJECT.match(str(r.subject)):
            indices.add(int(m.group(1)))
    gpus = []
    nvml = getattr(snapshot, "nvml", None)
    for g in getattr(nvml, "gpus", None) or []:
        if g.index in indices and (g.serial or g.uuid):
            gpus.append(GpuId(g.serial or None, g.uuid or None))
    hardware = any(counts_toward_lemon(r.check, r.evidence) for r in failing) if failing else None
    return Fault(now, node, mine.check if mine else "?", tuple(gpus), hardware)


def gpu_key(gpu: GpuId, serial_of: dict[str, str]) -> str | None:
    """The GPU's key: its serial; a record that has only the UUID joins the serial another
    record gave that UUID."""
    return gpu.serial or serial_of.get(gpu.uuid or "") or gpu.uuid


def standings(faults: Iterable[Fault], now: float, s: LemonSettings) -> list[Standing]:
    """Every node and GPU with a hardware drain inside the window ``(now - D, now]``, lemons first."""
    inside = sorted((f for f in faults if now - s.window_s < f.time <= now and f.counts),
                    key=lambda f: f.time)
    serial_of = {g.uuid: g.serial for f in inside for g in f.gpus if g.uuid and g.serial}
    groups: dict[tuple[str, str], list[Fault]] = {}
    for f in inside:
        groups.setdefault(("node", f.node), []).append(f)
        for key in dict.fromkeys(k for g in f.gpus if (k := gpu_key(g, serial_of))):
            groups.setdefault(("gpu", key), []).append(f)
    out = [Standing(kind, key, tuple(fs), len(fs) >= s.faults, len(fs) == s.faults - 1)
           for (kind, key), fs in groups.items()]
    return sorted(out, key=lambda st: (not st.lemon, -len(st.faults), st.kind != "node", st.key))


@dataclass(frozen=True)
class SharedCauses:
    """What groups faults into one shared cause: the leaf switch of each node (Slurm's topology)
    and the shared-cause rule's K and window (``fleet.switch``; :mod:`gpuhc.slurm.policy.shared_cause`)."""

    leaf_of: Mapping[str, str]
    min_nodes: int = 3
    window_s: float = 1800.0

    @classmethod
    def from_section(cls, leaf_of: Mapping[str, str], switch: dict[str, Any]) -> SharedCauses:
        return cls(leaf_of, int(switch["min_nodes"]), float(switch["window_s"]))


def shared(faults: Iterable[Fault], causes: SharedCauses) -> dict[tuple[str, float], str]:
    """(node, time) -> the switch, for every fault that is one of a switch incident: the same
    check failed on K nodes under one leaf within the window. Such a fault counts for the switch,
    not for the node or its GPUs."""
    runs, _ = group_runs(faults, causes.leaf_of, lambda f: f.node, lambda f: f.check, lambda f: f.time,
                         causes.min_nodes, causes.window_s)
    return {(f.node, round(f.time, 3)): leaf for leaf, _, members in runs for f in members}


def without_shared(faults: Iterable[Fault], causes: SharedCauses | None) -> list[Fault]:
    """The faults that are the node's own: those of a switch incident left out."""
    faults = list(faults)
    if causes is None or not causes.leaf_of:
        return faults
    gone = shared(faults, causes)
    return [f for f in faults if (f.node, round(f.time, 3)) not in gone]


def counted(new: Fault, history: Iterable[Fault], cleared_at: float | None = None,
            present: frozenset[str] | None = None) -> list[Fault]:
    """The history that still counts against ``new``'s node: a person's word that the node is
    mended (a release, an acknowledged resume, ``quarantine forget``: ``cleared_at``) drops its
    drains up to then, and a drain that named only GPUs no longer in the node (``present``:
    the serials it has now; the GPU was replaced) stops counting there."""
    out = []
    for f in history:
        if f.node == new.node:
            if cleared_at is not None and f.time <= cleared_at:
                continue
            serials = [g.serial for g in f.gpus]
            if present is not None and serials and all(serials) and not set(serials) & present:
                continue
        out.append(f)
    return out


def judge(new: Fault, history: Iterable[Fault], s: LemonSettings, cleared_at: float | None = None,
          present: frozenset[str] | None = None, causes: SharedCauses | None = None) -> Standing | None:
    """Is the node of this new drain, or one of its GPUs, a lemon once the drain is counted?
    The node's own count first, then the GPUs'; None when neither reaches K. Only what
    :func:`counted` keeps is counted, and (``causes``) no fault of a switch incident: the
    history must then hold the neighbours' faults too (shared event logs), or no group is seen."""
    if not s.enabled or not new.counts:
        return None
    history = counted(new, history, cleared_at, present)
    if causes is not None and causes.leaf_of:
        own = without_shared([*history, new], causes)
        if new not in own:
            return None  # this drain is one of a switch incident: it counts for the switch
        history = [f for f in own if f is not new]
    found = standings([*history, new], new.time, s)
    mine = {("node", new.node)}
    serial_of = {g.uuid: g.serial for f in [*history, new] for g in f.gpus if g.uuid and g.serial}
    mine |= {("gpu", k) for g in new.gpus if (k := gpu_key(g, serial_of))}
    for st in found:
        if st.lemon and (st.kind, st.key) in mine:
            return st
    return None


def lemon_reason(st: Standing, s: LemonSettings, evidence: str | None) -> str:
    """``gpuhc: RETIRED lemon node n1: 3 drains in 30d (xid,pcie); last: <evidence>``; ``faults``
    for ``drains`` when a previous boot's hardware panic is among them (``panic-hardware``)."""
    checks = ",".join(dict.fromkeys(f.check for f in st.faults))
    mine = parse_reason(evidence)
    last = f"; last: {mine.body}" if mine is not None and mine.body else ""
    return format_reason(f"lemon {st.kind} {st.key}: {len(st.faults)} {noun(st.faults)} in {s.window_text} "
                         f"({checks}){last}", retired=True)


def noun(faults: Iterable[Fault]) -> str:
    """What the faults were: drains, unless a hardware panic (no drain) is among them."""
    return "faults" if any(f.check == PANIC for f in faults) else "drains"
