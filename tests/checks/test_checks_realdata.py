"""The GPU checks judged on real nodes: `nvidia-smi -q` captures from /work/shared/realdata.

Reads /work/shared/realdata/nvidia-smi (8x H100 nodes with a throttled GPU, with HW slowdown on
every GPU, and page-retirement reports, good and bad); skips when that folder is absent (it is
present in this project's CI). nvidia-smi prints the same NVML values the live source reads, so
turning its report into GpuReadings (a small test-only translation below) shows how the checks
read the world as it is, not only our own literal snapshots.
"""

from __future__ import annotations

import glob
import os
import re

import pytest
from tests.helpers.realdata import ROOT as REALDATA_ROOT
from tests.helpers.snapshots import context

from gpuhc.checks import clocks, ecc, pcie, power, thermal
from gpuhc.model.nvml import GpuReading, NvmlReading
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Status
from gpuhc.model.snapshot import Snapshot

SMI_DIR = str(REALDATA_ROOT / "nvidia-smi")
pytestmark = pytest.mark.skipif(not os.path.isdir(SMI_DIR), reason="realdata folder absent")

_REASON_BITS = {"Idle": 0x1, "Applications Clocks Setting": 0x2, "SW Power Cap": 0x4, "HW Slowdown": 0x8,
                "Sync Boost": 0x10, "SW Thermal Slowdown": 0x20, "HW Thermal Slowdown": 0x40,
                "HW Power Brake Slowdown": 0x80, "Display Clock Setting": 0x100}


def _blocks(path: str) -> list[tuple[str, dict[str, str]]]:
    """Per GPU: (bus id, {"Section/Sub/Key": value}) from a `nvidia-smi -q` text report."""
    gpus: list[tuple[str, dict[str, str]]] = []
    stack: list[tuple[int, str]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if m := re.match(r"^GPU ([0-9A-Fa-f:.]+)\s*$", line):
                gpus.append((norm_pci(m.group(1)), {}))
                stack = []
                continue
            if not gpus or not line.strip():
                continue
            indent = len(line) - len(line.lstrip(" "))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            key, sep, value = line.strip().partition(" : ")
            if not sep and line.rstrip().endswith(":"):
                key, sep, value = line.strip()[:-1], ":", ""
            prefix = "/".join(name for _, name in stack)
            if sep:
                gpus[-1][1][f"{prefix}/{key.strip()}".lstrip("/")] = value.strip()
            else:
                stack.append((indent, key.strip()))
    return gpus


def _num(text: str | None) -> float | None:
    m = re.match(r"^\s*(-?[\d.]+)", text or "")
    return float(m.group(1)) if m else None


def _reading(index: int, pci: str, d: dict[str, str]) -> GpuReading:
    def i(key: str) -> int | None:
        v = _num(d.get(key))
        return None if v is None else int(v)

    def yes(key: str) -> bool | None:
        v = d.get(key)
        return None if v in (None, "N/A") else v in ("Yes", "Enabled")

    reasons = {k.split("/")[-1]: v for k, v in d.items() if re.match(r"Clocks (Event|Throttle) Reasons/", k)}
    mask = sum(bit for name, bit in _REASON_BITS.items() if reasons.get(name) == "Active")
    return GpuReading(
        index=index, name=d.get("Product Name", "unknown"), uuid=d.get("GPU UUID", f"gpu{index}"), pci_bus_id=pci,
        persistence_mode=yes("Persistence Mode"),
        ecc_mode=yes("ECC Mode/Current"),
        ecc_volatile_uncorrected=i("ECC Errors/Volatile/DRAM Uncorrectable"),
        remap_uncorrectable=i("Remapped Rows/Uncorrectable Error"),
        remap_pending=yes("Remapped Rows/Pending"),
        remap_failure=yes("Remapped Rows/Remapping Failure Occurred"),
        retired_pages_sbe=i("Retired Pages/Single Bit ECC"),
        retired_pages_dbe=i("Retired Pages/Double Bit ECC"),
        retired_pages_pending=yes("Retired Pages/Pending Page Blacklist"),
        pcie_gen=i("PCI/GPU Link Info/PCIe Generation/Current"),
        pcie_gen_max=i("PCI/GPU Link Info/PCIe Generation/Max"),
        pcie_width=i("PCI/GPU Link Info/Link Width/Current"),
        pcie_width_max=i("PCI/GPU Link Info/Link Width/Max"),
        pcie_replay=i("PCI/Replays Since Reset"),
        clock_event_samples=[mask] if reasons else [],
        utilization_gpu=i("Utilization/Gpu"),
        temp_gpu_c=i("Temperature/GPU Current Temp"),
        temp_mem_c=i("Temperature/Memory Current Temp"),
        power_limit_w=_num(d.get("GPU Power Readings/Current Power Limit")),
        power_default_limit_w=_num(d.get("GPU Power Readings/Default Power Limit")),
    )


def _node(pattern: str) -> Snapshot:
    (path,) = glob.glob(os.path.join(SMI_DIR, pattern))
    gpus = [_reading(n, pci, d) for n, (pci, d) in enumerate(_blocks(path))]
    return Snapshot(hostname="real", time=0.0, nvml=NvmlReading(available=True, gpus=gpus))


def _judge(module, snap: Snapshot, profile: str = "h100-sxm"):
    check = module.CHECKS[0]
    return check.judge(snap, context(check, profile=profile)).results


def _bad(results):
    return [r for r in results if r.status in (Status.FAIL, Status.WARN, Status.ERROR)]


def test_throttled_node_one_gpu_with_power_brake_and_sw_thermal():
    snap = _node("01_*")
    assert len(snap.nvml.gpus) == 8 and snap.nvml.gpus[2].pci_bus_id == "0000:75:00.0"
    found = _bad(_judge(clocks, snap))
    assert {r.subject for r in found} == {"gpu2"}
    assert {r.message for r in found} == {
        "gpu2 clocks held down by HW power brake (1/1 samples)",
        "gpu2 clocks held down by SW thermal slowdown (1/1 samples)",
    }
    # The rest of this idle, healthy node passes: 8 GPUs at gen5 x16, 700 W, 35-39 C, ECC clean.
    for module in (ecc, pcie, power, thermal):
        assert not _bad(_judge(module, snap)), module.__name__


def test_hw_slowdown_on_every_gpu_fails_every_gpu():
    snap = _node("02_*")
    found = _bad(_judge(clocks, snap))
    assert len(found) == 8 and all(r.status is Status.FAIL and "HW power brake" in r.message for r in found)


def test_page_retirement_reports_good_and_bad():
    assert not _bad(_judge(ecc, _node("03_*"), profile="generic"))
    found = _bad(_judge(ecc, _node("04_*"), profile="generic"))
    by_gpu: dict[str, set[str]] = {}
    for r in found:
        by_gpu.setdefault(r.subject, set()).add(r.action.value)
    # gpu0: 65 retired; gpu1: 63 + pending; gpu3: 6 + pending; gpu5: 65 + pending; gpu7: 64 + pending.
    assert by_gpu == {
        "gpu0": {"drain + hardware ticket"},
        "gpu1": {"drain + hardware ticket", "reset GPU"},
        "gpu3": {"reset GPU"},
        "gpu5": {"drain + hardware ticket", "reset GPU"},
        "gpu7": {"drain + hardware ticket", "reset GPU"},
    }
