"""Start the live NVML read before gpuhc has parsed its command line, loaded its config and
imported its checks (docs/ARCHITECTURE.md, "Hot path").

The health check is a fresh process every few minutes. Its NVML read is mostly waiting on the
driver -- ``nvmlInit``, attaching each GPU, the field batches -- and ctypes lets go of the GIL
while it waits, so a read started in a thread at the top of ``main`` runs beside the imports,
the config and the state instead of after them.

The read is speculative: the thread guesses from argv and the environment what the run will
ask for (the stage, its GPUs, the clock samples), and :func:`adopt` hands its reading to
``build_sources`` only when it covers what the runner asks: the same sample interval, at least
as many samples, and every GPU asked for read in full. Anything else (a config that changes the
sampling, a replay, a command that reads no NVML) reads afresh or not at all; the early thread
then costs only its own time, beside the run. ``GPUHC_NVML_EARLY=0`` turns it off.

It never asks for the NVLink DL error counters (about 0.8 ms per link each): which links'
counters a run reads rotates with the nvlink check's state (gpuhc/checks/nvlink.py,
``dl_rotation``), which is not loaded yet. The adopter names the slice, and :meth:`_EarlyRead.read`
tops the reading up with it, one more field batch per GPU, while this thread still holds NVML
started (so that init only counts up); the thread lets NVML go once the top-up is done.

It sits at the top of the package, not in ``gpuhc.sources``, and imports nothing from gpuhc at
load, so that starting it costs no package import: the thread imports pynvml first, starts NVML
and attaches the GPUs (the slow part, without the GIL), and only then imports the reader. NVML
counts its initialisations, so the reader's own init and shutdown inside find it started.
"""

from __future__ import annotations

import _thread
import os
from typing import Any

_COMMANDS = {"check": None, "healthcheck": "passive", "prolog": "prolog", "epilog": "epilog"}
_REPLAY = ("--nvml-scenario", "--demo", "-h", "--help")
_INTERVAL_S = 0.02  # the source's default sample interval (gpuhc.sources.SourceSpec)

_early: "_EarlyRead | None" = None
_started = False
_lock = _thread.allocate_lock()  # (threading itself is imported only for a live read)


class _EarlyRead:
    def __init__(self, samples: int, gpus: list[int] | None):
        self.samples, self.interval = samples, _INTERVAL_S
        self.gpus = None if gpus is None else frozenset(gpus)
        self.value: Any = None
        self.error: BaseException | None = None
        self.dl: tuple[int, dict[int, int]] = (1, {})  # the slice the adopter asks for
        import threading

        self.done = threading.Event()
        self.released = threading.Event()  # the top-up is done (or the read was not adopted)
        threading.Thread(target=self._run, name="gpuhc-nvml-early", daemon=True).start()

    def _run(self) -> None:
        nv = None
        try:
            nv = _warm()
            from gpuhc.sources.nvml import NvmlLive

            self.value = NvmlLive(self.samples, self.interval, gpus=self._gpus(), dl_rotation=None).read()
        except BaseException as e:  # handed to whoever adopts the read, as a read error
            self.error = e
        finally:
            self.done.set()
            if nv is not None:
                # A process that never adopts the read ends with NVML held: nothing is lost.
                self.released.wait()
                try:
                    nv.nvmlShutdown()
                except Exception:
                    pass

    def _gpus(self) -> list[int] | None:
        return None if self.gpus is None else sorted(self.gpus)

    def covers(self, samples: int, interval: float, gpus: list[int] | None) -> bool:
        if interval != self.interval or samples > self.samples:
            return False
        return self.gpus is None or (gpus is not None and set(gpus) <= self.gpus)

    def read(self) -> Any:
        """The early reading with the adopter's DL slice added (once: the adopter reads once)."""
        self.done.wait()
        try:
            if self.error is not None:
                raise self.error
            from gpuhc.sources.nvml import NvmlLive

            return NvmlLive(self.samples, self.interval, gpus=self._gpus()).top_up(self.value, *self.dl)
        finally:
            self.released.set()


def _warm() -> Any:
    """Start NVML and attach every GPU; the module when NVML started, else None (the reader
    then says why, in its own words)."""
    from gpuhc.run.phases import mark

    mark("nvml_warm_start")
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception:
        return None
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            nv.nvmlDeviceGetHandleByIndex(i)
    except Exception:
        pass  # a GPU that cannot be attached is the reader's to report
    mark("nvml_warm")
    return nv


def start(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Start the early read when argv names a live run of a stage; at most once per process."""
    global _early, _started
    env = os.environ if env is None else env
    guess = _guess(argv, env)
    if guess is None or env.get("GPUHC_NVML_EARLY", "1") == "0":
        return
    with _lock:
        if not _started:
            _started = True
            _early = _EarlyRead(*guess)


def adopt(samples: int, interval: float, gpus: list[int] | None, dl_rotation: int = 1,
          dl_phases: dict[int, int] | None = None) -> _EarlyRead | None:
    """The early read, if there is one and it covers this request, to be topped up with the DL
    counters of that slice when read; it is handed out once."""
    global _early
    with _lock:
        early, _early = _early, None
    if early is None:
        return None
    if early.covers(samples, interval, gpus):
        early.dl = (dl_rotation, dict(dl_phases or {}))
        return early
    early.released.set()
    return None


def _guess(argv: list[str], env: dict[str, str]) -> tuple[int, list[int] | None] | None:
    """(clock samples, GPUs read in full) for a live stage run, or None."""
    if not argv or argv[0] not in _COMMANDS or any(a.split("=")[0] in _REPLAY for a in argv):
        return None
    stage = _COMMANDS[argv[0]] or _option(argv, "--stage") or "passive"
    gpus = None
    if argv[0] == "check":
        gpus = _indices(_option(argv, "--gpus"))
    elif stage in ("prolog", "epilog"):
        # Slurm's indices taken as NVML's for the guess alone: where they are not (MIG slices, a
        # gres.conf out of NVML's order: gpuhc/node/gpumap.py) the read covers other GPUs than the run
        # asks for, and the run reads its own (adopt() checks).
        for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
            if (env.get(var) or "").strip():
                gpus = _indices(env[var])
                break
    # Only the clocks check reads more than one sample, and the prolog does not run it.
    return (1 if stage == "prolog" else 3), gpus


def _option(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _indices(text: str | None) -> list[int] | None:
    """``0,1`` or ``0-3`` -> indices; anything else (UUIDs, typos) -> None: read every GPU."""
    if not text:
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            if lo == "":
                continue
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        return None
    return sorted(out) or None
