"""What an HCA says about itself beyond its ports' state: its firmware version and its IPoIB
interfaces (read for :class:`gpuhc.sources.sysfs.SysfsTree`, live or a copied tree).

- ``/sys/class/infiniband/<hca>/fw_ver``: the firmware version the driver reports (the kernel's
  ABI document, Documentation/ABI/stable/sysfs-class-infiniband, "fw_ver"; ConnectX prints
  ``28.41.1000``: the first number is the device family's, 28 a ConnectX-7, 20 a ConnectX-6,
  32 a BlueField-3, as NVIDIA's firmware release notes number them).
- The IPoIB interfaces of an HCA's PCI function, ``/sys/bus/pci/devices/<pci>/net/<ifname>/``:
  ``type`` 32 is ``ARPHRD_INFINIBAND`` (include/uapi/linux/if_arp.h; a RoCE port's interface
  is Ethernet, 1), ``flags`` holds ``IFF_UP`` (0x1, include/uapi/linux/if.h) when an admin or
  the network configuration brought it up, ``operstate`` is RFC 2863's word (Documentation/
  networking/operstates.rst: up, down, lowerlayerdown, dormant, ...) and ``dev_port`` the
  port, from 0 (the IPoIB driver sets it to the port number less one).

An interface that is administratively down is the site's choice (a port without IPoIB), not a
fault, so it is not listed. Where a copied tree lacks ``type`` or ``flags`` (captures often keep
only a few files), an interface on an InfiniBand port is taken for IPoIB and its admin state for
up. As in sysfs.py, a file that is missing or unreadable costs only its own value.
"""

from __future__ import annotations

import os
import re

ARPHRD_INFINIBAND = 32
IFF_UP = 0x1
_FW_RE = re.compile(r"^\s*([0-9A-Za-z][0-9A-Za-z._-]{0,63})\s*$")
_OPER_RE = re.compile(r"^\s*([a-z]{1,32})\s*$")


def fw_ver(ib_dir: str, hca: str) -> str | None:
    """The HCA's firmware version as it prints it; None when absent or not a version's shape."""
    from gpuhc.sources.sysfs import _read

    m = _FW_RE.match(_read(os.path.join(ib_dir, hca, "fw_ver")) or "")
    return m.group(1) if m else None


def ipoib(pci_dir: str, pci: str) -> dict[int, dict[str, tuple[str, bool]]]:
    """Port number -> {interface: (operstate, typed)} of the IPoIB interfaces that are up
    administratively on the HCA at ``pci``; ``typed``: its ``type`` file said InfiniBand (else
    the caller keeps it only on an InfiniBand port). Empty: no such interface."""
    from gpuhc.sources.sysfs import _listdir, _read, parse_hex, parse_int

    ndir = os.path.join(pci_dir, pci, "net")
    out: dict[int, dict[str, tuple[str, bool]]] = {}
    for name in _listdir(ndir):
        d = os.path.join(ndir, name)
        kind = parse_int(_read(os.path.join(d, "type")))
        if kind is not None and kind != ARPHRD_INFINIBAND:
            continue
        flags = parse_hex(_read(os.path.join(d, "flags")))
        if flags is not None and not flags & IFF_UP:
            continue
        m = _OPER_RE.match(_read(os.path.join(d, "operstate")) or "")
        dev_port = parse_int(_read(os.path.join(d, "dev_port")))
        out.setdefault((dev_port or 0) + 1, {})[name] = (m.group(1) if m else "unknown", kind is not None)
    return out
