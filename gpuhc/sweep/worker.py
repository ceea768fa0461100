"""``gpuhc sweep run``: the job side. One rank per GPU, an all-reduce at every size, one file.

Launched by ``srun --mpi=pmi2`` (or ``mpiexec``) inside the probe job; runs unprivileged and only
writes its results. Everything it needs comes on its command line (see :class:`RunSpec`): the
compute nodes need not read the admin's config.

Normal path: every rank times every size, then rank 0 gathers the ranks' timings over MPI and
writes ``<results_dir>/<sweep>/<group>.json`` (or ``--out``) atomically, with per-rank and
per-node detail.

Hang path: a collective that does not finish within ``timeout_s`` (a dead peer, a hung link)
cannot be gathered over MPI any more, so each rank that notices writes what it measured to its
own ``<group>.rank<N>.json`` and leaves with exit code 3 (the launcher then ends the rest). Ranks
that write nothing are the hung ones; :func:`merge_partials` names them and their nodes
(``gpuhc sweep analyze`` merges a results directory's rank files; with ``--out``, where no
analyze comes, the survivors merge them into the ``--out`` file before leaving). The
mpi backend's blocking collectives are bounded by a watchdog thread; the nccl backend polls
and aborts its communicator itself, with the watchdog as a backstop for the init.

Test-only fault hook: ``GPUHC_SWEEP_FAULT`` makes chosen nodes misbehave, for the integration
tests and demos only (never set it in production):
``slow:<node>:<seconds>`` sleeps before every collective on that node's ranks,
``hang:<node>:<bytes>`` stops those ranks (SIGSTOP) at the first size of at least ``bytes``,
``corrupt:<node>`` adds 1 to one element those ranks contribute. Comma-separated, combinable.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field

from gpuhc.sweep.results import FORMAT, merge_partials
from gpuhc.sweep.stats import size_ladder
EXIT_TIMEOUT = 3


@dataclass
class RunSpec:
    sweep_id: str = "adhoc"
    group_id: str = "g0"
    nodes: list[str] = field(default_factory=list)  # the planned nodes (names silent ranks)
    results_dir: str | None = None
    out: str | None = None  # explicit output file instead of results_dir/<sweep>/<group>.json
    backend: str = "nccl"
    min_bytes: int = 8
    max_bytes: int = 2 << 30
    factor: int = 2
    warmup: int = 5
    iters: int = 20
    latency_iters: int = 100
    latency_max_bytes: int = 1 << 20
    timeout_s: float = 120.0


@dataclass
class Fault:
    slow_s: float = 0.0
    hang_bytes: int | None = None
    corrupt: bool = False


def parse_fault(text: str | None, node: str) -> Fault:
    """This node's part of ``GPUHC_SWEEP_FAULT`` (test-only)."""
    fault = Fault()
    for item in (text or "").split(","):
        parts = item.strip().split(":")
        if len(parts) < 2 or parts[1] != node:
            continue
        kind = parts[0]
        try:
            if kind == "slow" and len(parts) == 3:
                fault.slow_s = float(parts[2])
            elif kind == "hang" and len(parts) == 3:
                fault.hang_bytes = int(parts[2])
            elif kind == "corrupt":
                fault.corrupt = True
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"GPUHC_SWEEP_FAULT: cannot read {item!r} (slow:<node>:<s>, hang:<node>:<bytes>, corrupt:<node>)") from None
    return fault


class Watchdog:
    """Ends the rank after writing its partial results when a phase overruns its deadline."""

    def __init__(self, on_expire):
        self._on_expire = on_expire
        self._lock = threading.Lock()
        self._armed: tuple[int, float, float] | None = None  # (bytes, deadline, seconds)
        thread = threading.Thread(target=self._loop, name="gpuhc-sweep-watchdog", daemon=True)
        thread.start()

    def arm(self, nbytes: int, seconds: float) -> None:
        with self._lock:
            self._armed = (nbytes, time.monotonic() + seconds, seconds) if seconds > 0 else None

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def _loop(self) -> None:
        while True:
            time.sleep(0.1)
            with self._lock:
                armed = self._armed
            if armed and time.monotonic() > armed[1]:
                self._on_expire(armed[0], armed[2])
                return


