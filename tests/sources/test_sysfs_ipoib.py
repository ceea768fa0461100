"""The HCA's firmware version and its IPoIB interfaces, read from sysfs trees rebuilt from real
captures (tests/fixtures/sysfs_ipoib/README.md names each one's source)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuhc.sources.sysfs import SysfsTree
from tests.helpers.paths import REPO

FIX = REPO / "tests" / "fixtures" / "sysfs_ipoib"


def _put(root: Path, path: str, value: str) -> None:
    dest = root / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(value)


def gcm_tree(root: Path, **override: str) -> SysfsTree:
    """The GCM capture as a tree, the class links made as the kernel makes them; ``override``
    replaces files by their path's tail (``"ib0/flags"``)."""
    data = json.loads((FIX / "gcm_ipoib_two_hcas.json").read_text())
    for path, value in data.items():
        tail = next((t for t in override if path.endswith("/" + t)), None)
        _put(root, path, override[tail] if tail else value)
        m = re.match(r"^/sys/bus/pci/devices/([^/]+)/infiniband/([^/]+)/", path)
        if m and not (root / "sys/class/infiniband" / m.group(2)).exists():
            (root / "sys/class/infiniband").mkdir(parents=True, exist_ok=True)
            (root / "sys/class/infiniband" / m.group(2)).symlink_to(
                f"../../bus/pci/devices/{m.group(1)}/infiniband/{m.group(2)}")
    return SysfsTree(str(root))


def test_the_capture_s_firmware_and_ipoib_interfaces_per_port(tmp_path):
    ports = {p.subject: p for p in gcm_tree(tmp_path).ib_ports()}
    assert {s: (p.state, p.fw_ver, p.ipoib) for s, p in ports.items()} == {
        "mlx5_0/1": ("ACTIVE", "20.31.2354", {"ib0": "up"}),
        "mlx5_8/1": ("INIT", "20.31.2354", {"ib6": "down"}),
    }


def test_an_interface_set_down_on_purpose_is_not_listed(tmp_path):
    # IFF_UP clear (include/uapi/linux/if.h): 0x1002 is IFF_BROADCAST|IFF_MULTICAST alone
    ports = {p.subject: p for p in gcm_tree(tmp_path, **{"ib6/flags": "0x1002\n", "ib0/flags": "0x1003\n"}).ib_ports()}
    assert ports["mlx5_8/1"].ipoib == {} and ports["mlx5_0/1"].ipoib == {"ib0": "up"}


def test_an_ethernet_interface_of_the_function_is_not_ipoib(tmp_path):
    ports = {p.subject: p for p in gcm_tree(tmp_path, **{"ib0/type": "1\n"}).ib_ports()}
    assert ports["mlx5_0/1"].ipoib == {}


def test_an_untyped_interface_counts_only_on_an_infiniband_port(tmp_path):
    tree = gcm_tree(tmp_path)
    for f in tmp_path.glob("sys/bus/pci/devices/*/net/*/type"):
        f.unlink()
    (tmp_path / "sys/bus/pci/devices/0000:0c:00.0/infiniband/mlx5_0/ports/1/link_layer").write_text("Ethernet\n")
    ports = {p.subject: p for p in tree.ib_ports()}
    assert ports["mlx5_0/1"].ipoib == {} and ports["mlx5_8/1"].ipoib == {"ib6": "down"}


def test_fw_ver_as_the_h100_listing_prints_it(tmp_path):
    for line in (FIX / "gpud_fw_ver_h100.txt").read_text().splitlines():
        path, value = line.split(":", 1)
        _put(tmp_path, path, value + "\n")
        (tmp_path / Path(path).parent.relative_to("/") / "ports" / "1").mkdir(parents=True, exist_ok=True)
    fw = {p.device: p.fw_ver for p in SysfsTree(str(tmp_path)).ib_ports()}
    assert fw == {**{f"mlx5_{i}": "28.41.1000" for i in (0, 1, 4, 5, 6, 7, 8, 9)}, "mlx5_bond_0": "32.38.3056"}
    assert all(p.ipoib is None for p in SysfsTree(str(tmp_path)).ib_ports())  # no PCI device: not read


def test_a_fw_ver_that_is_not_a_version_is_unknown(tmp_path):
    ports = gcm_tree(tmp_path, **{"mlx5_0/fw_ver": "\x1b[31m20.31\nx y\n"}).ib_ports()
    assert {p.device: p.fw_ver for p in ports} == {"mlx5_0": None, "mlx5_8": "20.31.2354"}
