"""Slurm's GPU numbers -> the hardware: the one mapping every stage uses.

Slurm names a job's GPUs in the prolog and epilog by its own GRES device index
(``SLURM_JOB_GPUS``) and, where the device has one, by its unique id (``CUDA_VISIBLE_DEVICES``:
a MIG device's UUID). Neither is an NVML index. docs/facts.md ("Slurm's GPU numbers, MIG and
shared GPUs") has the rules this module follows, release by release, with their sources; in
short:

- Slurm's index is the device's position in slurmd's device list. Without ``AutoDetect=nvml``
  that list is gres.conf's ``Name=gpu`` records in file order: one device per file of a
  ``File=`` record (its brackets expanded in the order written), one per ``MultipleFiles=``
  record. With ``AutoDetect=nvml`` it is what NVML shows slurmd (one device per GPU, one per
  MIG device of a GPU in MIG mode), sorted by the device-file string in natural order and then
  stably by NVLink position, MIG devices last.
- A device is a GPU through its ``/dev/nvidia<minor>`` file, and a MIG slice through its
  ``/dev/nvidia-caps/nvidia-cap<minor>`` files, whose minors
  ``/proc/driver/nvidia-caps/mig-minors`` turns into (GPU minor, GPU instance, compute instance).
- The physical GPU is found by its minor number (NVML's ``nvmlDeviceGetMinorNumber``), never by
  position; it is kept by PCI bus id, which survives a change of NVML's numbering.

Pure: text and readings in, the mapping out. gres.conf and the MIG minors are parsed by
``gpuhc/node/gres_conf.py``; reading the files and keeping the mapping per boot is ``gpuhc/sources/gres.py``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from gpuhc.node.gres_conf import GpuMapError, GresConf
from gpuhc.model.nvml import GpuReading, NvmlReading
from gpuhc.model.pci import norm_pci

SHARED_NAMES = ("shard", "mps")  # GRES that put several jobs on one GPU (docs/checks.md, "occupancy")
_GPU_FILE = re.compile(r"nvidia(\d+)$")
_CAP_FILE = re.compile(r"nvidia-cap(\d+)$")
_OLD_MIG_ID = re.compile(r"MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)")


@dataclass(frozen=True)
class SlurmDevice:
    """One GPU device in slurmd's list: its index is its place there."""

    index: int
    files: tuple[str, ...]
    unique_id: str | None = None  # AutoDetect=nvml: a MIG device's UUID (26.05: a GPU's too)


@dataclass(frozen=True)
class Mapped:
    """One of Slurm's GPU devices on the hardware. ``gpu`` is NVML's index in the boot the
    mapping was made in; ``pci`` is what the checks hold it to."""

    index: int  # Slurm's
    files: tuple[str, ...]
    minor: int  # /dev/nvidia<minor>
    gpu: int | None = None  # NVML index; None: no GPU with that minor (gone from NVML)
    pci: str | None = None
    gpu_uuid: str | None = None
    gi: int | None = None  # a MIG slice: its GPU instance
    ci: int | None = None  # and compute instance; None with gi: the whole GPU instance
    mig_uuid: str | None = None  # the MIG device; None: a whole GPU, or a slice gone
    unique_id: str | None = None  # what Slurm puts in CUDA_VISIBLE_DEVICES for it, if not the index
    shared: bool = False  # gres.conf also lends this GPU as shard or mps

    @property
    def mig(self) -> bool:
        return self.gi is not None

    @property
    def present(self) -> bool:
        return self.gpu is not None and (not self.mig or self.mig_uuid is not None)

    def describe(self) -> str:
        """One line for ``-v`` and the logs: what Slurm's index names, down to the hardware."""
        files = ",".join(self.files)
        if self.gpu is None:
            return f"Slurm GPU {self.index} ({files}) -> no GPU with minor {self.minor} in NVML"
        hw = f"gpu{self.gpu} (minor {self.minor}, {self.pci})"
        if self.mig:
            inst = f"gi{self.gi}" + ("" if self.ci is None else f"/ci{self.ci}")
            hw += f" MIG {inst} " + (self.mig_uuid or "(not on the GPU now)")
        return f"Slurm GPU {self.index} ({files}) -> {hw}" + (" [shared: shard/mps]" if self.shared else "")

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), files=list(self.files))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Mapped":
        return cls(**dict(d, files=tuple(d["files"])))


# ---------------------------------------------------------------------------- slurmd's list