class Recorder:
    """What this rank measured so far: enough to write a partial file at any moment."""

    def __init__(self, spec: RunSpec, rank: int, nranks: int, node: str, rank_nodes: list[str] | None):
        self.spec, self.rank, self.nranks, self.node = spec, rank, nranks, node
        self.rank_nodes = rank_nodes
        self.local_rank = 0
        self.sizes: list[dict] = []
        self.info: dict = {}
        self.errors: list[str] = []
        self.started = time.time()
        self._written = threading.Lock()

    def add(self, nbytes: int, iter_s: list[float] | None, mean_s: float, correct: bool) -> None:
        self.sizes.append({"bytes": nbytes, "iter_s": iter_s, "mean_s": mean_s, "correct": correct})

    def partial(self, timeout_bytes: int | None, seconds: float | None) -> dict:
        return {
            "format": FORMAT, "partial": True, "sweep_id": self.spec.sweep_id, "group_id": self.spec.group_id,
            "backend": self.spec.backend, "rank": self.rank, "nranks": self.nranks, "node": self.node,
            "local_rank": self.local_rank, "rank_nodes": self.rank_nodes, "planned_nodes": self.spec.nodes,
            "started": self.started, "info": self.info, "sizes_done": self.sizes, "errors": self.errors,
            "timeout": None if timeout_bytes is None else {"bytes": timeout_bytes, "seconds": seconds},
        }

    def write_partial(self, timeout_bytes: int | None, seconds: float | None) -> bool:
        """Once per rank, from whichever thread gets here first; True for that one."""
        if not self._written.acquire(blocking=False):
            return False
        from gpuhc.sweep.store import write_group_result, write_json_atomic

        doc = self.partial(timeout_bytes, seconds)
        if self.spec.out:
            write_json_atomic(partial_path(self.spec.out, self.rank), doc)
        elif self.spec.results_dir:
            write_group_result(self.spec.results_dir, self.spec.sweep_id, self.spec.group_id, doc, rank=self.rank)
        return True

    def give_up(self, timeout_bytes: int | None, seconds: float | None) -> None:
        """After a hang or a failed collective: write what this rank has and leave (exit 3).
        With ``--out`` (no ``analyze`` will ever merge those files), the survivors also merge
        the ranks' files into ``--out``. Called from the main thread or the watchdog; the
        second caller waits for the first to end the process."""
        if not self.write_partial(timeout_bytes, seconds):
            while True:
                time.sleep(3600)
        if self.spec.out:
            merge_out_after_timeout(self.spec, self.rank, self.nranks)
        leave(EXIT_TIMEOUT)


def partial_path(out: str, rank: int) -> str:
    base, ext = os.path.splitext(out)
    return f"{base}.rank{rank}{ext or '.json'}"


def out_grace_s(timeout_s: float) -> float:
    """How long survivors wait for each other's files: they hit the same deadline within the
    watchdog's slack (a second or so), so a few seconds cover it."""
    return min(10.0, max(2.0, timeout_s))


def merge_out_after_timeout(spec: RunSpec, rank: int, nranks: int, poll_s: float = 0.1) -> None:
    """Merge the surviving ranks' partial files into ``spec.out``.

    Every survivor waits until all ranks' files exist or the grace is over; by then the same
    files are there for all of them, and the lowest rank among those present merges (rank 0,
    unless it is the one that hung). The others wait for the merged file before leaving, so the
    launcher, which ends all ranks once one exits with an error, does not cut the merge short."""
    from gpuhc.sweep.results import BadResults, read_partial
    from gpuhc.sweep.store import SweepStoreError, write_json_atomic

    paths = [partial_path(spec.out, r) for r in range(nranks)]
    end = time.monotonic() + out_grace_s(spec.timeout_s)
    while time.monotonic() < end and not all(os.path.exists(p) for p in paths):
        time.sleep(poll_s)
    present = [r for r, p in enumerate(paths) if os.path.exists(p)]
    if present and present[0] == rank:
        try:
            parts = [read_partial(paths[r]) for r in present]
            result = merge_partials([p for p in parts if p])
            result["merged_from"] = [os.path.basename(paths[r]) for r in present]
            result["fault_hook"] = bool(os.environ.get("GPUHC_SWEEP_FAULT"))
            write_json_atomic(spec.out, result)
        except (SweepStoreError, BadResults, OSError, ValueError, KeyError) as e:
            print(f"gpuhc sweep run: could not merge the ranks' files into {spec.out}: {e}", file=sys.stderr)
        return
    end = time.monotonic() + out_grace_s(spec.timeout_s)
    while time.monotonic() < end and not os.path.exists(spec.out):
        time.sleep(poll_s)


