"""Which processes hold a GPU, and who they are: the one reader of both questions (docs/ARCHITECTURE.md).

**Who a process is** (:func:`identity`), read once from ``/proc/<pid>``:

- its real uid, the ``Uid:`` line of ``status``. Not the owner of ``/proc/<pid>``: the kernel
  shows the effective uid there, root's for a set-uid program any user can run through a link of
  a root daemon's name;
- its name, ``comm`` (16 bytes in the kernel; a longer file is not procfs and names nobody),
  escaped: a process names itself;
- its program, the ``exe`` link read as text (never followed); None where the kernel does not
  let us read it (a non-dumpable process and we lack CAP_SYS_PTRACE) or for a kernel thread;
- its start time, field 22 of ``stat`` (clock ticks after boot): a pid the kernel gave to a new
  process has another. ``stat`` is read before and after the rest, and an identity whose start
  changed between the two is of no one process: every part of it is unknown, never a mix of two.

**Who holds a GPU** (:func:`gpu_holders`): the pids NVML lists on it and the processes whose
``/proc/<pid>/fd`` links point at ``/dev/nvidia*`` (what ``fuser /dev/nvidia*`` reads), merged.
Each holder says how it was seen (``nvml``, ``fd``, ``both``) and how its descriptors read
(``read``, ``denied``: another user's process and we are not root; ``gone``; ``unread``: the scan
stopped by its bounds first). NVML lists a process /proc does not show when it lives in another
PID namespace or has exited: its identity says ``gone``.

Every file is read bounded and never through a link (gpuhc/files/untrusted.py). A link's target
is the kernel's text, but a path under a user's own directory can be named anything, so only
targets under ``/dev/nvidia`` are kept, escaped. Bounded: at most ``max_fds`` descriptors.
"""

from __future__ import annotations

import os
import stat as st
import time
from dataclasses import dataclass
from typing import Iterable

from gpuhc.text.lazyre import LazyPattern
from gpuhc.text.logtext import escape

PREFIX = "/dev/nvidia"
_GPU_FILE = LazyPattern(r"/dev/nvidia\d{1,4}")  # a GPU's own file; nvidiactl, nvidia-uvm, nvidia-caps/ are shared
_UID_LINE = LazyPattern(r"(?m)^Uid:\t(\d{1,10})\t")
STATUS_LIMIT = 64 * 1024  # /proc/<pid>/status: ~60 short lines, its Groups line grows with the user's groups
COMM_LIMIT = 64  # /proc/<pid>/comm is at most 16 bytes; anything longer is not procfs
STAT_LIMIT = 4096  # 52 numbers and the name
EXE_LIMIT = 4096  # PATH_MAX


@dataclass(frozen=True)
class Identity:
    """Who one process is. ``gone``: /proc has no such pid (it exited, or lives in another PID
    namespace); otherwise a part that could not be read is None: unknown, never guessed."""

    pid: int
    gone: bool = False
    uid: int | None = None  # real uid
    name: str | None = None  # comm, escaped
    exe: str | None = None  # the exe link's text as the kernel writes it (" (deleted)" after an upgrade)
    start: int | None = None  # clock ticks after boot

    def same(self, other: "Identity") -> bool:
        """The same process: same pid and a known, equal start time (a reused pid has another)."""
        return self.pid == other.pid and self.start is not None and self.start == other.start


def owner_from_status(text: str) -> int | None:
    """The real uid in a ``/proc/<pid>/status`` text (``Uid:\treal\teffective\tsaved\tfs``), or None
    when there is not exactly one such line (the kernel escapes a newline in the Name it prints)."""
    found = _UID_LINE.findall(text)
    return int(found[0]) if len(found) == 1 and int(found[0]) < 1 << 32 else None


def start_from_stat(text: str) -> int | None:
    """Field 22 (starttime) of a ``/proc/<pid>/stat`` line, counted from the last ``)``: the name
    before it may hold spaces and parentheses."""
    end = text.rfind(")")
    rest = text[end + 1:].split() if end >= 0 else []
    return int(rest[19]) if len(rest) > 19 and rest[19].isdigit() else None


def _read(proc_root: str, pid: int, name: str, limit: int) -> bytes | None:
    from gpuhc.files.untrusted import UntrustedInputError, read_bounded

    try:
        return read_bounded(os.path.join(proc_root, str(int(pid)), name), limit, f"process {name}")
    except (UntrustedInputError, OSError):
        return None


def real_uid(proc_root: str, pid: int) -> int | None:
    """The real uid of the process, or None (gone, or not readable as the kernel writes it)."""
    data = _read(proc_root, pid, "status", STATUS_LIMIT)
    return None if data is None else owner_from_status(data.decode("utf-8", "replace"))