def natural_key(text: str) -> tuple:
    """Slurm's strnatcmp order: digit runs compare as numbers."""
    parts = re.split(r"(\d+)", text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def slurm_devices(conf: GresConf, nvml: NvmlReading | None, minors: Mapping[int, tuple],
                  name: str = "gpu") -> list[SlurmDevice]:
    """slurmd's device list of one GRES (``gpu``; ``mps`` for an MPS job, whose indices count the
    mps records' devices) for this node, in its order (the module doc)."""
    if conf.autodetect != "nvml" or name != "gpu":
        files: list[tuple[str, ...]] = []
        for rec in conf.records:
            if rec.name != name or not rec.files:
                continue
            files.extend([rec.files] if rec.multiple else [(f,) for f in rec.files])
        return [SlurmDevice(i, f) for i, f in enumerate(files)]
    if nvml is None or not nvml.available:
        raise GpuMapError(f"{conf.where}: AutoDetect=nvml, and NVML cannot be read to see what slurmd sees")
    system = _system_devices(nvml, minors)
    known = {",".join(files) for files, _, _ in system}
    for rec in conf.records:  # a configured GPU NVML does not show is kept (slurmd keeps it)
        if rec.name != "gpu" or not rec.files:
            continue
        for files in [rec.files] if rec.multiple else [(f,) for f in rec.files]:
            if ",".join(files) not in known:
                system.append((files, None, None))
    system.sort(key=lambda d: natural_key(",".join(d[0])))
    system.sort(key=lambda d: (d[1] is None, d[1] or 0))  # stable: links order, none last
    return [SlurmDevice(i, files, uid) for i, (files, _, uid) in enumerate(system)]


def _system_devices(nvml: NvmlReading, minors: Mapping[int, tuple]) -> list[tuple[tuple[str, ...], int | None, str | None]]:
    """What slurmd's NVML enumeration makes of the GPUs: (files, NVLink position, unique id)."""
    cap_of = {v: k for k, v in minors.items()}
    out: list[tuple[tuple[str, ...], int | None, str | None]] = []
    for gpu in nvml.gpus:
        if gpu.minor is None:
            continue  # slurmd skips a GPU whose minor it cannot read
        dev = f"/dev/nvidia{gpu.minor}"
        if gpu.mig_mode and gpu.mig:
            for inst in gpu.mig:
                gi_cap = cap_of.get((gpu.minor, inst.gi, None))
                ci_cap = cap_of.get((gpu.minor, inst.gi, inst.ci))
                if gi_cap is None or ci_cap is None:
                    continue  # slurmd skips a MIG device mig-minors does not list
                caps = (f"/dev/nvidia-caps/nvidia-cap{gi_cap}", f"/dev/nvidia-caps/nvidia-cap{ci_cap}")
                out.append(((dev, *caps), None, inst.uuid or None))
        else:
            out.append(((dev,), gpu.index, gpu.uuid or None))
    return out


# ---------------------------------------------------------------------------- to the hardware


def build(conf: GresConf, nvml: NvmlReading | None, minors: Mapping[int, tuple], name: str = "gpu") -> list[Mapped]:
    """Every Slurm device of one GRES (``gpu``, or ``mps``) of the node on the hardware."""
    shared = {m for rec in conf.records if rec.name in SHARED_NAMES for m in _minors_of(rec.files)}
    gpus = list(nvml.gpus) if nvml is not None and nvml.available else []
    out = []
    for dev in slurm_devices(conf, nvml, minors, name):
        out.append(_resolve(dev, gpus, minors, shared, conf.where))
    return out


def _minors_of(files: Iterable[str]) -> list[int]:
    return [int(m.group(1)) for f in files if (m := _GPU_FILE.search(f.rsplit("/", 1)[-1]))]


def _resolve(dev: SlurmDevice, gpus: list[GpuReading], minors: Mapping[int, tuple], shared: set[int],
             where: str) -> Mapped:
    names = ",".join(dev.files)
    parents = _minors_of(dev.files)
    if len(parents) != 1:
        raise GpuMapError(f"{where}: Slurm GPU {dev.index} ({names}) names {len(parents)} /dev/nvidia<N> files, "
                          "not one: which GPU it is cannot be told")
    minor = parents[0]
    gi = ci = None
    for f in dev.files:
        m = _CAP_FILE.search(f.rsplit("/", 1)[-1])
        if not m:
            continue
        cap = minors.get(int(m.group(1)))
        if cap is None:
            raise GpuMapError(f"{where}: Slurm GPU {dev.index}: {f} is no MIG capability in mig-minors")
        if cap[0] != minor:
            raise GpuMapError(f"{where}: Slurm GPU {dev.index}: {f} belongs to GPU minor {cap[0]}, "
                              f"not to /dev/nvidia{minor}")
        if gi is not None and cap[1] != gi:
            raise GpuMapError(f"{where}: Slurm GPU {dev.index} names two GPU instances ({gi}, {cap[1]})")
        gi = cap[1]
        ci = cap[2] if cap[2] is not None else ci
    if all(g.minor is None for g in gpus) and gpus:
        raise GpuMapError("NVML gave no GPU's minor number: Slurm's GPUs cannot be told apart")
    gpu = next((g for g in gpus if g.minor == minor), None)
    kw: dict[str, Any] = dict(index=dev.index, files=dev.files, minor=minor, gi=gi, ci=ci,
                              unique_id=dev.unique_id, shared=minor in shared)
    if gpu is None:
        return Mapped(**kw)
    kw.update(gpu=gpu.index, pci=norm_pci(gpu.pci_bus_id) if gpu.pci_bus_id else None, gpu_uuid=gpu.uuid or None)
    if gi is not None:
        inst = next((i for i in gpu.mig if i.gi == gi and (ci is None or i.ci == ci)), None)
        kw["mig_uuid"] = inst.uuid if inst is not None and inst.uuid else None
    return Mapped(**kw)


def identity(nvml: NvmlReading) -> list[Mapped]:
    """No gres.conf: Slurm has no GPU device on this node, and an index someone gives (``gpuhc
    check --gpus``, a test) is taken as NVML's, whole GPUs only."""
    return [Mapped(index=g.index, files=(), minor=g.minor if g.minor is not None else g.index, gpu=g.index,
                   pci=norm_pci(g.pci_bus_id) if g.pci_bus_id else None, gpu_uuid=g.uuid or None)
            for g in nvml.gpus]


# ---------------------------------------------------------------------------- the job's


def select(table: list[Mapped], env: Mapping[str, str], source: str) -> tuple[list[Mapped] | None, str]:
    """The job's devices from the prolog's or epilog's environment. Unique ids in
    ``CUDA_VISIBLE_DEVICES`` (MIG or GPU UUIDs: AutoDetect=nvml) name the devices whatever
    slurmd's sort did, so they come first; else ``SLURM_JOB_GPUS`` (Slurm's indices); else
    ``CUDA_VISIBLE_DEVICES`` holding the same indices. (None, why): no GPU named, every GPU is
    the stage's. Raises :class:`GpuMapError` when a name is not one of the node's devices."""
    cvd = [t.strip() for t in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if t.strip()]
    order = ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"]
    if cvd and all(t.startswith(("MIG-", "GPU-")) for t in cvd):
        order.reverse()
    for var in order:
        text = env.get(var)
        if text is None or text.strip() == "":
            continue
        picked = [pick(table, token.strip(), var, text, source) for token in text.split(",") if token.strip()]
        unique = list({m.index: m for m in picked}.values())
        other = next(v for v in order if v != var)  # both said: the log shows what Slurm put in each
        also = f" {other}={env[other]}" if (env.get(other) or "").strip() else ""
        return sorted(unique, key=lambda m: m.index), f"{var}={text}{also}"
    return None, NO_GPU_GIVEN


NO_GPU_GIVEN = "the job was given no GPU (Slurm set neither SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES)"


class NotThisNodes(GpuMapError):
    """A GPU name that is none of this node's devices. ``said`` is where it came from
    (``SLURM_JOB_GPUS=12``: a prolog's log shows what Slurm set), ``reason`` says it for a person
    who typed the name (``gpuhc check --gpus``)."""

    def __init__(self, said: str, reason: str):
        super().__init__(f"{said}: {reason}")
        self.said, self.reason = said, reason


def _indices(table: list[Mapped]) -> str:
    """0-7, or 0,2,5: the indices a person may give, as compactly as they read."""
    got = sorted({m.index for m in table})
    if not got:
        return "none"
    if got == list(range(got[0], got[-1] + 1)) and len(got) > 2:
        return f"{got[0]}-{got[-1]}"
    return ",".join(map(str, got))


def pick(table: list[Mapped], token: str, var: str, text: str, source: str) -> Mapped:
    """One name Slurm gave a device: an index, a MIG or GPU UUID, or the old
    ``MIG-GPU-<uuid>/<gi>/<ci>`` form (drivers before R470)."""
    if token.isascii() and token.isdigit():
        for m in table:
            if m.index == int(token):
                return m
        raise NotThisNodes(f"{var}={text}", f"this node has no GPU {token}: {_has(table)} ({source})")
    old = _OLD_MIG_ID.fullmatch(token)
    for m in table:
        if token in (m.unique_id, m.mig_uuid) or (not m.mig and token == m.gpu_uuid):
            return m
        if old and m.gpu_uuid == old.group(1) and (m.gi, m.ci) == (int(old.group(2)), int(old.group(3))):
            return m
    raise NotThisNodes(f"{var}={text}", f"{token!r} is none of this node's GPUs: {_has(table)} ({source})")


def _has(table: list[Mapped]) -> str:
    """What the node has, as a person counts it: "it has 8 GPUs, 0-7", "it has none"."""
    n = len({m.index for m in table})
    if n == 0:
        return "it has none"
    return f"it has {n} GPUs, numbered {_indices(table)}" if n > 1 else f"it has one GPU, numbered {_indices(table)}"


@dataclass(frozen=True)
class JobScope:
    """What the checks need of the job's devices: the physical GPUs (NVML indices: the parents'
    hardware state is judged), the MIG instances per GPU (occupancy and memory are judged on
    those alone), and the GPUs Slurm lends to several jobs (shard, MPS)."""

    gpus: list[int]
    slices: dict[int, list[tuple[int, int | None]]]
    shared: frozenset[int]
    devices: tuple[Mapped, ...]


def scope(devices: list[Mapped]) -> JobScope:
    slices: dict[int, list[tuple[int, int | None]]] = {}
    for m in devices:
        if m.gpu is not None and m.mig:
            slices.setdefault(m.gpu, []).append((m.gi, m.ci))  # type: ignore[arg-type]
    gpus = sorted({m.gpu for m in devices if m.gpu is not None})
    shared = frozenset(m.gpu for m in devices if m.shared and m.gpu is not None)
    return JobScope(gpus, slices, shared, tuple(devices))
