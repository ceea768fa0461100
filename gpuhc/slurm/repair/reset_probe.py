"""Read what the GPU reset procedure needs to know about the node: the GPUs (from the same NVML
source the checks read), their device minor numbers, the processes holding ``/dev/nvidia*``
open or listed by NVML on a GPU and the systemd units they run in, which configured services are
present and running, and whether the node has NVSwitches. Read only.

NVML's compute and graphics process lists of each GPU (and of its MIG devices) are read as the
occupancy check reads them (gpuhc/sources/gpu_procs.py), within the probe's deadline: a process
NVML lists on a GPU holds that GPU's ``/dev/nvidia<minor>``, whether or not /proc shows it (one
in another PID namespace is invisible there), so the plan and the occupancy check agree on who
holds a GPU. A list NVML could not give is a problem the plan refuses on, as an unreadable /proc is.

The process scan is what ``fuser /dev/nvidia*`` does (NVIDIA/ai-cloud-validation#603 runs it
before a reset), done by reading ``/proc/<pid>/fd`` under a configurable root so a test can hand it
a tree of its own; who each holder is comes from the same reader (gpuhc/node/holders.py) as the
occupancy check's and the services check's. Names there are set by the processes themselves
(``comm``, cgroup paths under a delegated subtree), so they are read bounded and escaped
(docs/security.md).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass

from gpuhc.model.deadline import Deadline
from gpuhc.model.nvml import NvmlReading
from gpuhc.model.occupancy import Occupancy
from gpuhc.model.pci import norm_pci
from gpuhc.node.holders import cuda_context, gpu_holders, scan_fds
from gpuhc.slurm.repair.reset_plan import NO_FABRIC, GpuFacts, Holder, NodeFacts, arch_of
from gpuhc.text.logtext import escape

MAX_PIDS = 65536  # processes looked at, at most (a node has a few thousand)
MAX_FDS = 1 << 20  # descriptors looked at, all processes together
SMALL = 4096  # bytes read of a cgroup file and the driver's information file
ReadProcs = Callable[[], Occupancy | None]  # NVML's process lists of every GPU: the occupancy reader (gpu_procs.py)


@dataclass(frozen=True)
class ProbeSettings:
    services: tuple[str, ...]
    systemctl: str
    proc_root: str
    dev_root: str
    timeout_s: float
    stop_units: tuple[str, ...] = ()  # stopped around every reset, whatever they hold (the site's monitors)

    @classmethod
    def from_section(cls, reset: dict) -> "ProbeSettings":
        return cls(tuple(reset["services"]), reset["systemctl"], reset["proc_root"], reset["dev_root"],
                   float(reset["command_timeout_s"]), tuple(reset.get("stop_units") or ()))

    @property
    def units(self) -> tuple[str, ...]:
        """Every configured unit, each once: the services, then the site's own."""
        return self.services + tuple(u for u in self.stop_units if u not in self.services)


def _small(path: str) -> str | None:
    from gpuhc.files.untrusted import UntrustedInputError, read_bounded

    try:
        return read_bounded(path, SMALL, "proc file").decode("utf-8", "replace")
    except (UntrustedInputError, OSError):
        return None


def minor_of(proc_root: str, pci: str) -> int | None:
    """``Device Minor`` from the driver's per-GPU information file (``/proc/driver/nvidia/gpus``)."""
    text = _small(os.path.join(proc_root, "driver", "nvidia", "gpus", norm_pci(pci), "information"))
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Device Minor" and value.strip().isdigit():
            return int(value.strip())
    return None


def unit_of(cgroup_text: str | None) -> str | None:
    """The system service a process runs in, from ``/proc/<pid>/cgroup``, or None. Only
    ``/system.slice/<unit>.service`` counts: below a user's own slice a user may make cgroups of
    any name (delegation), and such a name must not pass their process off as a service's."""
    for line in (cgroup_text or "").splitlines():
        parts = line.split(":", 2)[-1].split("/")
        if len(parts) >= 3 and parts[0] == "" and parts[1] == "system.slice" and parts[2].endswith(".service"):
            return escape(parts[2])
    return None


