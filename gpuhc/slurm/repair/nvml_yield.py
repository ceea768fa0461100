"""gpuhc's own NVML holders let go for a GPU reset (docs/repair.md, "What blocks a reset").

The node watcher (``gpuhc watch``, gpuhc/slurm/jobs/watch.py) keeps NVML initialised for its
life, and NVML holds ``/dev/nvidiactl`` and every ``/dev/nvidia<N>`` open while it is: the
driver refuses a reset while any client does, so without this the ladder's reset found gpuhc
itself in the way and climbed to a reboot. The handshake, all in
``<state_dir>/yield/``, a directory as private as the state (root's alone, checked up to ``/``
through :mod:`gpuhc.files.fsutil`, every file replaced whole, never through a link):

- ``watch-<pid>.json``: a watcher says it holds NVML (its pid, and its start time from
  ``/proc/<pid>/stat``, so a pid reused by another process is not taken for it);
- ``request.json``: a reset asks every watcher to let go, until a wall-clock time;
- ``ack-<pid>.json``: the watcher has shut NVML down for that request. It waits while the
  request stands (never past its ``until``, nor :data:`MAX_YIELD_S`), then initialises NVML
  again and removes its acknowledgement.

Why files and not a signal: the watcher polls between rounds anyway, a file in root's private
directory can only be written by root (a signal would also need the watcher's pid, from a file
just the same), and a reset that is killed leaves a request whose ``until`` ends the pause by
itself. Only a holder registered here, alive with the start time it wrote, counts as gpuhc's
own: a user's process cannot pass for one by its name, nor write the registration.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

YIELD_DIR = "yield"
REQUEST = "request.json"
POLL_S = 0.25  # how often the watcher looks for a request while it sleeps, and a reset for the acks
MAX_YIELD_S = 600.0  # the longest a watcher stays without NVML for one request, whatever it says
SMALL = 4096


@dataclass(frozen=True)
class Request:
    id: str
    until: float  # wall clock


def directory(state_dir: str) -> str:
    return os.path.join(state_dir, YIELD_DIR)


def _ensure(state_dir: str) -> str:
    from gpuhc.files.fsutil import check_dir_chain, make_dirs

    d = directory(state_dir)
    make_dirs(d, 0o700, "NVML yield directory")
    check_dir_chain(d, "NVML yield directory")
    return d


def _write(path: str, doc: dict) -> None:
    from gpuhc.files.fsutil import write_atomic

    write_atomic(path, json.dumps(doc).encode(), 0o600, "NVML yield file")


def _read(path: str) -> dict | None:
    """A small JSON file of ours, or None (absent, a link, too big, not ours to trust, not JSON)."""
    from gpuhc.files.fsutil import UnsafePath, check_dir_chain
    from gpuhc.files.untrusted import UntrustedInputError, read_bounded

    try:
        check_dir_chain(os.path.dirname(path), "NVML yield directory")
        doc = json.loads(read_bounded(path, SMALL, "NVML yield file"))
    except (OSError, UnsafePath, UntrustedInputError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def start_time(proc_root: str, pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot): with the pid, one process."""
    from gpuhc.files.untrusted import UntrustedInputError, read_bounded

    try:
        text = read_bounded(os.path.join(proc_root, str(int(pid)), "stat"), SMALL, "proc file").decode("utf-8", "replace")
    except (OSError, UntrustedInputError, ValueError):
        return None
    fields = text.rpartition(")")[2].split()  # comm, in parentheses, may hold spaces
    return fields[19] if len(fields) > 19 else None


# ---------------------------------------------------------------------------- the watcher's side


def register(state_dir: str, proc_root: str = "/proc") -> str:
    """Say that this process holds NVML and honours requests; the file to :func:`unregister`."""
    path = os.path.join(_ensure(state_dir), f"watch-{os.getpid()}.json")
    _write(path, {"pid": os.getpid(), "start": start_time(proc_root, os.getpid())})
    return path


def unregister(path: str) -> None:
    _remove(path)


def asked(state_dir: str, now: float | None = None) -> Request | None:
    """The request standing now, or None (none, expired, or unreadable)."""
    path = os.path.join(directory(state_dir), REQUEST)
    if not os.path.lexists(path):  # the common case, every poll: one lstat
        return None
    doc = _read(path)
    if doc is None or not isinstance(doc.get("id"), str) or not isinstance(doc.get("until"), (int, float)):
        return None
    until = float(doc["until"])
    return Request(doc["id"][:64], until) if until > (time.time() if now is None else now) else None


def acknowledge(state_dir: str, req: Request) -> str:
    path = os.path.join(_ensure(state_dir), f"ack-{os.getpid()}.json")
    _write(path, {"pid": os.getpid(), "id": req.id})
    return path


def withdraw(path: str) -> None:
    _remove(path)


# ---------------------------------------------------------------------------- the reset's side


def own(state_dir: str, proc_root: str, pids: list[int]) -> set[int]:
    """Which of ``pids`` are gpuhc's registered watchers, alive with the start time they wrote
    (only root writes in the directory, and a reused pid has another start time)."""
    found = set()
    for pid in pids:
        doc = _read(os.path.join(directory(state_dir), f"watch-{int(pid)}.json"))
        if doc is None or doc.get("pid") != pid or doc.get("start") is None:
            continue
        if start_time(proc_root, pid) != doc.get("start"):
            continue
        found.add(pid)
    return found


def ask(state_dir: str, until: float) -> Request:
    """Ask every watcher to let go until ``until`` (wall clock) or :func:`release`."""
    req = Request(f"{os.getpid()}-{os.urandom(4).hex()}", until)
    _write(os.path.join(_ensure(state_dir), REQUEST), {"id": req.id, "until": until, "by": os.getpid()})
    return req


def acked(state_dir: str, req: Request, pids: set[int]) -> set[int]:
    """Which of ``pids`` acknowledged ``req``."""
    out = set()
    for pid in pids:
        doc = _read(os.path.join(directory(state_dir), f"ack-{int(pid)}.json"))
        if doc is not None and doc.get("id") == req.id and doc.get("pid") == pid:
            out.add(pid)
    return out


def release(state_dir: str) -> None:
    """The reset is over: the watchers take NVML back."""
    _remove(os.path.join(directory(state_dir), REQUEST))
