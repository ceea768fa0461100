"""SysfsTree: InfiniBand ports, PCIe AER and the GPUs on the PCI bus, read from a small tree
built in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhc.model import AerCounters
from gpuhc.sources.sysfs import SysfsTree, parse_aer, parse_rate, parse_state


def write_port(root: Path, hca: str, port: int, *, state="4: ACTIVE", phys="5: LinkUp",
               rate="400 Gb/sec (4X NDR)", layer="InfiniBand", counters=None, hw=None, pci=None) -> Path:
    """One port the way the kernel lays it out (values end in a newline, like sysfs)."""
    pdir = root / "sys/class/infiniband" / hca / "ports" / str(port)
    (pdir / "counters").mkdir(parents=True, exist_ok=True)
    for name, value in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
        if value is not None:
            (pdir / name).write_text(value + "\n")
    for name, value in (counters or {}).items():
        (pdir / "counters" / name).write_text(f"{value}\n")
    if hw:
        (pdir / "hw_counters").mkdir(exist_ok=True)
        for name, value in hw.items():
            (pdir / "hw_counters" / name).write_text(f"{value}\n")
    if pci:
        dev = root / "sys/devices/pci0000:00" / pci
        dev.mkdir(parents=True, exist_ok=True)
        link = root / "sys/class/infiniband" / hca / "device"
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(dev, link.parent))
    return pdir


def test_no_infiniband_is_empty(tmp_path):
    tree = SysfsTree(str(tmp_path))
    assert tree.ib_ports() == []
    assert tree.aer() == []
    assert tree.hca_pci() == {}


def test_reads_port_state_rate_and_counters(tmp_path):
    write_port(tmp_path, "mlx5_0", 1, counters={"link_downed": 2, "symbol_error": 7, "port_rcv_data": 99},
               hw={"local_ack_timeout_err": 4, "out_of_buffer": 1}, pci="0000:0C:00.0")
    (p,) = SysfsTree(str(tmp_path)).ib_ports()
    assert (p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) == (
        "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
    # only the counters the check uses: port_rcv_data and out_of_buffer are not read
    assert p.counters == {"link_downed": 2, "symbol_error": 7, "local_ack_timeout_err": 4}
    assert p.subject == "mlx5_0/1"
    assert SysfsTree(str(tmp_path)).hca_pci() == {"mlx5_0": "0000:0c:00.0"}


def test_all_counters_when_asked(tmp_path):
    write_port(tmp_path, "mlx5_0", 1, counters={"link_downed": 2, "port_rcv_data": 99}, hw={"out_of_buffer": 1})
    (p,) = SysfsTree(str(tmp_path), counters=None, hw_counters=None).ib_ports()
    assert p.counters == {"link_downed": 2, "port_rcv_data": 99, "out_of_buffer": 1}


def test_ports_in_natural_order_and_non_numeric_port_dirs_skipped(tmp_path):
    for hca in ("mlx5_10", "mlx5_2", "mlx5_bond_0"):
        write_port(tmp_path, hca, 1)
    write_port(tmp_path, "mlx5_2", 2, state="1: DOWN", phys="3: Disabled", rate="40 Gb/sec (4X QDR)", layer="Ethernet")
    (tmp_path / "sys/class/infiniband/mlx5_2/ports/junk").mkdir()
    ports = SysfsTree(str(tmp_path)).ib_ports()
    assert [p.subject for p in ports] == ["mlx5_2/1", "mlx5_2/2", "mlx5_10/1", "mlx5_bond_0/1"]
    down = ports[1]
    assert (down.state, down.phys_state, down.rate_gbps, down.link_layer) == ("DOWN", "Disabled", 40.0, "Ethernet")


def test_missing_and_garbled_files_become_none(tmp_path):
    pdir = write_port(tmp_path, "mlx5_0", 1, state=None, phys="???", rate="fast", layer="",
                      counters={"link_downed": "lots", "symbol_error": -3, "port_rcv_errors": 5})
    (pdir / "counters" / "link_error_recovery").mkdir()  # a directory where a file should be
    (p,) = SysfsTree(str(tmp_path)).ib_ports()
    assert (p.state, p.phys_state, p.rate_gbps, p.link_layer) == (None, None, None, None)
    assert p.counters == {"port_rcv_errors": 5}


def test_parsers_accept_bare_and_numbered_forms():
    assert parse_state("ACTIVE") == "ACTIVE"
    assert parse_state("4: ACTIVE\n") == "ACTIVE"
    assert parse_state("6: Phy Test") == "Phy Test"
    assert parse_state("4:") is None
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("10 Gb/sec (4X)") == 10.0
    assert parse_rate("400") is None  # no unit: refuse to guess


def test_aer_totals(tmp_path):
    dev = tmp_path / "sys/bus/pci/devices/0000:b3:00.0"
    dev.mkdir(parents=True)
    (dev / "aer_dev_correctable").write_text("RxErr 2\nBadTLP 1\nBadDLLP 0\nTOTAL_ERR_COR 3\n")
    (dev / "aer_dev_nonfatal").write_text("Undefined 0\nDLP 0\nTOTAL_ERR_NONFATAL 0\n")
    (dev / "aer_dev_fatal").write_text("garbage\n")
    other = tmp_path / "sys/bus/pci/devices/0000:00:1f.0"  # a device without AER
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x8086\n")
    assert SysfsTree(str(tmp_path)).aer() == [AerCounters(pci="0000:b3:00.0", correctable=3, nonfatal=0, fatal=None)]


def test_aer_without_total_line_sums():
    assert parse_aer("RxErr 2\nBadTLP 1\n") == 3
    assert parse_aer("") is None
    assert parse_aer(None) is None


_garbage = st.one_of(st.binary(max_size=64), st.text(max_size=64).map(lambda s: s.encode("utf-8")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=_garbage, phys=_garbage, rate=_garbage, layer=_garbage, counter=_garbage, aer=_garbage)
def test_garbage_files_never_crash(tmp_path_factory, state, phys, rate, layer, counter, aer):
    root = tmp_path_factory.mktemp("garbage")
    pdir = root / "sys/class/infiniband/mlx5_0/ports/1"
    (pdir / "counters").mkdir(parents=True)
    for name, data in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)):
        (pdir / name).write_bytes(data)
    (pdir / "counters" / "symbol_error").write_bytes(counter)
    dev = root / "sys/bus/pci/devices/0000:01:00.0"
    dev.mkdir(parents=True)
    (dev / "aer_dev_fatal").write_bytes(aer)
    tree = SysfsTree(str(root))
    (p,) = tree.ib_ports()
    for v in (p.state, p.phys_state, p.link_layer):
        assert v is None or (isinstance(v, str) and v.strip() == v and v)
    assert p.rate_gbps is None or p.rate_gbps >= 0
    assert all(isinstance(v, int) and v >= 0 for v in p.counters.values())
    (a,) = tree.aer()
    assert a.fatal is None or a.fatal >= 0


# ----------------------------------------------------------------------------- GPUs on the PCI bus


def write_pci(root: Path, addr: str, vendor: str = "0x10de", cls: str = "0x030200", driver: str | None = "nvidia"):
    """A PCI function under sys/bus/pci/devices, laid out as the kernel does: the entry is a link
    into sys/devices, ``driver`` a link to the bound driver."""
    dev = root / "sys/devices/pci0000:00" / addr
    dev.mkdir(parents=True, exist_ok=True)
    for name, value in (("vendor", vendor), ("class", cls)):
        if value is not None:
            (dev / name).write_text(value + "\n")
    if driver:
        drv = root / "sys/bus/pci/drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        (dev / "driver").symlink_to(os.path.relpath(drv, dev))
    entry = root / "sys/bus/pci/devices" / addr
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.symlink_to(os.path.relpath(dev, entry.parent))


def test_nvidia_gpus_lists_3d_and_vga_controllers_only(tmp_path):
    write_pci(tmp_path, "0000:db:00.0")                                 # H100 SXM: 3D controller
    write_pci(tmp_path, "0000:18:00.0", cls="0x030000")                 # a VGA-class NVIDIA GPU
    write_pci(tmp_path, "0000:05:00.0", cls="0x068000", driver=None)    # NVSwitch (bridge)
    write_pci(tmp_path, "0000:18:00.1", cls="0x040300", driver="snd_hda_intel")  # the GPU's HDMI audio
    write_pci(tmp_path, "0000:53:00.0", vendor="0x15b3", cls="0x020700", driver="mlx5_core")  # an HCA
    write_pci(tmp_path, "0000:02:00.0", vendor="0x1a03", cls="0x030000", driver="ast")  # the BMC's VGA
    assert SysfsTree(str(tmp_path)).nvidia_gpus() == ["0000:18:00.0", "0000:db:00.0"]


def test_a_gpu_without_driver_counts_one_passed_to_a_vm_does_not(tmp_path):
    write_pci(tmp_path, "0000:2a:00.0", driver=None)  # a failed probe: NVML cannot see it either
    write_pci(tmp_path, "0000:3a:00.0", driver="vfio-pci")  # an admin's choice: not NVML's to see
    assert SysfsTree(str(tmp_path)).nvidia_gpus() == ["0000:2a:00.0"]


def test_unreadable_ids_are_not_gpus_and_no_pci_tree_is_unknown(tmp_path):
    write_pci(tmp_path, "0000:18:00.0", vendor="garbage")
    write_pci(tmp_path, "0000:2a:00.0", cls=None)
    (tmp_path / "sys/bus/pci/devices/not-a-pci-address").mkdir()
    assert SysfsTree(str(tmp_path)).nvidia_gpus() == []
    assert SysfsTree(str(tmp_path / "nothing-here")).nvidia_gpus() is None  # a copied IB-only tree
