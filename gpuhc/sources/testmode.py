"""Site test mode: a node replays a scenario an admin put in place, as if it were its own.

``sources.test_scenario`` (README, "Try it under Slurm without GPUs") differs from a replay in
two ways, both because the node is then judged under real Slurm for hours or days:

- Times. The shipped fault scenarios carry the times they were written (2025): judged at the
  real clock, their Xid lies far outside any window, and once an admin acknowledges it the
  node passes as "no Xid in the last 24 h". Here the scenario's latest moment is moved to the
  moment the scenario was put in place (the newer of the modification and change times of the
  named path, the link itself when it is one: ``cp``, ``ln -sfn`` or ``touch`` set it), and every
  other time keeps its distance to it. Each run then sees the same events at the same times,
  as a real node's log would: a drain is held for the window, an acknowledgement or reboot ends
  it, and placing the scenario again makes its events happen again. (Moving them to each run's
  "now" would make every run a new incident.)
- Trust. The scenario decides whether root drains the node, so it is read only under the one
  rule for files root treats as evidence (:func:`gpuhc.files.fsutil.check_trusted_file`): root's,
  writable by nobody else, in directories only root can change, every link on the way root's
  too. A user's file in a world-writable directory is refused, link or not. An admin
  swaps scenarios with a root-owned link; the file it resolves to is read, never the link again.

A scenario named on the command line (``--nvml-scenario``) replaces the test scenario, and a
kernel log named there or in ``sources.kernel_log`` replaces its log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from gpuhc.errors import SourceError
from gpuhc.files.fsutil import UnsafePath, check_trusted_file
from gpuhc.text.limits import RELATIVE_LIMIT


def resolve(path: str) -> tuple[str, float]:
    """(the real path to read, the moment the scenario was placed). Raises SourceError naming
    the path when root must not follow it."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise SourceError(f"sources.test_scenario: {path}: {e.strerror or e}") from None
    placed = max(st.st_mtime, st.st_ctime)
    try:
        real = check_trusted_file(path, f"the test scenario {path}")
    except UnsafePath as e:
        raise SourceError(f"sources.test_scenario: {e}") from None
    return real, placed


def shift_log(log: Any, placed: float) -> Any:
    """``log`` (a KernelLog) with its wall-clock times moved so its latest is ``placed``.

    Lines stamped in seconds since boot (a recorded plain ``dmesg``) keep their times: they are
    judged against the log's own last line (gpuhc/checks/kernel_window.py), whenever that was."""
    times = [t for t in (log.last_time, *(e.time for e in log.events)) if t is not None and t >= RELATIVE_LIMIT]
    if not times:
        return log
    delta = placed - max(times)
    log.events = [replace(ev, time=ev.time + delta) if ev.time is not None and ev.time >= RELATIVE_LIMIT else ev
                  for ev in log.events]
    if log.last_time is not None and log.last_time >= RELATIVE_LIMIT:
        log.last_time += delta
    if log.covered_from is not None and log.covered_from >= RELATIVE_LIMIT:
        log.covered_from += delta
    return log


@dataclass
class PlacedLog:
    """The scenario's kernel log with its times moved to when the scenario was placed."""

    recorded: Any  # a KernelLogSource
    placed: float

    @property
    def in_memory(self) -> bool:
        """Read inline when the scenario's log is (gpuhc/run/read.py)."""
        return getattr(self.recorded, "in_memory", False) is True

    def read(self) -> Any:
        return shift_log(self.recorded.read(), self.placed)
