"""Parent side of the worker: start it, hand it one task at a time, enforce every deadline.

Why a child process: a CUDA kernel that never returns (a hung GPU, a wedged NVLink) blocks the
thread that waits on it inside the driver, and Python cannot interrupt that thread. A process
can be killed: the driver then tears down its contexts and frees its memory. So the parent only
ever waits on a pipe with a timeout, and on a timeout kills the worker's whole process group,
reports that task as timed out, and starts a fresh worker for the tasks still to run.

Protocol (JSON lines): the worker prints ``{"ev": "hello", ...}`` (what it can see), then for
each task line the parent writes (``{"task": .., "params": .., "devices": [..]}``) it prints
``start`` and then ``done`` (with ``data``) or ``fail`` (with ``kind`` and ``message``).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from gpuhc.active.plan import Task
from gpuhc.active.registry import TASK, needs_cupy

MAX_RESTARTS = 2
_EOF = object()


@dataclass
class Outcome:
    task: str
    status: str  # done | fail | timeout | skipped
    data: dict[str, Any] | None = None
    kind: str | None = None  # fail: oom, ecc, cuda, nccl, nccl-missing, cupy-missing, crash, internal
    message: str = ""
    seconds: float = 0.0
    pool_used: int | None = None  # CuPy pool bytes still in use after the task (should be 0)


# The worker runs as root: ``-I`` keeps the caller's working directory (where ``-m`` would look
# first), PYTHON* variables and the user site off its sys.path, so a gpuhc/ someone left where
# the run started is never imported (docs/security.md, "Root never runs code from where it
# stands"). The one place it imports gpuhc from is where this parent's own gpuhc came from.
_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from gpuhc.active.worker import main; sys.exit(main())"


def default_argv() -> list[str]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return [sys.executable, "-I", "-u", "-c", _BOOT, root]  # -u: -I ignores PYTHONUNBUFFERED


def worker_env(extra: dict[str, Any] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # CUDA's default order is "fastest first"; NVML and Slurm count in PCI order.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env["PYTHONUNBUFFERED"] = "1"
    env["GPUHC_PARENT_PID"] = str(os.getpid())  # the worker exits if this process is gone
    for k, v in (extra or {}).items():
        env[str(k)] = str(v)
    return env


class Worker:
    def __init__(self, argv: list[str], env: dict[str, str]):
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(  # argv list, no shell
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env, cwd="/",
            start_new_session=True,  # its own process group: a kill reaches any grandchild too
        )
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, name="gpuhc-worker-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue  # not protocol (a library printing): ignored
            if isinstance(ev, dict):
                self._q.put(ev)
        self._q.put(_EOF)

    def event(self, deadline: float):
        """Next protocol event, ``_EOF`` when the worker ended, None at the deadline."""
        try:
            return self._q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def send(self, obj: dict[str, Any]) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass  # stuck in the driver (uninterruptible): nothing more a process can do

    def close(self, timeout: float = 5.0) -> None:
        self.send({"task": "quit"})
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def stderr_tail(self, limit: int = 300) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return " ".join(" | ".join(lines[-3:]).split())[-limit:]


@dataclass
class Session:
    """What one run of tasks learnt: the worker's first hello and each task's outcome."""

    hello: dict[str, Any] | None = None
    start_error: str | None = None
    outcomes: dict[str, Outcome] | None = None


def run_tasks(
    tasks: list[Task],
    spawn: Callable[[], Worker],
    deadline: float,
    startup_timeout: float,
    choose: Callable[[dict], tuple[list[int], list[int]]],
    timeout_of: Callable[[Task, int], float | None],
    progress=None,
) -> Session:
    """Run ``tasks`` in order in as few workers as possible.

    ``choose(hello)`` returns (CUDA ordinals to test, CUDA ordinals for inventory tasks);
    ``timeout_of(task, ngpu)`` a configured timeout or None for the estimate-based one.
    """
    sess = Session(outcomes={})
    outcomes = sess.outcomes
    pending = list(tasks)
    restarts = 0
    while pending:
        if deadline - time.monotonic() < 1.0:
            for t in pending:
                outcomes[t.name] = Outcome(t.name, "skipped", message="not run: the stage budget is used up")
            break
        w = spawn()
        hello = w.event(min(deadline, time.monotonic() + startup_timeout))
        if not isinstance(hello, dict) or hello.get("ev") != "hello":
            why = ("did not start within %.0fs" % startup_timeout) if hello is None else "exited at start"
            w.kill()
            tail = w.stderr_tail()
            msg = f"GPU worker {why}" + (f": {tail}" if tail else "")
            if sess.hello is None:
                sess.start_error = msg
            for t in pending:
                outcomes[t.name] = Outcome(t.name, "fail", kind="crash", message=msg)
            break
        if sess.hello is None:
            sess.hello = hello
        test_devs, all_devs = choose(hello)
        restart = False
        while pending:
            t = pending.pop(0)
            decl = TASK.get(t.name)
            devs = all_devs if decl is not None and decl.node_wide else test_devs
            if needs_cupy(t.name) and not hello.get("cupy"):
                outcomes[t.name] = Outcome(t.name, "fail", kind="cupy-missing", message=hello.get("cupy_error") or "")
                continue
            if not devs:
                outcomes[t.name] = Outcome(t.name, "skipped", message="not run: no GPU to test")
                continue
            need = t.estimate_s(len(devs))
            remaining = deadline - time.monotonic()
            if remaining < need:
                outcomes[t.name] = Outcome(
                    t.name, "skipped",
                    message=f"not run: {max(0.0, remaining):.0f}s of the stage budget left, needs ~{need:.0f}s",
                )
                continue
            timeout = min(timeout_of(t, len(devs)) or t.timeout_s(len(devs)), remaining)
            if progress:
                progress.task_start(t.name, len(devs), timeout)
            t0 = time.monotonic()
            if not w.send({"task": t.name, "params": t.params, "devices": devs}):
                out = Outcome(t.name, "fail", kind="crash", message=f"GPU worker gone: {w.stderr_tail()}")
                restart = True
            else:
                out, restart = _await(w, t, t0 + timeout, timeout)
            out.seconds = round(time.monotonic() - t0, 3)
            outcomes[t.name] = out
            if progress:
                progress.task_end(t.name, out.status, out.seconds)
            if restart:
                break
        if not restart:
            w.close()
            break
        w.kill()
        restarts += 1
        if restarts > MAX_RESTARTS:
            for t in pending:
                outcomes[t.name] = Outcome(t.name, "skipped", message="not run: the GPU worker failed repeatedly")
            break
    return sess


def _await(w: Worker, t: Task, deadline: float, timeout: float) -> tuple[Outcome, bool]:
    """Wait for the task's end; returns (outcome, worker must be replaced)."""
    while True:
        ev = w.event(deadline)
        if ev is None:
            return Outcome(t.name, "timeout", message=f"timed out after {timeout:.0f}s"), True
        if ev is _EOF:
            try:  # stdout closes a moment before the exit status is there
                rc = w.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                rc = None
            return Outcome(t.name, "fail", kind="crash",
                           message=f"GPU worker died (exit {rc}): {w.stderr_tail()}".rstrip(": ")), True
        if ev.get("task") != t.name or ev.get("ev") not in ("done", "fail"):
            continue  # start/progress lines
        if ev["ev"] == "done":
            return Outcome(t.name, "done", data=ev.get("data") or {}, pool_used=ev.get("pool_used")), False
        kind = ev.get("kind") or "internal"
        out = Outcome(t.name, "fail", kind=kind, message=ev.get("message") or "", pool_used=ev.get("pool_used"))
        return out, bool(ev.get("restart"))
