"""Read the sources in threads, and wait for them only until a deadline.

Slurm kills the health check at 60 s, and a wedged NVML call or a stuck ``dmesg`` must not take
the whole run with it: every live source a run needs is read in its own daemon thread, started
at once, and each caller waits on it with its own deadline (gpuhc/run/runner.py gives each check its
timeout inside the stage budget). A thread stuck in C code cannot be killed, which is why the
CLI ends the process with ``os._exit`` when anything timed out.

A source that only hands out what is already in memory (a replayed recording: its sources say
``in_memory``) cannot hang, so it is read at once in the caller's thread: a thread's start costs
more than such a read (the campaign model runs thousands of replays), and a deadline guards
nothing there. A source with nothing to read (None) is not read at all.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpuhc.checks.base import ACTIVITY, AER, HOST, IB, IMEX, KERNEL_LOG, NVML, PCI, PROCS
from gpuhc.model.snapshot import Snapshot
from gpuhc.sources import Sources

ALL = frozenset((NVML, KERNEL_LOG, IB, AER, PCI, PROCS, IMEX, ACTIVITY, HOST))  # every source a run can read


class _Answered:
    """The done flag of every read made inline: always set (a replay imports no threading)."""

    @staticmethod
    def wait(timeout: float | None = None) -> bool:
        return True

    @staticmethod
    def is_set() -> bool:
        return True


_ANSWERED = _Answered()


class Reader:
    """A source read running in a daemon thread, which callers wait on with a deadline; made
    inline (done before the constructor returns) for a read that cannot block."""

    def __init__(self, name: str, fn: Callable[[], Any], inline: bool = False):
        self.name = name
        self.value: Any = None
        self.error: BaseException | None = None
        # The read's own wall time, in its thread (``gpuhc check --timings``): what the source
        # costs, apart from the checks that wait on it.
        self.started = self.ended = time.perf_counter()
        if inline:
            try:
                self.value = fn()
            except Exception as e:  # reported by the checks that need it, as a thread's would be
                self.error = e
            self.ended = time.perf_counter()
            self._done = _ANSWERED
            return
        import threading  # here: only a live source's read runs in a thread

        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn,), name=f"gpuhc-read-{name}", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        self.started = time.perf_counter()
        try:
            self.value = fn()
        except BaseException as e:  # reported by the checks that need it
            self.error = e
        finally:
            self.ended = time.perf_counter()
            self._done.set()

    def wait(self, deadline: float) -> bool:
        return self._done.wait(max(0.0, deadline - time.monotonic()))

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def wall_s(self) -> float | None:
        """How long the read took; None while it runs (a read that never answered has no cost
        to report, only its timeout)."""
        return self.ended - self.started if self.done else None


def start_readers(sources: Sources, needs: set[str] | frozenset[str]) -> dict[str, Reader]:
    """A reader for each source named in ``needs``, all started now (those in memory read)."""
    # The GPUs on the PCI bus; a sysfs source that cannot list them reads as unknown (None).
    pci = sources.pci if sources.pci is not None else sources.sysfs
    fns = {
        NVML: sources.nvml.read,
        KERNEL_LOG: sources.kernel_log.read,
        IB: sources.sysfs.ib_ports,
        AER: sources.sysfs.aer,
        PCI: getattr(pci, "nvidia_gpus", None) or _nothing,
        PROCS: sources.procs.read if sources.procs is not None else _nothing,
        IMEX: sources.imex.read if sources.imex is not None else _nothing,
        ACTIVITY: sources.activity.read if sources.activity is not None else _nothing,
        HOST: sources.host.read if sources.host is not None else _nothing,
    }
    return {name: Reader(name, fns[name], inline=fns[name] is _nothing or in_memory(fns[name]))
            for name in fns if name in needs}


def _nothing() -> None:
    """The read of a source the run does not have: unknown."""
    return None


def in_memory(read: Callable[[], Any]) -> bool:
    """Does this read only hand out what its source already holds (it cannot block)? Only a
    source that says so (``in_memory``) is trusted to; every other read gets its thread."""
    return getattr(getattr(read, "__self__", None), "in_memory", False) is True


def fill(snapshot: Snapshot, readers: dict[str, Reader]) -> None:
    """Put every reading that has come in (and not failed) into the snapshot; a field once
    filled is kept, so the checks of one run judge one reading."""
    got = {name: r.value for name, r in readers.items() if r.done and r.error is None}
    s = snapshot
    s.nvml = _kept(s.nvml, got.get(NVML))
    s.kernel = _kept(s.kernel, got.get(KERNEL_LOG))
    s.ib_ports = _kept(s.ib_ports, got.get(IB))
    s.aer = _kept(s.aer, got.get(AER))
    s.pci_gpus = _kept(s.pci_gpus, got.get(PCI))
    s.occupancy = _kept(s.occupancy, got.get(PROCS))
    s.imex = _kept(s.imex, got.get(IMEX))
    s.activity = _kept(s.activity, got.get(ACTIVITY))
    s.host = _kept(s.host, got.get(HOST))


def _kept(filled: Any, reading: Any) -> Any:
    return filled if filled is not None else reading


def recording_time(snapshot: Snapshot, klog: Reader) -> bool:
    """Set a replay's time from its kernel log once the log is read; False while it is not."""
    if not klog.done:
        return False
    if klog.value is not None and klog.value.last_time is not None:
        snapshot.time = klog.value.last_time
    return True
