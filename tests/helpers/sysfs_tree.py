"""A sysfs tree in a tmp dir: InfiniBand ports as the kernel lays them out."""

from __future__ import annotations


import os
from pathlib import Path


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
