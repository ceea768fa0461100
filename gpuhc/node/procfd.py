"""Which ``/dev/nvidia*`` files a process holds open, from its ``/proc/<pid>/fd`` links: what
``fuser /dev/nvidia*`` reads; and whether it holds a CUDA context, from what it maps. One reader
for the two callers that must know who holds a GPU when NVML may not answer: the GPU reset's
holder scan (gpuhc/slurm/repair/reset_probe.py) and the host check's stuck processes
(gpuhc/sources/host_stuck.py).

A link's target is the kernel's text, but a path under a user's own directory can be named
anything, so only targets under ``/dev/nvidia`` are kept, escaped. Bounded: at most ``max_fds``
descriptors of one process are looked at (a process may hold a million).
"""

from __future__ import annotations

import os

from gpuhc.text.lazyre import LazyPattern
from gpuhc.text.logtext import escape

PREFIX = "/dev/nvidia"
_GPU_FILE = LazyPattern(r"/dev/nvidia\d{1,4}")  # a GPU's own file; nvidiactl, nvidia-uvm, nvidia-caps/ are shared


def nvidia_files(proc_root: str, pid: int, max_fds: int = 1 << 20) -> tuple[set[str], int]:
    """(the ``/dev/nvidia*`` files the process holds open, descriptors looked at). Raises the
    ``OSError`` of listing ``fd/`` (``PermissionError``: another user's process and we are not
    root; any other: the process is gone)."""
    fd_dir = os.path.join(proc_root, str(int(pid)), "fd")
    found: set[str] = set()
    seen = 0
    with os.scandir(fd_dir) as it:
        for entry in it:
            if seen >= max_fds:
                break
            seen += 1
            try:
                target = os.readlink(entry.path)
            except OSError:
                continue  # closed meanwhile
            if target.startswith(PREFIX):
                found.add(escape(target))
    return found, seen


def holds_gpu(files: set[str]) -> bool:
    """A GPU's own device file (``/dev/nvidia<N>``) among them: what a CUDA context opens, and
    ``nvidia-smi`` too; ``/dev/nvidiactl`` alone is every NVML client's."""
    return any(_GPU_FILE.fullmatch(f) for f in files)


MAPS_MAX_BYTES = 8 << 20  # a large PyTorch process maps some 10,000 regions, about 1.5 MB of text
# A CUDA context maps regions of the GPU's own device file and of /dev/nvidia-uvm into the
# process; an NVML client maps at most /dev/nvidiactl (docs/repair.md, "What blocks a reset").
_CONTEXT_MAP = LazyPattern(rb" /dev/nvidia(?:[0-9]+|-uvm)\s*$")


def cuda_context(proc_root: str, pid: int) -> bool | None:
    """Does the process hold a CUDA context? None: its maps could not be read.

    The device files it has open cannot tell (on an H100 a pynvml loop holds ``/dev/nvidia-uvm``
    and the GPU's own file as a CUDA program does), nor can the libraries it maps (with driver 580
    a pynvml loop maps ``libcuda.so`` too); what it has mapped of the devices can: a context maps
    the GPU's memory through ``/dev/nvidia<N>`` and ``/dev/nvidia-uvm``, an NVML client maps only
    ``/dev/nvidiactl`` (both seen on an H100, docs/verification.md). A process cannot fake a
    mapping of a device it has not opened, but a program in its own mount namespace can name any
    file ``/dev/nvidia0``; then it only loses the plan's "monitor" label. Bounded read."""
    path = os.path.join(proc_root, str(int(pid)), "maps")
    try:
        with open(path, "rb") as f:
            text = f.read(MAPS_MAX_BYTES)
    except OSError:
        return None
    if any(_CONTEXT_MAP.search(line) for line in text.splitlines()):
        return True
    return None if len(text) >= MAPS_MAX_BYTES else False  # past the bound: not seen is not absent