def _start(proc_root: str, pid: int) -> int | None:
    data = _read(proc_root, pid, "stat", STAT_LIMIT)
    return None if data is None else start_from_stat(data.decode("ascii", "replace"))


def _gone(proc_root: str, pid: int) -> bool:
    try:
        return not st.S_ISDIR(os.lstat(os.path.join(proc_root, str(int(pid)))).st_mode)
    except OSError:
        return True


def identity(proc_root: str, pid: int) -> Identity:
    """Who the process ``pid`` is (see the module doc): four small reads and a readlink."""
    pid = int(pid)
    if _gone(proc_root, pid):
        return Identity(pid, gone=True)
    start = _start(proc_root, pid)
    comm = _read(proc_root, pid, "comm", COMM_LIMIT)
    name = escape(comm.decode("utf-8", "replace").removesuffix("\n")) if comm is not None else None
    try:
        exe = os.readlink(os.path.join(proc_root, str(pid), "exe"))[:EXE_LIMIT]
    except OSError:
        exe = None  # not permitted, a kernel thread, or gone
    uid = real_uid(proc_root, pid)
    if _start(proc_root, pid) != start:  # the pid went to another process meanwhile
        return Identity(pid, gone=_gone(proc_root, pid))
    return Identity(pid, uid=uid, name=name or None, exe=exe, start=start)


# ---------------------------------------------------------------- the /proc/<pid>/fd half


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
    from gpuhc.files.untrusted import UntrustedInputError, open_regular, read_upto

    try:
        fd = open_regular(os.path.join(proc_root, str(int(pid)), "maps"), "process maps")
    except (UntrustedInputError, OSError):
        return None
    try:
        text = read_upto(fd, MAPS_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    if any(_CONTEXT_MAP.search(line) for line in text.splitlines()):
        return True
    return None if len(text) >= MAPS_MAX_BYTES else False  # past the bound: not seen is not absent


@dataclass
class FdScan:
    """One pass over every process's ``fd/`` links: who holds ``/dev/nvidia*`` open."""

    files: dict[int, set[str]]  # pid -> the /dev/nvidia* files it holds (holders only)
    looked: set[int]  # pids whose descriptors were read
    denied: set[int]  # pids whose descriptors we may not read (not root)
    stopped_at: int | None = None  # the pid the scan stopped at (time or size bound); None: all looked at
    error: str | None = None  # /proc itself could not be listed


def scan_fds(proc_root: str, deadline: float, max_pids: int = 65536, max_fds: int = 1 << 20) -> FdScan:
    """Every process's ``/dev/nvidia*`` files, until ``deadline`` (monotonic) or ``max_fds``
    descriptors in all; at most ``max_pids`` processes (a node has a few thousand)."""
    scan = FdScan({}, set(), set())
    try:
        pids = sorted(int(p) for p in os.listdir(proc_root) if p.isdigit())
    except OSError as e:
        scan.error = e.strerror or str(e)
        return scan
    if len(pids) > max_pids:
        scan.stopped_at = pids[max_pids]
    seen = 0
    for pid in pids[:max_pids]:
        if time.monotonic() > deadline or seen > max_fds:
            scan.stopped_at = pid
            break
        try:
            devices, n = nvidia_files(proc_root, pid, max_fds - seen + 1)
        except PermissionError:
            scan.denied.add(pid)
            continue
        except OSError:
            continue  # gone meanwhile
        seen += n
        scan.looked.add(pid)
        if devices:
            scan.files[pid] = devices
    return scan


@dataclass(frozen=True)
class GpuHolder:
    """One process holding a GPU, as NVML and /proc together see it."""

    who: Identity
    seen: str  # "nvml", "fd" or "both"
    fd: str  # its descriptors: "read", "denied", "gone" or "unread" (see the module doc)
    devices: tuple[str, ...] = ()  # the /dev/nvidia* files it holds open, where they could be read

    @property
    def pid(self) -> int:
        return self.who.pid


def gpu_holders(proc_root: str, scan: FdScan, nvml_pids: Iterable[int] = ()) -> list[GpuHolder]:
    """The processes NVML lists (``nvml_pids``) and those ``scan`` found holding ``/dev/nvidia*``,
    each once, by pid, with its identity."""
    listed = {int(p) for p in nvml_pids}
    out = []
    for pid in sorted(listed | set(scan.files)):
        seen = "both" if pid in listed and pid in scan.files else "nvml" if pid in listed else "fd"
        fd = ("read" if pid in scan.looked else "denied" if pid in scan.denied
              else "unread" if scan.stopped_at is not None and pid >= scan.stopped_at else "gone")
        out.append(GpuHolder(identity(proc_root, pid), seen, fd, tuple(sorted(scan.files.get(pid, ())))))
    return out
