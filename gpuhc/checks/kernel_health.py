"""kernel-health: the kernel's words about its own state (docs/checks.md, "kernel-health"), from
the kernel log (gpuhc/sources/kernel_log_storage.py). Each WARNs once, on the run that first
sees it; none drains by itself:

- a soft lockup (``kernel/watchdog.c``): a CPU ran kernel code without scheduling for over
  ``watchdog_thresh`` * 2 s. Often a driver's long loop under load, sometimes the first sign of
  a hang; the hung-task and host checks judge what stays stuck.
- a kernel panic in the log: a log that holds one is the previous boot's (the journal's, or
  pstore's), as the panicking kernel never ran on. Its reason says whether the hardware caused it
  (a machine check, an NMI, a firmware-first hardware error: class ``panic-hardware``) or
  software did (``panic``): a person reads the first; the machine-check check fails the node on
  the uncorrected error itself where the log holds it.
- ``VFS: file-max limit N reached``: the node ran out of open files (``fs.file-max``); jobs fail
  to open files until processes close some.
"""

from __future__ import annotations

from gpuhc.checks.base import CheckOutput, Context, result
from gpuhc.checks.kernel_window import kernel_log_check, open_window, warn_once
from gpuhc.model.kernel import EventKind, KernelEvent
from gpuhc.model.result import Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "kernel-health"
_WHAT = {"soft_lockup": "soft lockup", "panic": "kernel panic (a previous boot's)", "file_max": "file-max limit reached"}


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    win = open_window(snapshot, ctx, ID)
    if isinstance(win, CheckOutput):
        return win
    seen: dict[tuple[str, int], list[KernelEvent]] = {}
    for ev, new in win.events((EventKind.HOST_KERNEL,)):
        if new and ev.state in _WHAT:
            seen.setdefault((ev.state, int(ev.state == "panic" and bool(ev.code))), []).append(ev)
    results: list[Result] = [_warn(state, bool(hw), evs) for (state, hw), evs in sorted(seen.items())]
    if not results:
        results.append(result(ID, Status.PASS, "no soft lockup, panic or file-max limit in the kernel log"))
    return CheckOutput(results, state=win.state([]))


def _warn(state: str, hardware: bool, evs: list[KernelEvent]) -> Result:
    text = _WHAT[state] + (" caused by the hardware" if hardware else "")
    return warn_once(ID, "node", text, evs, state, "panic-hardware" if hardware else "kernel-health")


CHECKS = [kernel_log_check(
    ID, judge, "The kernel's own state: soft lockups, a previous boot's panic and the file-max limit warn.",
    ("passive", "epilog", "bootstrap"), held=False)]
