"""Progress of the active checks, for the person or the log watching.

On a terminal a rich spinner names the running task and its time limit; elsewhere (Slurm's
epilog log, a cron mail) one plain line per task start and end, on stderr so that ``--json``
output on stdout stays clean.
"""

from __future__ import annotations

import sys

LABELS = {
    "topology": "topology",
    "burnin": "burn-in",
    "hbm": "HBM bandwidth",
    "memtest": "memory patterns",
    "hostlink": "host link",
    "p2p": "peer-to-peer",
    "nccl": "local NCCL",
    "dcgm": "DCGM diagnostic",
}


class Progress:
    def __init__(self, enabled: bool, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._status = None
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.console import Console

                self._status = Console(file=self.stream).status("gpuhc active checks")
                self._status.start()
            except Exception:
                self._status = None

    def task_start(self, task: str, ngpu: int, timeout_s: float) -> None:
        if not self.enabled:
            return
        text = f"{LABELS.get(task, task)} on {ngpu} GPU{'s' if ngpu != 1 else ''} (up to {timeout_s:.0f}s)"
        if self._status is not None:
            self._status.update(f"gpuhc: {text}")
        else:
            print(f"gpuhc active: {text}", file=self.stream, flush=True)

    def task_end(self, task: str, status: str, seconds: float) -> None:
        if not self.enabled:
            return
        line = f"gpuhc active: {LABELS.get(task, task)} {status} in {seconds:.1f}s"
        if self._status is not None:
            self._status.console.log(line)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
