"""Processes in uninterruptible sleep, read for the host check's stuck processes (docs/checks.md,
"host"; judged by gpuhc/checks/host_stuck.py).

Every process whose state is ``D`` in ``/proc/<pid>/stat`` (the one pass over /proc the host
reader makes anyway) is looked at, every run. Not gated on /proc/stat's ``procs_blocked``: the
kernel counts there only the tasks waiting on block I/O (``in_iowait``), not the killable
sleeps (``TASK_KILLABLE``, state ``D`` all the same) in which NFS, FUSE and the NVIDIA driver
park a process, so a node whose one hung process sat in the driver read 0 and was never looked at.

For each whose wait channel (``/proc/<pid>/wchan``: the kernel function it sleeps in, the first
outside the scheduler) is one of the configured ones, a sample of its progress:

- the CPU time of its main thread (``/proc/<pid>/task/<pid>/stat``: the thread whose state
  said ``D``; the whole process's would grow with any helper thread that still spins);
- that thread's voluntary and involuntary context switches (``/proc/<pid>/status``). A thread
  that woke at all between two samples switched at least once, so equal counts say it never
  ran: the strongest "no progress" the kernel offers without reading its stack.

``/proc/<pid>/io`` and ``/proc/<pid>/stack`` are not read: the kernel takes the process's exec
lock to show them, and a process stuck in exec on a hung file system holds it, so the read
would hang gpuhc's own thread (the thread's switches already cover its I/O: it cannot read or
write without running). Processes that hold a GPU's device file are told by their ``fd/``
links (gpuhc/node/holders.py), looked at only for waits in the GPU driver.

Wait channels match as whole names: an entry ending in ``_`` is a prefix that must end there
(``nv_`` is ``nv_open_device``, never ``nvme_poll``), any other entry is one whole function
name (a compiler's ``.isra.0`` suffix cut off). Every file here is a user's process's: read
bounded, names escaped.
"""

from __future__ import annotations

import os
from typing import Any

from gpuhc.text.logtext import escape

MAX_STUCK = 64  # D-state processes sampled in one reading
MAX_FDS = 65536  # descriptors of one process looked at for a GPU file
_WCHAN_LIMIT = 128  # a kernel symbol (KSYM_NAME_LEN is 512, real names are far shorter)
_STAT_LIMIT = 1024  # /proc/<pid>/task/<pid>/stat: 52 numbers and a 16-byte name
_STATUS_LIMIT = 64 * 1024  # /proc/<pid>/status: its Groups line grows with the user's groups
CLASSES = ("fuse", "gpu-driver", "file-system")  # matched in this order: a FUSE wait is never another


def wait_class(wchan: str, lists: dict[str, list[str]]) -> str | None:
    """The class whose list names ``wchan`` (see the module doc), or None."""
    name = wchan.split(".", 1)[0]
    if not name:
        return None
    for cls in CLASSES:
        for entry in lists.get(cls) or ():
            if name.startswith(entry) if entry.endswith("_") else name == entry:
                return cls
    return None


def stuck_candidates(proc_root: str, procs: list[dict[str, Any]], lists: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The D-state processes among ``procs`` (pid, comm, state, start) waiting in a listed
    function, each with its wait's class and a progress sample."""
    out = []
    for p in procs:
        if p.get("state") != "D":
            continue
        base = os.path.join(proc_root, str(int(p["pid"])))
        wchan = escape(_read(os.path.join(base, "wchan"), _WCHAN_LIMIT).strip(), 64)
        cls = wait_class(wchan, lists)
        if cls is None:
            continue
        entry = {"pid": p["pid"], "start": p.get("start"), "comm": p.get("comm"), "wchan": wchan, "wait": cls,
                 "cpu": _thread_cpu(_read(os.path.join(base, "task", str(int(p["pid"])), "stat"), _STAT_LIMIT)),
                 "switches": switches(_read(os.path.join(base, "status"), _STATUS_LIMIT))}
        if cls == "gpu-driver":
            entry["holds_gpu"] = _holds_gpu(proc_root, int(p["pid"]))
        out.append(entry)
        if len(out) >= MAX_STUCK:
            break
    return out


def _holds_gpu(proc_root: str, pid: int) -> bool | None:
    from gpuhc.node.holders import holds_gpu, nvidia_files

    try:
        files, _ = nvidia_files(proc_root, pid, MAX_FDS)
    except OSError:
        return None  # not root, or gone: unknown, never a guess
    return holds_gpu(files)


def _thread_cpu(text: str) -> int | None:
    """utime + stime (clock ticks) of one thread's stat line."""
    from gpuhc.sources.job_procs import parse_stat

    parsed = parse_stat(text)
    return parsed[1] if parsed else None


def switches(text: str) -> int | None:
    """voluntary + nonvoluntary context switches from a ``status`` text; None if either is missing."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches") and value.strip().isdigit():
            found[key] = int(value.strip())
    return sum(found.values()) if len(found) == 2 else None


def _read(path: str, limit: int) -> str:
    """At most ``limit`` bytes of a regular file, never through a link; '' for one that is gone
    or unreadable (``/proc`` reports no size, so the bound is the read's own)."""
    from gpuhc.files.untrusted import UntrustedInputError, open_regular, read_upto

    try:
        fd = open_regular(path, "process file")
    except (UntrustedInputError, OSError):
        return ""
    try:
        return read_upto(fd, limit).decode("ascii", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
