"""The host side of a job's processes on the GPUs: is a rank making progress (docs/checks.md, "jobs").

A rank whose GPU is idle while its peers spin in a collective is either stuck (the culprit of a
hang) or busy on the host (writing a checkpoint, compiling, loading data): the GPU samples read
the same. Its process tells them apart (proc(5)):

- ``/proc/<pid>/stat``: the state letter (``D``: waiting on I/O, ``R``: running) and the CPU time
  it has used (``utime`` + ``stime``, every thread, in clock ticks);
- ``/proc/<pid>/io``: ``rchar`` and ``wchar``, the bytes its read and write calls moved (counted at
  the call, so a checkpoint into the page cache or onto a network file system shows at once).

Progress is measured between two samples: the previous read's, when the same reader read
recently (the node watcher, every 10-15 s), else a second sample a short moment later, taken
only when the GPU samples look like a hang (one GPU of a job idle while another spins), so the
health check of a healthy node never waits. Every file is a user process's: read bounded,
without following links (gpuhc/files/untrusted.py), and a process that is gone is simply not counted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from gpuhc.text.lazyre import LazyPattern

_STAT_LIMIT = 4096  # /proc/<pid>/stat: one line of 52 fields and a 16-byte name
_IO_LIMIT = 4096  # /proc/<pid>/io: seven short lines
_ENVIRON_LIMIT = 256 * 1024  # the front of /proc/<pid>/environ, as job_activity reads it
_IO_FIELD = LazyPattern(r"^(rchar|wchar):\s*(\d{1,20})$")
_NODES = LazyPattern(r"\d{1,7}")
# The state letters proc(5) lists, and which wins when a GPU's processes differ: waiting on I/O
# says the most. A letter not listed (a kernel of another age) is left out, not guessed.
_STATE_RANK = {"D": 6, "R": 5, "S": 4, "I": 3, "W": 2, "P": 2, "K": 2, "T": 1, "t": 1, "Z": 0, "X": 0, "x": 0}
STATES = tuple(_STATE_RANK)
MAX_AGE_S = 60.0  # an older previous sample says nothing about now: measure again
_TICK = 0.0


@dataclass(frozen=True)
class ProcSample:
    t: float  # monotonic seconds when read
    state: str
    cpu_s: float
    rchar: int | None
    wchar: int | None


def parse_stat(text: str) -> tuple[str, int] | None:
    """(state letter, utime + stime in clock ticks) from a ``/proc/<pid>/stat`` line, or None.
    The name field is in parentheses and may itself hold spaces and parentheses: the fields
    are counted from the last ``)``."""
    end = text.rfind(")")
    fields = text[end + 1:].split() if end >= 0 else []
    if len(fields) < 13 or not fields[11].isdigit() or not fields[12].isdigit():
        return None
    return fields[0][:1], int(fields[11]) + int(fields[12])


def parse_io(text: str) -> tuple[int | None, int | None]:
    """(rchar, wchar) from a ``/proc/<pid>/io`` text; None for a field not there."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        m = _IO_FIELD.match(line.strip())
        if m:
            found[m.group(1)] = int(m.group(2))
    return found.get("rchar"), found.get("wchar")


@dataclass(frozen=True)
class JobEnv:
    nodes: int | None  # the job's node count
    name: str | None  # the job's name
    rank: int | None  # this process's rank in the job


def job_env(data: bytes) -> JobEnv:
    """What a rank's ``/proc/<pid>/environ`` says of its job: ``SLURM_JOB_NUM_NODES``
    (``SLURM_NNODES`` in older releases) and ``SLURM_JOB_NAME``, which srun and sbatch set in
    every task, and its rank: ``SLURM_PROCID`` (srun), else ``RANK`` (torchrun). The job's owner
    could change any of them; they only word a finding about that job."""
    found: dict[bytes, str] = {}
    for entry in data.split(b"\0"):
        key, _, value = entry.partition(b"=")
        if key in (b"SLURM_JOB_NUM_NODES", b"SLURM_NNODES", b"SLURM_JOB_NAME", b"SLURM_PROCID", b"RANK"):
            found.setdefault(key, value.decode("utf-8", "replace"))

    def count(*keys: bytes, least: int) -> int | None:
        for k in keys:
            if k in found:
                text = found[k]
                return int(text) if _NODES.fullmatch(text) and int(text) >= least else None
        return None
    name = "".join(c for c in found.get(b"SLURM_JOB_NAME", "")[:256] if c.isprintable()) or None
    return JobEnv(count(b"SLURM_JOB_NUM_NODES", b"SLURM_NNODES", least=1), name, count(b"SLURM_PROCID", b"RANK", least=0))


