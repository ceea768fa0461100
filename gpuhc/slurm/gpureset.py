"""Run one command of the GPU reset procedure: an argv list without a shell, with a timeout,
its output kept to an escaped tail for the log.

The procedure itself (what holds the GPUs, what to stop, which GPUs reset together, the order)
is :mod:`gpuhc.slurm.reset_plan` and :mod:`gpuhc.slurm.reset_run`; the reset command is
``slurm.remediation.reset_command`` (default ``nvidia-smi -r -i {gpu}``, where ``{gpu}`` is one
GPU's index, or a comma-separated list where NVIDIA's rule resets GPUs together).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from gpuhc.logtext import escape

OUTPUT_TAIL = 400  # characters of a command's output kept for the log


@dataclass(frozen=True)
class ResetResult:
    ok: bool
    detail: str  # one printable line: what ran and how it ended
    output: str = ""  # its stdout, where the caller reads an answer (systemctl show)


def run_argv(argv: list[str] | tuple[str, ...], timeout_s: float) -> ResetResult:
    """Run ``argv``; ok when it exits 0 within ``timeout_s``. Never raises for the command's sake."""
    from gpuhc.fsutil import UnsafePath, trusted_which

    argv = list(argv)
    try:  # systemctl, nvidia-smi, the reset command: run as root only under the program rule
        real = (trusted_which(argv[0], argv[0]) or argv[0]) if argv else None
    except UnsafePath as e:
        return ResetResult(False, escape(f"{_show(argv)}: not run: {e}"))
    try:
        cp = subprocess.run([real, *argv[1:]] if real else argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
                            check=False, shell=False)
    except subprocess.TimeoutExpired:
        return ResetResult(False, f"{_show(argv)}: timed out after {timeout_s:.0f}s")
    except OSError as e:
        return ResetResult(False, f"{_show(argv)}: {e.strerror or e}")
    out = cp.stdout.decode("utf-8", "replace")
    if cp.returncode != 0:
        tail = (out + cp.stderr.decode("utf-8", "replace")).strip()[-OUTPUT_TAIL:]
        return ResetResult(False, escape(f"{_show(argv)}: exit {cp.returncode}: {tail}"), out)
    return ResetResult(True, f"{_show(argv)}: ok", out)


def _show(argv: list[str]) -> str:
    return escape(" ".join(argv))
