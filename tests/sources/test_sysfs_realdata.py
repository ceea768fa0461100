"""SysfsTree over real-world sysfs captures from /work/shared/realdata/sysfs-ib.

Reads the workplace's reference data (not part of the repository): skips when the folder is
absent, i.e. outside the workplace. The captures are rebuilt as a tmp tree, then read back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.helpers.realdata import ROOT as REALDATA_ROOT

from gpuhc.sources.sysfs import SysfsTree

REAL = REALDATA_ROOT / "sysfs-ib"
pytestmark = pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} absent (outside the workplace)")


def _put(root: Path, path: str, value: str) -> None:
    dest = root / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(value)


def test_grep_listing_h100_nine_hcas(tmp_path):
    """03: `grep -r . /sys/class/infiniband` on an H100 node: 9 NDR IB ports + one RoCE bond."""
    for line in (REAL / "03_sys_class_infiniband_h100_9dev_grep_listing_gpud.txt").read_text().splitlines():
        m = re.match(r"^(/sys/[^:]+):(.*)$", line)
        if m:
            _put(tmp_path, m.group(1), m.group(2) + "\n")
    ports = SysfsTree(str(tmp_path)).ib_ports()
    assert len(ports) == 9
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8
    assert all((p.state, p.phys_state, p.rate_gbps) == ("ACTIVE", "LinkUp", 400.0) for p in ib)
    bond = ports[-1]  # natural order puts mlx5_bond_0 after mlx5_9
    assert (bond.subject, bond.link_layer, bond.rate_gbps) == ("mlx5_bond_0/1", "Ethernet", 200.0)
    by = {p.subject: p for p in ports}
    # link_downed is an 8-bit saturating counter: 255 on mlx5_1 is its ceiling
    assert by["mlx5_1/1"].counters["link_downed"] == 255
    assert by["mlx5_0/1"].counters["port_rcv_errors"] == 14
    assert by["mlx5_0/1"].counters["excessive_buffer_overrun_errors"] == 15


def test_json_snapshot_two_ports_init(tmp_path):
    """04: files under /sys/bus/pci/devices/<pci>/infiniband/<hca>; the class links are rebuilt as
    the kernel makes them, so the PCI id of each HCA comes from the directory layout."""
    data = json.loads((REAL / "04_sysfs_snapshot_json_2_ports_INIT_gcm.json").read_text())
    hcas: dict[str, str] = {}
    for path, value in data.items():
        _put(tmp_path, path, value)
        m = re.match(r"^/sys/bus/pci/devices/([^/]+)/infiniband/([^/]+)/", path)
        if m:
            hcas[m.group(2)] = m.group(1)
    cls = tmp_path / "sys/class/infiniband"
    cls.mkdir(parents=True)
    for hca, pci in hcas.items():
        (cls / hca).symlink_to(f"../../bus/pci/devices/{pci}/infiniband/{hca}")
    tree = SysfsTree(str(tmp_path))
    ports = tree.ib_ports()
    assert len(ports) == len(hcas) >= 8
    init = sorted(p.subject for p in ports if p.state == "INIT")
    assert init == ["mlx5_6/1", "mlx5_8/1"]
    assert all(p.phys_state == "LinkUp" and p.rate_gbps == 200.0 for p in ports)
    pci = tree.hca_pci()
    assert pci["mlx5_8"] == "0000:ba:00.0" and pci["mlx5_3"] == "0000:54:00.0"
