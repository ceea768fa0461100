"""Run the configured GPU reset command: ``slurm.remediation.reset_command``, default
``nvidia-smi -r -i {gpu}``, once per GPU, as an argv list without a shell, each with a timeout.

The caller (:mod:`gpuhc.slurm.remediate`) has made sure that no job runs on the node and no
process holds its GPUs: ``nvidia-smi -r`` refuses a GPU in use, but a site's own command may
not. The command's output is kept to its tail and escaped, because it goes into the log.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from gpuhc.logtext import escape

OUTPUT_TAIL = 400  # characters of the command's output kept for the log


@dataclass(frozen=True)
class ResetResult:
    ok: bool
    detail: str  # one printable line: what ran and how it ended


def argv_for(template: list[str], gpu: int) -> list[str]:
    return [part.replace("{gpu}", str(gpu)) for part in template]


def reset_gpus(template: list[str], gpus: tuple[int, ...], timeout_s: float) -> ResetResult:
    """Reset each GPU in turn; stop at the first failure (a GPU that will not reset needs the
    reboot, and the others stay as they were)."""
    done = []
    for gpu in gpus:
        argv = argv_for(template, gpu)
        try:
            cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
                                check=False, shell=False)
        except subprocess.TimeoutExpired:
            return ResetResult(False, f"{_show(argv)}: timed out after {timeout_s:.0f}s")
        except OSError as e:
            return ResetResult(False, f"{_show(argv)}: {e.strerror or e}")
        if cp.returncode != 0:
            tail = (cp.stdout + cp.stderr).decode("utf-8", "replace").strip()[-OUTPUT_TAIL:]
            return ResetResult(False, escape(f"{_show(argv)}: exit {cp.returncode}: {tail}"))
        done.append(gpu)
    return ResetResult(True, f"reset gpu{','.join(map(str, done))} ({_show(argv_for(template, gpus[0]))})"
                       if gpus else "no GPU to reset")


def _show(argv: list[str]) -> str:
    return escape(" ".join(argv))