class HostSampler:
    """Samples of processes' host side, kept from one read to the next (the watcher reuses it)."""

    def __init__(self, proc_root: str = "/proc", clock=time.monotonic):
        self.proc_root = proc_root
        self._clock = clock
        self._last: dict[int, ProcSample] = {}
        global _TICK
        if not _TICK:
            _TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0

    def sample(self, pid: int) -> ProcSample | None:
        from gpuhc.files.untrusted import UntrustedInputError, read_bounded

        base = os.path.join(self.proc_root, str(int(pid)))
        try:
            stat = parse_stat(read_bounded(os.path.join(base, "stat"), _STAT_LIMIT, "process stat").decode("ascii", "replace"))
        except (UntrustedInputError, OSError):
            return None
        if stat is None:
            return None
        try:
            rchar, wchar = parse_io(read_bounded(os.path.join(base, "io"), _IO_LIMIT, "process io").decode("ascii", "replace"))
        except (UntrustedInputError, OSError):
            rchar = wchar = None  # io needs ptrace rights: a non-root run measures CPU time alone
        return ProcSample(self._clock(), stat[0] or "?", stat[1] / _TICK, rchar, wchar)

    def take(self, pids: list[int]) -> dict[int, ProcSample]:
        out = {}
        for pid in pids:
            s = self.sample(pid)
            if s is not None:
                out[pid] = s
        return out

    def previous(self, pids: list[int]) -> dict[int, ProcSample] | None:
        """The last read's samples of exactly these processes, when recent enough to compare with."""
        now = self._clock()
        old = {p: self._last[p] for p in pids if p in self._last}
        if len(old) != len(pids) or not old or any(now - s.t > MAX_AGE_S for s in old.values()):
            return None
        return old

    def keep(self, samples: dict[int, ProcSample]) -> None:
        self._last = dict(samples)

    def job_env(self, pid: int) -> JobEnv | None:
        from gpuhc.files.untrusted import UntrustedInputError, open_regular, read_upto

        try:
            fd = open_regular(os.path.join(self.proc_root, str(int(pid)), "environ"), "process environment")
            try:
                return job_env(read_upto(fd, _ENVIRON_LIMIT))
            finally:
                os.close(fd)
        except (UntrustedInputError, OSError):
            return None


def summarise(pids: list[int], now: dict[int, ProcSample], before: dict[int, ProcSample] | None) -> dict:
    """A GPU's host fields (gpuhc.model.activity.GpuActivity ``host_*``) from its processes' samples."""
    have = [p for p in pids if p in now]
    if not have:
        return {}
    states = [now[p].state for p in have if now[p].state in _STATE_RANK]
    out: dict = {"host_state": max(states, key=lambda s: _STATE_RANK[s]) if states else None,
                 "host_cpu_total_s": round(sum(now[p].cpu_s for p in have), 2)}
    if before is None or not all(p in before for p in have):
        return out
    dt = min(now[p].t - before[p].t for p in have)
    if dt <= 0:
        return out
    out["host_dt_s"] = round(dt, 3)
    out["host_cpu_s"] = round(max(0.0, sum(now[p].cpu_s - before[p].cpu_s for p in have)), 3)
    for key, attr in (("host_read_bytes", "rchar"), ("host_write_bytes", "wchar")):
        pairs = [(getattr(now[p], attr), getattr(before[p], attr)) for p in have]
        if all(a is not None and b is not None for a, b in pairs):
            out[key] = float(max(0, sum(a - b for a, b in pairs)))
    return out
