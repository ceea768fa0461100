"""Literal snapshots for tests: a healthy 8x H100 SXM node, and small helpers to break one thing.

Kept deliberately plain (no YAML, no randomness) so a failing test reads like a story: start
from :func:`healthy_node`, change one field with :func:`with_gpu`, judge. Other test modules
import this file; keep its names and defaults stable.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuhc.checks.base import Check, Context
from gpuhc.model.nvml import GpuReading, NvLinkState, NvmlReading
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot

H100_NAME = "NVIDIA H100 80GB HBM3"
DRIVER = "550.90.07"
T0 = 1_700_000_000.0  # a fixed "now" (Nov 2023) so results never depend on the wall clock
# Bus ids of a typical HGX H100 board, GPU 0..7.
PCI_IDS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
           "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
# The per-link counters the NVML source reads on Hopper (gpuhc/sources/nvml.py LINK_FIELDS).
NVLINK_COUNTERS = ("crc", "replay", "recovery")
BUSY = 0x0  # clock-event reasons of a GPU running flat out: no reason at all
IDLE = 0x1  # GPU_IDLE


def healthy_gpu(index: int, name: str = H100_NAME, links: int = 18, **changes: Any) -> GpuReading:
    """One healthy, busy H100 SXM5: every counter zero, all links up, gen5 x16, 700 W."""
    gpu = GpuReading(
        index=index,
        name=name,
        uuid=f"GPU-00000000-0000-0000-0000-{index:012d}",
        pci_bus_id=PCI_IDS[index] if index < len(PCI_IDS) else f"0000:{0x10 + index:02x}:00.0",
        serial=f"165232000{index:04d}",
        vbios="96.00.89.00.01",
        persistence_mode=True,
        ecc_mode=True,
        ecc_volatile_uncorrected=0,
        ecc_aggregate_uncorrected=0,
        ecc_volatile_corrected=0,
        remap_correctable=0,
        remap_uncorrectable=0,
        remap_pending=False,
        remap_failure=False,
        retired_pages_sbe=None,  # NOT_SUPPORTED on Hopper
        retired_pages_dbe=None,
        retired_pages_pending=None,
        nvlinks=[NvLinkState(link=i, active=True, errors={c: 0 for c in NVLINK_COUNTERS}) for i in range(links)],
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        pcie_replay=0,
        clock_event_samples=[BUSY, BUSY, BUSY],
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        utilization_gpu=100,
        temp_gpu_c=62,
        temp_mem_c=70,
        power_w=650.0,
        power_limit_w=700.0,
        power_default_limit_w=700.0,
        fabric_state="completed",
        fabric_status="success",
    )
    for key, value in changes.items():
        if not hasattr(gpu, key):
            raise AttributeError(f"GpuReading has no field {key!r}")
        setattr(gpu, key, value)
    return gpu


def healthy_node(n: int = 8, hostname: str = "gpu001", time: float = T0, **gpu_changes: Any) -> Snapshot:
    """A healthy node with ``n`` GPUs; ``gpu_changes`` apply to every GPU (e.g. a100 names)."""
    nvml = NvmlReading(
        available=True,
        driver_version=DRIVER,
        cuda_driver_version="12.4",
        gpus=[healthy_gpu(i, **gpu_changes) for i in range(n)],
    )
    return Snapshot(hostname=hostname, time=time, nvml=nvml, kernel=None, ib_ports=None, aer=None)


def idle_node(n: int = 8, **gpu_changes: Any) -> Snapshot:
    """A healthy node with nothing running: GPU_IDLE reasons, 0 % utilisation, cool."""
    changes = dict(clock_event_samples=[IDLE, IDLE, IDLE], utilization_gpu=0, temp_gpu_c=33,
                   temp_mem_c=40, power_w=70.0, sm_clock_mhz=345)
    changes.update(gpu_changes)
    return healthy_node(n, **changes)


def with_gpu(snapshot: Snapshot, index: int, **changes: Any) -> Snapshot:
    """A copy of ``snapshot`` with fields of GPU ``index`` replaced."""
    snap = copy.deepcopy(snapshot)
    gpu = next(g for g in snap.nvml.gpus if g.index == index)
    for key, value in changes.items():
        if not hasattr(gpu, key):
            raise AttributeError(f"GpuReading has no field {key!r}")
        setattr(gpu, key, value)
    return snap


def with_link(snapshot: Snapshot, index: int, link: int, active: bool | None = True, **errors: int) -> Snapshot:
    """A copy with one NVLink of GPU ``index`` changed: its active flag and any error counters."""
    snap = copy.deepcopy(snapshot)
    gpu = next(g for g in snap.nvml.gpus if g.index == index)
    state = next(s for s in gpu.nvlinks if s.link == link)
    state.active = active
    state.errors.update(errors)
    return snap


def without_gpu(snapshot: Snapshot, index: int) -> Snapshot:
    """A copy where GPU ``index`` is gone from NVML (fallen off the bus, not enumerated)."""
    snap = copy.deepcopy(snapshot)
    snap.nvml.gpus = [g for g in snap.nvml.gpus if g.index != index]
    return snap


def later(snapshot: Snapshot, seconds: float = 300.0) -> Snapshot:
    """The same node ``seconds`` later (for growth checks: the second run)."""
    snap = copy.deepcopy(snapshot)
    snap.time += seconds
    return snap


def no_nvml(error: str = "Driver Not Loaded", hostname: str = "gpu001") -> Snapshot:
    return Snapshot(hostname=hostname, time=T0, nvml=NvmlReading(available=False, error=error))


def baseline_for(snapshot: Snapshot) -> dict[str, Any]:
    """The baseline `gpuhc baseline capture` would write for this (healthy) snapshot."""
    gpus = snapshot.nvml.gpus
    return {
        "version": 1,
        "gpu_count": len(gpus),
        "gpu_model": gpus[0].name if gpus else None,
        "driver_version": snapshot.nvml.driver_version,
        "gpus": {
            g.pci_bus_id: {
                "index": g.index,
                "name": g.name,
                "pcie_gen_max": g.pcie_gen_max,
                "pcie_width_max": g.pcie_width_max,
                "nvlink_active": sum(1 for s in g.nvlinks if s.active),
            }
            for g in gpus
        },
        "ib": {},
    }


def context(check: Check, profile: str | None = "h100-sxm", prev: dict | None = None,
            baseline: dict | None = None, gpus: list[int] | None = None, **thresholds: Any) -> Context:
    """The Context the runner would build: check defaults, then the profile, then overrides."""
    from gpuhc.config.profiles import effective_thresholds, select_profile

    prof = select_profile(None, forced=profile) if profile else None
    return Context(
        thresholds=effective_thresholds(check, prof, thresholds),
        prev=dict(prev or {}),
        baseline=baseline,
        gpus=gpus,
    )


def results_of(check: Check, snapshot: Snapshot, **kw: Any) -> list:
    """Judge ``snapshot`` with ``check`` in a test context (see :func:`context`); the results."""
    return check.judge(snapshot, context(check, **kw)).results


def problems(out) -> list:
    """The results worth a person's look: neither pass nor n/a (takes results or a CheckOutput)."""
    return [r for r in getattr(out, "results", out) if r.status not in (Status.PASS, Status.NA)]
