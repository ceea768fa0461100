"""Read InfiniBand ports, PCIe AER counters and the NVIDIA GPUs on the PCI bus from sysfs
(live, or a copied tree).

``SysfsTree(root)`` treats ``root`` as "/": the live node is ``SysfsTree("/")``, a test or an
offline re-judge points it at a directory holding ``sys/class/infiniband/...``. Both give the
same :class:`~gpuhc.model.host.IbPort` / :class:`~gpuhc.model.host.AerCounters`.

Why so defensive: sysfs files can vanish between ``listdir`` and ``open`` (an HCA resetting),
return EIO (a device that fell off the bus), or — in a copied tree — hold anything. The health
check must still report on the other nine HCAs, so a bad file costs only its own field (``None``,
or the counter left out), never an exception.

Why so frugal: this runs every few minutes on every node; an mlx5 port has ~60 counter files,
and the checks use a handful. We read the state files and the counters named in
``counters``/``hw_counters`` (``None`` reads them all, for ``gpuhc snapshot`` dumps).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable

from gpuhc.model.host import AerCounters, IbPort
from gpuhc.model.pci import norm_pci

# Counters the infiniband check judges or reports. Names are the kernel's file names.
IB_COUNTERS: tuple[str, ...] = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
# mlx5 driver counters (ports/N/hw_counters): transport retries that show a lossy path.
IB_HW_COUNTERS: tuple[str, ...] = ("local_ack_timeout_err", "rnr_nak_retry_err")

_MAX_READ = 4096  # sysfs attributes are one page at most; a copied tree could hold a huge file
_STATE_RE = re.compile(r"^\s*(?:\d+\s*:\s*)?([A-Za-z][A-Za-z_ ]*?)\s*$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec\b")
_INT_RE = re.compile(r"^\s*(\d+)\s*$")
NVIDIA_VENDOR = 0x10DE
# PCI base class 0x03 (display), subclasses 0x00 (VGA) and 0x02 (3D controller): every NVIDIA
# GPU. Not NVSwitches (0x0680, bridge/other), the GPU's HDMI audio (0x0403) or USB-C function.
GPU_CLASSES = (0x0300, 0x0302)
# Drivers an admin binds on purpose to keep a GPU from the host driver (passthrough to a VM):
# NVML cannot see such a GPU and is not meant to, so it is not one that "fell off".
PASSTHROUGH_DRIVERS = ("vfio-pci", "pci-stub")
_HEX_RE = re.compile(r"^\s*(?:0x)?([0-9a-fA-F]{1,8})\s*$")
_HAS_PCI_FIELD = "pci" in {f.name for f in dataclasses.fields(IbPort)}


def _read(path: str) -> str | None:
    """A small file's text, or None when it is missing or unreadable.

    Non-ASCII bytes become U+FFFD, which no parser below accepts: the file exists (the device
    is listed) but its value is unknown.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_READ)
    except (OSError, ValueError):
        return None
    return data.decode("ascii", "replace")


