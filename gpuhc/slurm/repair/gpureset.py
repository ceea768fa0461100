"""Run one command of the GPU reset procedure, and one NVML read, so that neither can hold the
run past its deadline: an argv list without a shell, in a process group of its own, under a
watchdog; an NVML read in a thread the run can leave behind.

Why a watchdog and not ``subprocess.run(timeout=)``: that kills the child and then waits for it,
and for its output pipe, with no limit. An ``nvidia-smi -r`` stuck in the driver (uninterruptible
sleep) is not reaped by SIGKILL, and a helper it started keeps the pipe open; the health check
then never returns and slurmd kills it at 60 s, before the services are started again.
Here the whole group is killed and given :data:`REAP_S` to go; a command still there is left
behind, said as stuck (the driver is wedged: the ladder's reboot rung is what helps).

An NVML call on a GPU throwing errors can block for tens of seconds (NVIDIA/DCGM#313 reports more
than 45 s); :func:`call_bounded` runs it in a daemon thread and stops waiting at its timeout.

The procedure itself (what holds the GPUs, what to stop, which GPUs reset together, the order)
is :mod:`gpuhc.slurm.repair.reset_plan` and :mod:`gpuhc.slurm.repair.reset_run`; the reset command is
``slurm.remediation.reset_command`` (default ``nvidia-smi -r -i {gpu}``, where ``{gpu}`` is one
GPU's index, or a comma-separated list where NVIDIA's rule resets GPUs together).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

from gpuhc.text.logtext import escape

OUTPUT_TAIL = 400  # characters of a command's output kept for the log
REAP_S = 2.0  # after SIGKILL to its group, how long a command gets to be gone before it is left behind

T = TypeVar("T")


@dataclass(frozen=True)
class ResetResult:
    ok: bool
    detail: str  # one printable line: what ran and how it ended
    output: str = ""  # its stdout, where the caller reads an answer (systemctl show)
    stuck: bool = False  # killed at its timeout and still not gone: left behind (a wedged driver)


class NvmlHung(Exception):
    """An NVML call did not answer within its bound; the thread running it was left behind."""


def run_argv(argv: list[str] | tuple[str, ...], timeout_s: float) -> ResetResult:
    """Run ``argv`` in a session of its own; ok when it exits 0 within ``timeout_s``. At the
    timeout the whole process group is killed; the call returns within ``timeout_s + 2 * REAP_S``
    whatever the command does. Never raises for the command's sake."""
    from gpuhc.files.fsutil import UnsafePath, trusted_which

    argv = list(argv)
    try:  # systemctl, nvidia-smi, the reset command: run as root only under the program rule
        real = (trusted_which(argv[0], argv[0]) or argv[0]) if argv else None
    except UnsafePath as e:
        return ResetResult(False, escape(f"{_show(argv)}: not run: {e}"))
    try:
        p = subprocess.Popen([real, *argv[1:]] if real else argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             shell=False, start_new_session=True)
    except OSError as e:
        return ResetResult(False, f"{_show(argv)}: {e.strerror or e}")
    try:
        out_b, err_b = p.communicate(timeout=max(0.0, timeout_s))
    except subprocess.TimeoutExpired:
        return _kill(p, argv, timeout_s)
    out = out_b.decode("utf-8", "replace")
    if p.returncode != 0:
        tail = (out + err_b.decode("utf-8", "replace")).strip()[-OUTPUT_TAIL:]
        return ResetResult(False, escape(f"{_show(argv)}: exit {p.returncode}: {tail}"), out)
    return ResetResult(True, f"{_show(argv)}: ok", out)


def _kill(p: subprocess.Popen, argv: list[str], timeout_s: float) -> ResetResult:
    try:
        os.killpg(p.pid, signal.SIGKILL)  # its own session: the group is the command and its helpers
    except OSError:
        pass
    try:
        p.communicate(timeout=REAP_S)  # reaped, and the pipes drained, or ...
        return ResetResult(False, f"{_show(argv)}: timed out after {timeout_s:.0f}s (killed)")
    except subprocess.TimeoutExpired:
        pass
    # ... still there (uninterruptible sleep in the driver) or its pipe held by a process that
    # left the group: stop waiting. The pipes are closed on our side; the child is not waited for.
    for f in (p.stdout, p.stderr):
        try:
            f.close()
        except OSError:
            pass
    p.returncode = p.poll() if p.poll() is not None else -signal.SIGKILL  # no ResourceWarning at exit
    return ResetResult(False, f"{_show(argv)}: timed out after {timeout_s:.0f}s and did not end when killed "
                       f"(stuck in the driver?): left behind", stuck=True)


def call_bounded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """``fn()`` if it returns within ``timeout_s``; else :class:`NvmlHung` (its thread, a daemon,
    is left behind: the caller's process must end with ``os._exit``, as a timed-out check does)."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name=f"gpuhc-bounded-{what}", daemon=True)
    t.start()
    t.join(max(0.0, timeout_s))
    if t.is_alive():
        raise NvmlHung(f"{what}: no answer within {timeout_s:.1f}s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def _show(argv: list[str]) -> str:
    return escape(" ".join(argv))
