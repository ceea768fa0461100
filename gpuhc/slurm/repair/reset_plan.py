"""The GPU reset procedure's plan: what to stop, which GPUs to reset together, in what order.
Pure: it takes what :mod:`gpuhc.slurm.repair.reset_probe` read and returns the steps, so
``gpuhc quarantine reset --plan`` and the ladder's reset show and run the same thing.

Why each part is there (docs/facts.md "GPU reset", docs/repair.md "The GPU reset procedure"):

- the driver refuses a reset while any client holds the GPU: a persistence-mode attachment,
  Fabric Manager, DCGM's host engine, an exporter, another nvidia-smi (NVIDIA/NVSentinel#1690,
  NVIDIA/gpu-operator#118). So persistence goes off for the GPUs reset, and the services whose
  processes hold them are stopped, newest dependant first; both come back in reverse order.
- which GPUs may be reset alone is NVIDIA's rule, from nvidia-smi(1) on ``-r``: from Ampere on,
  a GPU with NVLinks may be reset by itself, but on an Ampere NVSwitch baseboard only while
  Fabric Manager runs (Hopper and later dropped that need); before Ampere, or on Ampere NVSwitch
  without Fabric Manager, every GPU linked to it must be in the same reset command. Where the
  baseboard resets as one, everything NVIDIA's break-fix sequence stops is stopped
  (NVIDIA/ai-cloud-validation#603).
- a process that holds a GPU of the reset and belongs to no service gpuhc may stop is a
  blocker: gpuhc never kills a process it does not know, so the reset is not attempted. A
  holder is a process with the GPU's device file open or one NVML lists on the GPU; one NVML
  lists but /proc does not show (another PID namespace, or it exited between the reads) can be
  neither stopped nor named: it blocks, and so does a GPU whose NVML process lists could not be
  read (``GpuFacts.unlisted``), as an unreadable part of /proc does. The
  plan names what it is where it can tell (:func:`monitor_of`): an NVML monitor (nvtop, an
  ``nvidia-smi`` loop, an exporter) is a site's to stop or to list in ``reset.stop_units``.
- gpuhc's own node watcher (``gpuhc watch``) holds NVML for its life; it is asked to let go
  (:mod:`gpuhc.slurm.repair.nvml_yield`, the ``yield`` step) and never blocks the plan.
- slurmd is such a process on most sites today: with ``AutoDetect=nvml`` in gres.conf, every
  release since 23.02 holds ``/dev/nvidiactl`` and every ``/dev/nvidia<N>`` for slurmd's whole
  life (the release fact and its source: gpuhc/slurm/read/releases.py,
  ``SLURMD_HOLDS_GPUS_SINCE``). gpuhc runs as slurmd's child and does not stop it: on such a node the plan
  says "reboot first" (:data:`SLURMD_WHY`), and the ladder takes its reboot rung at once. The
  decision and its numbers are in docs/repair.md, "Where slurmd holds the GPUs".
- a GPU in MIG mode is not reset: a reset drops its GPU and compute instances, which the site
  (or its MIG manager) created and Slurm's gres.conf names; nothing here would put them back
  as they were, so the plan refuses and the reboot rung (whose boot sequence recreates them)
  comes first.
- Slurm showing a job on the node blocks the plan: a reset kills whatever runs there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpuhc.slurm.read import releases

FABRIC_MANAGER = "nvidia-fabricmanager"
PERSISTENCED = "nvidia-persistenced"
NO_FABRIC = (None, "not supported")  # NVML's fabric state of a GPU that has none

# Architecture by model name, for the scope rule; NVML's own architecture id is preferred where
# the probe read it. Order matters: the first match wins ("GH200" before "H200").
_ARCH_BY_NAME = (("GB300", "blackwell"), ("GB200", "blackwell"), ("B300", "blackwell"), ("B200", "blackwell"),
                 ("B100", "blackwell"), ("GH200", "hopper"), ("H200", "hopper"), ("H100", "hopper"),
                 ("H800", "hopper"), ("H20", "hopper"), ("A100", "ampere"), ("A800", "ampere"), ("A30", "ampere"),
                 ("A40", "ampere"), ("A10", "ampere"), ("V100", "volta"), ("P100", "pascal"))
_ORDER = ("pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")


SLURMD_WHY = (f"with AutoDetect=nvml, slurmd of Slurm {releases.SLURMD_HOLDS_GPUS_SINCE} and later keeps NVML, and "
              "these device files, open for its whole life; gpuhc does not stop the daemon it runs under: reboot first (docs/repair.md)")


def slurm_note(version: str | None) -> str:
    """What the installed Slurm release means for the reset (docs/repair.md, "Where slurmd holds
    the GPUs"): from ``SLURMD_HOLDS_GPUS_SINCE`` on, slurmd with AutoDetect=nvml holds the GPUs;
    earlier releases let go."""
    import re

    m = re.search(r"(\d+)\.(\d+)", version or "")
    if m is None:
        return (f"slurm {version or 'unknown'}: with AutoDetect=nvml, {releases.SLURMD_HOLDS_GPUS_SINCE} and later keep the "
                "GPUs open in slurmd")
    held = releases.at_least(m.group(0), releases.SLURMD_HOLDS_GPUS_SINCE)
    return (f"slurm {m.group(0)}: " + ("with AutoDetect=nvml slurmd holds the GPUs for its life: reboot first there"
                                       if held else "slurmd closes NVML after detecting the GPUs: reset"))


def arch_of(name: str) -> str | None:
    upper = name.upper()
    return next((arch for key, arch in _ARCH_BY_NAME if key in upper), None)


def at_least(arch: str | None, floor: str) -> bool:
    return arch in _ORDER and _ORDER.index(arch) >= _ORDER.index(floor)


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str
    name: str
    minor: int | None  # /dev/nvidia<minor>; None: unknown
    arch: str | None
    persistence: bool | None
    nvlinks_up: int = 0
    fabric_state: str | None = None  # NVML's GPU fabric state; None: the GPU has no fabric
    unlisted: str | None = None  # why NVML's process lists of this GPU could not be read; None: read


@dataclass(frozen=True)
class Holder:
    pid: int
    comm: str  # escaped: a process names itself
    unit: str | None  # the systemd unit its cgroup names, or None
    devices: tuple[str, ...]  # the /dev/nvidia* files it holds open
    own: bool = False  # gpuhc's registered node watcher: it lets go when asked (nvml_yield.py)
    cuda: bool | None = None  # holds a CUDA context (gpuhc/node/holders.py); None: unknown
    gone: bool = False  # NVML lists it on a GPU (``devices``) but /proc does not show it


@dataclass(frozen=True)
class NodeFacts:
    gpus: tuple[GpuFacts, ...]
    holders: tuple[Holder, ...] = ()
    services: dict[str, bool] = field(default_factory=dict)  # configured unit -> active; absent units left out
    nvswitch: bool = False  # NVSwitch device files on the node
    self_pid: int = 0
    problems: tuple[str, ...] = ()  # what could not be read (each makes the plan refuse)
    mig: tuple[int, ...] = ()  # GPUs in MIG mode
    jobs: str | None = None  # Slurm shows a job on the node (what it shows), read right before


@dataclass(frozen=True)
class Step:
    kind: str  # yield, persistence-off, stop, check-holders, reset, start, persistence-on, wait-fabric, verify
    target: str  # GPU indices, a unit, or ""
    argv: tuple[str, ...] = ()
    undo: tuple[str, ...] = ()  # the argv that puts it back, for quiesce steps

    def show(self) -> str:
        what = " ".join(self.argv) if self.argv else self.target
        return f"{self.kind:15} {what}"


@dataclass(frozen=True)
class Plan:
    targets: tuple[int, ...]  # the GPUs the finding named
    scope: tuple[int, ...]  # the GPUs reset
    together: bool  # one reset command for the whole scope
    scope_why: str
    steps: tuple[Step, ...]
    blockers: tuple[str, ...]  # why the reset must not be attempted; empty: go
    expected_uuids: dict[int, str]
    devices: dict[int, str] = field(default_factory=dict)  # GPU index -> /dev/nvidia<minor>
    kept: tuple[str, ...] = ()  # units that stay and may hold the GPUs (Fabric Manager on Ampere)
    holders: tuple[str, ...] = ()  # every process found holding /dev/nvidia*, for the person reading
    services: dict[str, bool] = field(default_factory=dict)  # configured units present -> running

    @property
    def ok(self) -> bool:
        return not self.blockers

    @property
    def path(self) -> str:
        """What the ladder does on this node: ``reset``, or ``reboot first`` and why."""
        if self.ok:
            return "reset"
        return "reboot first: " + self.blockers[0]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = [{"kind": s.kind, "target": s.target, "argv": list(s.argv), "undo": list(s.undo)}
                      for s in self.steps]
        d["ok"] = self.ok
        d["path"] = self.path
        return d

    def lines(self) -> list[str]:
        gpus = ",".join(map(str, self.scope))
        # (No GPU in scope, as without NVML: say so, not a bare "gpu".)
        out = [f"reset scope: {'gpu' + gpus if gpus else 'no GPU'} ({self.scope_why})"]
        out += [f"service {u}: {'running' if on else 'stopped'}" for u, on in self.services.items()]
        out += [f"holder {h}" for h in self.holders]
        out += [f"  {i + 1:2}. {s.show()}" for i, s in enumerate(self.steps)]
        out += [f"BLOCKED: {b}" for b in self.blockers]
        out.append(f"path: {self.path}")
        return out


def _minor_device(minor: int | None) -> str | None:
    return f"/dev/nvidia{minor}" if minor is not None else None


def scope_of(facts: NodeFacts, targets: tuple[int, ...]) -> tuple[tuple[int, ...], bool, str]:
    """NVIDIA's rule (nvidia-smi(1), ``-r``, its tables for NVSwitch and direct-NVLink systems,
    and its sentence that Hopper and later NVSwitch systems no longer need Fabric Manager for
    it): the GPUs to reset and whether in one command. docs/facts.md "GPU reset"."""
    by_index = {g.index: g for g in facts.gpus}
    linked = [g for g in facts.gpus if g.nvlinks_up > 0]
    wanted = [by_index[i] for i in targets if i in by_index]
    if not any(g.nvlinks_up for g in wanted):
        return targets, False, "no active NVLink: each GPU alone"
    fm = facts.services.get(FABRIC_MANAGER, False)
    archs = {g.arch for g in wanted}
    if all(at_least(a, "hopper") for a in archs):
        return targets, False, "Hopper or later: each GPU alone, with or without Fabric Manager"
    if all(at_least(a, "ampere") for a in archs) and (fm or not facts.nvswitch):
        why = "Ampere with Fabric Manager running" if facts.nvswitch else "Ampere without NVSwitch"
        return targets, False, why + ": each GPU alone"
    every = tuple(sorted(g.index for g in linked))
    if None in archs or not all(at_least(a, "ampere") for a in archs):
        why = "architecture unknown" if None in archs else "before Ampere"
    else:
        why = "Ampere NVSwitch baseboard without Fabric Manager"
    return tuple(sorted(set(every) | set(targets))), True, f"{why}: every NVLink-connected GPU in one reset"


# NVML monitors a site commonly runs, by the name the process gives itself (its comm, at most
# 15 characters): what the plan calls them when they hold a GPU of the reset.
MONITORS = {"nvtop": "nvtop, an interactive GPU monitor", "nvidia-smi": "nvidia-smi (a loop such as `nvidia-smi -l`, "
            "or a query in progress)", "dcgm-exporter": "DCGM's Prometheus exporter", "nv-hostengine":
            "DCGM's host engine", "nvitop": "nvitop, an interactive GPU monitor", "gpustat": "gpustat, a GPU monitor"}


def monitor_of(h: Holder) -> str | None:
    """What a holder is, when the plan can tell: a known monitor by name; any other process that
    has the GPUs open without a CUDA context mapped is an NVML client (the files it holds cannot
    tell: a pynvml loop opens ``/dev/nvidia-uvm`` too, seen on an H100; docs/repair.md "What blocks
    a reset"); None: a CUDA program or unknown."""
    if h.comm in MONITORS:
        return MONITORS[h.comm]
    if h.cuda is False:
        return "an NVML client without CUDA (a monitor or exporter)"
    return None


def make_plan(facts: NodeFacts, targets: tuple[int, ...], services: list[str], reset_command: list[str],
              systemctl: str, nvidia_smi: str, stop_units: tuple[str, ...] = ()) -> Plan:
    """``services``: units that may hold the GPUs (stopped when they do); ``stop_units``: units
    the site has stopped around every reset whatever they hold (its monitors), stopped first and
    started last."""
    blockers = list(facts.problems)
    if facts.jobs:
        blockers.append(facts.jobs + ": a reset kills whatever runs there")
    known = {g.index for g in facts.gpus}
    missing = [i for i in targets if i not in known]
    if missing:
        blockers.append(f"gpu{','.join(map(str, missing))} not listed by NVML")
    scope, together, why = scope_of(facts, targets)
    in_scope = [g for g in facts.gpus if g.index in scope]
    if mig := sorted(set(facts.mig) & set(scope)):
        blockers.append(f"gpu{','.join(map(str, mig))} in MIG mode: a reset drops the site's GPU and compute "
                        "instances, which gpuhc does not recreate: reboot first")
    devices = {d for g in in_scope if (d := _minor_device(g.minor))}
    if any(g.minor is None for g in in_scope):
        blockers.append("device minor number unknown: cannot tell what holds the GPUs")
    blockers += [f"gpu{g.index}: {g.unlisted}: holders may be missing" for g in in_scope if g.unlisted]
    extra = [u for u in stop_units if u not in services]
    active = [u for u in [*services, *extra] if facts.services.get(u)]  # names checked by the config schema
    holding = {h.unit for h in facts.holders if h.unit and devices & set(h.devices)}
    keep_fm = not together and facts.nvswitch and not all(at_least(g.arch, "hopper") for g in in_scope)
    # A whole-baseboard reset stops everything NVIDIA's break-fix guide stops; a per-GPU one only
    # what holds those GPUs (persistenced lets go of a GPU whose persistence is off).
    stop = [u for u in active if u in stop_units or ((together or (_unit_key(u) in holding and u != PERSISTENCED))
                                                      and not (keep_fm and u == FABRIC_MANAGER))]
    stopped = {_unit_key(u) for u in stop}
    # On Ampere NVSwitch, Fabric Manager takes part in a single GPU's reset (nvidia-smi(1)).
    kept = (_unit_key(FABRIC_MANAGER),) if keep_fm else ()
    yielding = []
    for h in facts.holders:
        if not devices & set(h.devices):
            continue
        if h.gone:
            on = ",".join(str(g.index) for g in in_scope if _minor_device(g.minor) in h.devices)
            blockers.append(f"held by pid {h.pid}, which NVML lists on gpu{on} but /proc does not show "
                            "(another PID namespace?)")
        elif h.own and h.pid != facts.self_pid:
            yielding.append(h.pid)
        elif h.pid == facts.self_pid:
            blockers.append(f"gpuhc itself (pid {h.pid}) holds {', '.join(h.devices)}")
        elif h.comm == "slurmd" or h.unit == "slurmd.service":
            blockers.insert(0, f"slurmd (pid {h.pid}) holds {', '.join(h.devices)}: {SLURMD_WHY}")
        elif h.unit not in stopped and h.unit not in kept and not (h.unit == _unit_key(PERSISTENCED) and not together):
            owner = f"unit {h.unit}" if h.unit else "no service gpuhc may stop"
            what = f": {m}; stop it, or list its unit in slurm.remediation.reset.stop_units" if (
                m := monitor_of(h)) else ""
            blockers.append(f"pid {h.pid} ({h.comm}, {owner}) holds {', '.join(h.devices)}{what}")
    pm = [g.index for g in in_scope if g.persistence]
    steps: list[Step] = []
    if yielding:  # gpuhc's own watcher: asked to let go of NVML, then the reset (nvml_yield.py)
        steps.append(Step("yield", ",".join(map(str, sorted(yielding)))))
    steps += [Step("persistence-off", str(i), (nvidia_smi, "-i", str(i), "-pm", "0"),
                   (nvidia_smi, "-i", str(i), "-pm", "1")) for i in pm]
    steps += [Step("stop", u, (systemctl, "stop", u), (systemctl, "start", u)) for u in reversed(stop)]
    steps.append(Step("check-holders", ",".join(map(str, scope))))
    groups = [",".join(map(str, scope))] if together else [str(i) for i in scope]
    steps += [Step("reset", g, tuple(p.replace("{gpu}", g) for p in reset_command)) for g in groups]
    steps += [Step("start", u, (systemctl, "start", u)) for u in stop]
    steps += [Step("persistence-on", str(i), (nvidia_smi, "-i", str(i), "-pm", "1")) for i in pm]
    if facts.services.get(FABRIC_MANAGER) or any(g.fabric_state not in NO_FABRIC for g in facts.gpus):
        steps.append(Step("wait-fabric", "all"))
    steps.append(Step("verify", "uuids"))
    return Plan(targets, scope, together, why, tuple(steps), tuple(blockers),
                {g.index: g.uuid for g in facts.gpus},
                {g.index: d for g in facts.gpus if (d := _minor_device(g.minor))}, kept,
                tuple(f"pid {h.pid} ({h.comm}, {h.unit or 'no unit'}{_kind(h)}): {', '.join(h.devices)}"
                      for h in facts.holders),
                dict(facts.services))


def _kind(h: Holder) -> str:
    if h.gone:
        return "; listed by NVML, not shown by /proc"
    if h.own:
        return "; gpuhc watch: lets go of NVML when asked"
    m = monitor_of(h)
    return f"; {m}" if m else ""


def _unit_key(unit: str) -> str:
    """A configured name as the cgroup path shows it (``nvidia-dcgm`` -> ``nvidia-dcgm.service``)."""
    return unit if "." in unit else unit + ".service"