def holders(proc_root: str, deadline: Deadline,
            listed: dict[int, set[str]] | None = None) -> tuple[list[Holder], list[str]]:
    """Every process with a ``/dev/nvidia*`` file open or listed by NVML (``listed``: pid -> the
    device files of the GPUs NVML lists it on), each once, and what could not be read."""
    listed = listed or {}
    scan = scan_fds(proc_root, deadline.at, MAX_PIDS, MAX_FDS)
    if scan.error is not None:
        return [], [f"{proc_root}: {scan.error}"]
    problems = []
    if scan.stopped_at is not None:
        problems.append(f"process scan stopped at pid {scan.stopped_at} (time or size bound): holders may be missing")
    if scan.denied:  # another user's processes, and we are not root
        problems.append(f"the open files of {len(scan.denied)} processes could not be read (not root?): "
                        "holders may be missing")
    found = [Holder(h.pid, h.who.name or "?", unit_of(_small(os.path.join(proc_root, str(h.pid), "cgroup"))),
                    tuple(sorted(set(h.devices) | listed.get(h.pid, set()))), cuda=cuda_context(proc_root, h.pid),
                    gone=h.seen == "nvml" and h.who.gone)
             for h in gpu_holders(proc_root, scan, listed)]
    return found, problems


def nvml_lists(read_procs: ReadProcs | None, deadline: Deadline) -> tuple[Occupancy | None, str | None]:
    """NVML's process lists of every GPU, read within ``deadline``: (the reading, None), or
    (None, why they could not be read)."""
    from gpuhc.slurm.repair.gpureset import NvmlHung, call_bounded

    if read_procs is None:
        return None, "NVML's process lists were not read"
    try:
        occ = call_bounded(read_procs, max(0.5, deadline.left()), "NVML process lists")
    except NvmlHung as e:
        return None, f"NVML's process lists did not answer ({e})"
    except Exception as e:  # an unknown part is a refusal, never a guess
        return None, f"NVML's process lists could not be read ({type(e).__name__}: {escape(str(e))[:200]})"
    if occ is None:
        return None, "NVML's process lists were not read"
    if not occ.available:
        return None, f"NVML's process lists could not be read ({escape(occ.error or 'no reason given')})"
    return occ, None


def _unlisted(occ: Occupancy | None, index: int) -> str | None:
    """Why NVML's process lists of GPU ``index`` are not all known; None: read (or not read at
    all, which is the node's problem, said once)."""
    if occ is None:
        return None
    g = next((g for g in occ.gpus if g.index == index), None)
    if g is None:
        return "NVML's process lists do not include it"
    if g.error:
        return f"NVML's process lists could not be read ({escape(g.error)})"
    if g.unlisted:
        return f"NVML does not give its {' and '.join(g.unlisted)} process list (not supported)"
    return None


def services(units: tuple[str, ...], systemctl: str, timeout_s: float) -> tuple[dict[str, bool], list[str]]:
    """Configured units present on the node -> running; absent ones are left out. One call."""
    import shutil

    from gpuhc.slurm.repair.gpureset import run_argv

    if not units:
        return {}, []
    if shutil.which(systemctl) is None:  # no systemd (a container): no unit to stop; holders still count
        return {}, []
    r = run_argv([systemctl, "show", "--property=Id,LoadState,ActiveState", "--", *units], timeout_s)
    if not r.ok:
        return {}, [f"services unknown: {r.detail}"]
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in r.output.strip().split("\n\n")]
    if len(blocks) != len(units):
        return {}, [f"services unknown: {systemctl} show answered {len(blocks)} units for {len(units)}"]
    return {u: b.get("ActiveState") in ("active", "activating", "reloading")
            for u, b in zip(units, blocks) if b.get("LoadState") not in ("not-found", None)}, []