def clear_out_files(spec: RunSpec, nranks: int) -> None:
    """Rank 0, before any rank can write: a stale ``--out`` or rank file from an earlier run
    must not be mistaken for this run's (nor merged into it)."""
    for path in [spec.out] + [partial_path(spec.out, r) for r in range(nranks)]:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            print(f"gpuhc sweep run: cannot remove stale {path}: {e.strerror}", file=sys.stderr)


def run(spec: RunSpec) -> int:
    """The rank's whole life. Returns the exit code (0: sweep complete, 3: hung or could not run)."""
    from mpi4py import MPI

    from gpuhc.sweep.backends import BACKENDS, BackendError, CollectiveTimeout

    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    rec = Recorder(spec, rank, nranks, node, None)

    dog = Watchdog(rec.give_up)
    dog.arm(0, spec.timeout_s)  # start-up (name exchange, NCCL init) is bounded too
    if spec.out and rank == 0:
        clear_out_files(spec, nranks)  # before the allgather: no other rank writes before it
    rec.rank_nodes = comm.allgather(node)
    rec.local_rank = rec.rank_nodes[:rank].count(node)
    fault = parse_fault(os.environ.get("GPUHC_SWEEP_FAULT"), node)
    sizes = size_ladder(spec.min_bytes, spec.max_bytes, spec.factor)
    try:
        backend = BACKENDS[spec.backend](comm, rec.local_rank, sizes[-1], corrupt=fault.corrupt,
                                         max_iters=spec.latency_iters)
        rec.info = backend.describe()
    except Exception as e:  # noqa: BLE001 - BackendError, or NCCL/CUDA refusing at init
        # Write our own file first: peers that did get a backend may be waiting in a collective
        # we never join, and then only the watchdog (still armed) ends this rank.
        rec.errors.append(str(e) if isinstance(e, BackendError) else f"backend start-up: {type(e).__name__}: {e}")
        rec.write_partial(None, None)
        return _finish(comm, rec, spec, dog)
    dog.disarm()
    for nbytes in sizes:
        if fault.hang_bytes is not None and nbytes >= fault.hang_bytes:
            os.kill(os.getpid(), signal.SIGSTOP)  # test-only: a rank that stops answering
        per_iter = nbytes <= spec.latency_max_bytes
        iters = spec.latency_iters if per_iter else spec.iters
        # The nccl backend enforces timeout_s itself; the watchdog is its backstop.
        dog.arm(nbytes, spec.timeout_s * (1.5 if spec.backend == "nccl" else 1.0) + 1.0)
        try:
            iter_s, mean_s = backend.measure(nbytes, spec.warmup, iters, per_iter, fault.slow_s, spec.timeout_s)
        except CollectiveTimeout:
            rec.give_up(nbytes, spec.timeout_s)
        except Exception as e:  # noqa: BLE001 - an NCCL/MPI error ends the sweep, reported as such
            rec.errors.append(f"at {nbytes} B: {type(e).__name__}: {e}")
            rec.give_up(nbytes, None)
        dog.disarm()
        rec.add(nbytes, iter_s, mean_s, backend.correct(nbytes))
    backend.close()
    return _finish(comm, rec, spec, dog)


def leave(code: int) -> None:
    """Exit now, without MPI_Finalize: after a hang, finalize would wait for the hung peer.
    The launcher sees this rank gone and ends the others."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _finish(comm, rec: Recorder, spec: RunSpec, dog: Watchdog) -> int:
    """Gather every rank's record to rank 0 and write the group's file (bounded by the dog)."""
    dog.arm(0, spec.timeout_s)  # 0: outside the size loop (start-up or this gather)
    parts = comm.gather(rec.partial(None, None), root=0)
    dog.disarm()
    if comm.Get_rank() != 0:
        return 0
    result = merge_partials(parts)
    result["duration_s"] = round(time.time() - rec.started, 3)
    result["fault_hook"] = bool(os.environ.get("GPUHC_SWEEP_FAULT"))
    from gpuhc.sweep.store import write_group_result, write_json_atomic

    if spec.out:
        write_json_atomic(spec.out, result)
    elif spec.results_dir:
        write_group_result(spec.results_dir, spec.sweep_id, spec.group_id, result)
    else:
        import json

        json.dump(result, sys.stdout, indent=1)
    return 0 if result["complete"] else EXIT_TIMEOUT