def parse_state(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` -> ``LinkUp``; garbage -> None."""
    if text is None:
        return None
    m = _STATE_RE.match(text.strip())
    return m.group(1) if m else None


def parse_rate(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0; ``2.5 Gb/sec (1X SDR)`` -> 2.5; garbage -> None."""
    if text is None:
        return None
    m = _RATE_RE.match(text)
    return float(m.group(1)) if m else None


def parse_int(text: str | None) -> int | None:
    if text is None:
        return None
    m = _INT_RE.match(text)
    return int(m.group(1)) if m else None


def parse_aer(text: str | None) -> int | None:
    """Total of an ``aer_dev_*`` file: its ``TOTAL_ERR_*`` line.

    Older kernels print no TOTAL line; then the sum of the per-error lines is the same number.
    A file with no parseable line at all is unknown (None), not zero.
    """
    if text is None:
        return None
    total, summed, seen = None, 0, False
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or not parts[1].isascii():
            continue
        if parts[0].startswith("TOTAL_ERR"):
            total = int(parts[1])
        else:
            summed += int(parts[1])
            seen = True
    if total is not None:
        return total
    return summed if seen else None


def parse_hex(text: str | None) -> int | None:
    """A sysfs id file (``vendor``, ``class``): ``0x10de`` -> 0x10de; garbage -> None."""
    if text is None:
        return None
    m = _HEX_RE.match(text)
    return int(m.group(1), 16) if m else None


def _natural_key(name: str) -> tuple:
    """mlx5_2 before mlx5_10, as an admin reads them."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path), key=_natural_key)
    except (OSError, ValueError):
        return []


class SysfsTree:
    """The sysfs view of one node (``root`` stands for "/")."""

    def __init__(
        self,
        root: str = "/",
        counters: Iterable[str] | None = IB_COUNTERS,
        hw_counters: Iterable[str] | None = IB_HW_COUNTERS,
    ) -> None:
        self.root = root
        self.ib_dir = os.path.join(root, "sys", "class", "infiniband")
        self.pci_dir = os.path.join(root, "sys", "bus", "pci", "devices")
        self.counters = None if counters is None else tuple(counters)
        self.hw_counters = None if hw_counters is None else tuple(hw_counters)

    # ------------------------------------------------------------------ InfiniBand

    def hcas(self) -> list[str]:
        """HCA names (``mlx5_0``, ``mlx5_bond_0``...); empty on a node without IB."""
        return _listdir(self.ib_dir)

    def hca_pci(self) -> dict[str, str]:
        """HCA name -> normalised PCI id, for matching kernel-log lines that name only the PCI
        device (``mlx5_core 0000:53:00.0: ...``) to a port."""
        out: dict[str, str] = {}
        for hca in self.hcas():
            pci = self._pci_of(hca)
            if pci:
                out[hca] = pci
        return out

    def _pci_of(self, hca: str) -> str | None:
        # Live: <hca>/device -> ../../../0000:53:00.0. The link target may be absolute in a copied
        # tree (pointing outside root), so only its last component is trusted. Fallback: the HCA
        # directory itself lives under .../<pci>/infiniband/<hca>.
        hdir = os.path.join(self.ib_dir, hca)
        try:
            target = os.readlink(os.path.join(hdir, "device"))
            return _pci_or_none(os.path.basename(target.rstrip("/")))
        except (OSError, ValueError):
            pass
        parts = os.path.realpath(hdir).split(os.sep)
        if len(parts) >= 3 and parts[-2] == "infiniband":
            return _pci_or_none(parts[-3])
        return None

    def ib_ports(self) -> list[IbPort]:
        from gpuhc.sources import sysfs_ipoib  # the HCA's firmware and IPoIB interfaces

        ports: list[IbPort] = []
        for hca in self.hcas():
            pci = self._pci_of(hca) if _HAS_PCI_FIELD else None
            fw = sysfs_ipoib.fw_ver(self.ib_dir, hca)
            nets = sysfs_ipoib.ipoib(self.pci_dir, pci) if pci else None
            pdir = os.path.join(self.ib_dir, hca, "ports")
            for name in _listdir(pdir):
                if not name.isdigit():
                    continue
                port = self._read_port(hca, int(name), os.path.join(pdir, name))
                if _HAS_PCI_FIELD:
                    setattr(port, "pci", pci)
                port.fw_ver = fw
                if nets is not None:
                    ib = port.link_layer == "InfiniBand"
                    port.ipoib = {n: oper for n, (oper, typed) in nets.get(port.port, {}).items() if typed or ib}
                ports.append(port)
        return ports

    def _read_port(self, hca: str, num: int, pdir: str) -> IbPort:
        counters = self._read_counters(os.path.join(pdir, "counters"), self.counters)
        # hw_counters come second: on a name clash the standard PMA counter wins.
        for k, v in self._read_counters(os.path.join(pdir, "hw_counters"), self.hw_counters).items():
            counters.setdefault(k, v)
        return IbPort(
            device=hca,
            port=num,
            state=parse_state(_read(os.path.join(pdir, "state"))),
            phys_state=parse_state(_read(os.path.join(pdir, "phys_state"))),
            rate_gbps=parse_rate(_read(os.path.join(pdir, "rate"))),
            link_layer=parse_state(_read(os.path.join(pdir, "link_layer"))),
            counters=counters,
        )

    @staticmethod
    def _read_counters(cdir: str, names: tuple[str, ...] | None) -> dict[str, int]:
        if names is None:
            names = tuple(n for n in _listdir(cdir) if not n.startswith("."))
        out: dict[str, int] = {}
        for name in names:
            if os.sep in name or name in ("", ".", ".."):
                continue
            value = parse_int(_read(os.path.join(cdir, name)))
            if value is not None:  # an unreadable counter is unknown: left out, not zero
                out[name] = value
        return out

    # ------------------------------------------------------------------ PCIe AER

    def aer(self) -> list[AerCounters]:
        out: list[AerCounters] = []
        for dev in _listdir(self.pci_dir):
            ddir = os.path.join(self.pci_dir, dev)
            texts = [_read(os.path.join(ddir, f"aer_dev_{kind}")) for kind in ("correctable", "nonfatal", "fatal")]
            if all(t is None for t in texts):
                continue  # no AER capability (or not readable): not a device to report on
            cor, nonfatal, fatal = (parse_aer(t) for t in texts)
            out.append(AerCounters(pci=norm_pci(dev), correctable=cor, nonfatal=nonfatal, fatal=fatal))
        return out


    # ------------------------------------------------------------------ GPUs on the bus

    def nvidia_gpus(self) -> list[str] | None:
        """PCI addresses (normalised, bus order) of the NVIDIA GPUs the PCI bus lists.

        A GPU that fell off the bus (Xid 79, a failed link retrain) often drops out of NVML's
        list while the bus still enumerates it; comparing the two names it. None when the tree
        has no ``sys/bus/pci/devices`` (a copied tree holding only InfiniBand): unknown, not
        "no GPUs". The vendor file is read first so the ~200 other devices cost one read each.
        """
        if not os.path.isdir(self.pci_dir):
            return None
        out: list[str] = []
        for dev in _listdir(self.pci_dir):
            ddir = os.path.join(self.pci_dir, dev)
            if parse_hex(_read(os.path.join(ddir, "vendor"))) != NVIDIA_VENDOR:
                continue
            cls = parse_hex(_read(os.path.join(ddir, "class")))
            if cls is None or (cls >> 8) not in GPU_CLASSES:
                continue
            pci = _pci_or_none(dev)
            if pci is None or self._driver_of(ddir) in PASSTHROUGH_DRIVERS:
                continue
            out.append(pci)
        return sorted(out)

    @staticmethod
    def _driver_of(ddir: str) -> str | None:
        try:
            return os.path.basename(os.readlink(os.path.join(ddir, "driver")).rstrip("/"))
        except (OSError, ValueError):
            return None  # no driver bound (a failed probe): NVML cannot see it either


def _pci_or_none(name: str) -> str | None:
    pci = norm_pci(name)
    return pci if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", pci) else None
