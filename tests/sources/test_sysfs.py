"""SysfsTree: InfiniBand ports, PCIe AER and the GPUs on the PCI bus, read from a small tree
built in tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhc.model.host import AerCounters
from gpuhc.sources.sysfs import SysfsTree, parse_aer, parse_hex, parse_int, parse_rate, parse_state
from tests.helpers.sysfs_tree import write_port


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


# ----------------------------------------------------------------------------- random valid texts
#
# The files as the kernel writes them (ib_core's sysfs.c, the PCI core's aer.c), from random
# parts: each must read back as the value it states.

_PORT_STATES = ("NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER")
_PHYS_STATES = ("Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery",
                "Phy Test")
_SPEEDS = ("SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR")
_AER_NAMES = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "Undefined",
              "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP", "ECRC")


@st.composite
def _state_text(draw, names):
    """(file text, value): ``4: ACTIVE\\n``, or a bare name as some drivers and copies write it."""
    i = draw(st.integers(0, len(names) - 1))
    name = names[i]
    text = f"{draw(st.integers(0, 99))}: {name}" if draw(st.booleans()) else name
    return text + draw(st.sampled_from(["\n", "", " \n"])), name


@st.composite
def _rate_text(draw):
    gbps = draw(st.one_of(st.integers(1, 3200).map(float), st.sampled_from([2.5, 5.0, 14.0625, 53.125])))
    number = f"{gbps:g}" if gbps != int(gbps) else str(int(gbps))
    width, speed = draw(st.sampled_from([1, 2, 4, 8, 12])), draw(st.sampled_from(_SPEEDS))
    tail = draw(st.sampled_from(["", f" ({width}X {speed})", " (4X)"]))
    return f"{number} Gb/sec{tail}\n", float(number)


@st.composite
def _aer_text(draw, total_line):
    counts = draw(st.lists(st.integers(0, 2**32), min_size=1, max_size=len(_AER_NAMES)))
    lines = [f"{name} {n}" for name, n in zip(_AER_NAMES, counts)]
    if total_line:
        lines.append(f"{draw(st.sampled_from(['TOTAL_ERR_COR', 'TOTAL_ERR_FATAL', 'TOTAL_ERR_NONFATAL']))} {sum(counts)}")
    return "\n".join(lines) + "\n", sum(counts)


@settings(max_examples=150, deadline=None)
@given(state=_state_text(_PORT_STATES), phys=_state_text(_PHYS_STATES), rate=_rate_text(),
       counter=st.integers(0, 2**64 - 1), spacing=st.sampled_from(["", "\n", "  \n"]),
       aer=st.booleans().flatmap(_aer_text), ids=st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFF)))
def test_random_valid_texts_read_back_as_their_values(state, phys, rate, counter, spacing, aer, ids):
    assert parse_state(state[0]) == state[1]
    assert parse_state(phys[0]) == phys[1]
    assert parse_rate(rate[0]) == rate[1]
    assert parse_int(f"{counter}{spacing}") == counter
    assert parse_aer(aer[0]) == aer[1]
    vendor, cls = ids
    assert parse_hex(f"0x{vendor:04x}\n") == vendor and parse_hex(f"0x{cls:06x}\n") == cls


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=_state_text(_PORT_STATES), phys=_state_text(_PHYS_STATES), rate=_rate_text(),
       counters=st.dictionaries(st.sampled_from(["symbol_error", "link_downed", "port_rcv_errors"]),
                                st.integers(0, 2**64 - 1)),
       aer=_aer_text(True), cls=st.sampled_from([0x030000, 0x030200, 0x030280, 0x068000, 0x040300, 0x0C0330]),
       vendor=st.sampled_from([0x10DE, 0x15B3, 0x8086]))
def test_a_tree_of_random_valid_files_reads_back(tmp_path_factory, state, phys, rate, counters, aer, cls, vendor):
    root = tmp_path_factory.mktemp("valid")
    pdir = root / "sys/class/infiniband/mlx5_0/ports/1"
    (pdir / "counters").mkdir(parents=True)
    for name, text in (("state", state[0]), ("phys_state", phys[0]), ("rate", rate[0])):
        (pdir / name).write_text(text)
    for name, value in counters.items():
        (pdir / "counters" / name).write_text(f"{value}\n")
    write_pci(root, "0000:18:00.0", vendor=f"0x{vendor:04x}", cls=f"0x{cls:06x}")
    (root / "sys/devices/pci0000:00/0000:18:00.0/aer_dev_correctable").write_text(aer[0])
    tree = SysfsTree(str(root), counters=None)
    (p,) = tree.ib_ports()
    assert (p.state, p.phys_state, p.rate_gbps, p.counters) == (state[1], phys[1], rate[1], counters)
    (a,) = tree.aer()
    assert (a.pci, a.correctable) == ("0000:18:00.0", aer[1])
    gpu = vendor == 0x10DE and cls >> 8 in (0x0300, 0x0302)
    assert tree.nvidia_gpus() == (["0000:18:00.0"] if gpu else [])