def gpu_facts(reading: NvmlReading, proc_root: str, occ: Occupancy | None = None) -> list[GpuFacts]:
    return [GpuFacts(g.index, g.uuid, g.name, minor_of(proc_root, g.pci_bus_id), arch_of(g.name),
                     g.persistence_mode, sum(1 for link in g.nvlinks if link.active), g.fabric_state,
                     _unlisted(occ, g.index))
            for g in reading.gpus]


def probe(reading: NvmlReading, s: ProbeSettings, deadline: Deadline, state_dir: str | None = None,
          read_procs: ReadProcs | None = None) -> NodeFacts:
    """Everything the plan needs, read now. A part that cannot be read is a problem the plan
    refuses on, never a guess. ``state_dir``: where gpuhc's watchers register (nvml_yield.py);
    None: none is told apart. ``read_procs``: NVML's process lists (the occupancy reader); None:
    not read, so holders may be missing."""
    problems = [] if reading.available else [f"NVML not available ({reading.error or 'no reason given'})"]
    lost = [g.index for g in reading.gpus if g.lost]
    if lost:
        problems.append(f"gpu{','.join(map(str, lost))} lost to NVML: a reset cannot reach it")
    occ, why = nvml_lists(read_procs, deadline)
    if why is not None:
        problems.append(f"{why}: holders may be missing")
    gpus = gpu_facts(reading, s.proc_root, occ)
    device = {g.index: f"/dev/nvidia{g.minor}" for g in gpus if g.minor is not None}
    listed: dict[int, set[str]] = {}
    for g in occ.gpus if occ is not None else ():
        for proc in g.processes if g.index in device else ():
            listed.setdefault(proc.pid, set()).add(device[g.index])
    found, p = holders(s.proc_root, deadline, listed)
    problems += p
    if any(h.gone for h in found):
        # A process that exited between NVML's list and the /proc scan (an epilog's job winding
        # down) is no holder: NVML is asked once more, and only a pid it still lists refuses the
        # reset. A second read that fails keeps them all: an unknown is a refusal.
        again, _ = nvml_lists(read_procs, deadline)
        if again is not None:
            still = {proc.pid for g in again.gpus for proc in g.processes}
            found = [h for h in found if not h.gone or h.pid in still]
    if state_dir is not None:
        from dataclasses import replace

        from gpuhc.slurm.repair.nvml_yield import own

        mine = own(state_dir, s.proc_root, [h.pid for h in found])
        found = [replace(h, own=h.pid in mine) for h in found]
    active, p = services(s.units, s.systemctl, max(0.5, deadline.cap(s.timeout_s)))
    problems += p
    # NVSwitch: its device files on the node, or (in a VM whose switches the host manages, as on
    # the H100 machine of docs/verification.md) GPUs registered with an NVSwitch fabric.
    nvswitch = bool(glob.glob(os.path.join(glob.escape(s.dev_root), "nvidia-nvswitch[0-9]*"))) or any(
        g.fabric_state not in NO_FABRIC for g in reading.gpus)
    return NodeFacts(tuple(gpus), tuple(found), active, nvswitch, os.getpid(), tuple(problems))


def plan_now(remediation: dict, targets: tuple[int, ...], reading: NvmlReading, deadline: Deadline,
             mig: tuple[int, ...] = (), jobs: str | None = None, state_dir: str | None = None,
             read_procs: ReadProcs | None = None):
    """Probe the node and plan the reset of ``targets`` (``slurm.remediation`` and its ``reset``);
    ``mig``: the GPUs in MIG mode; ``jobs``: what Slurm shows running on the node, if anything;
    ``state_dir``: where gpuhc's own watchers register; ``read_procs``: NVML's process lists
    (the occupancy reader). Reads only."""
    from dataclasses import replace

    from gpuhc.slurm.repair.reset_plan import make_plan

    reset = remediation["reset"]
    s = ProbeSettings.from_section(reset)
    facts = replace(probe(reading, s, deadline, state_dir, read_procs), mig=tuple(mig), jobs=jobs)
    return make_plan(facts, targets, list(s.services), list(remediation["reset_command"]), s.systemctl,
                     reset["nvidia_smi"], s.stop_units)
