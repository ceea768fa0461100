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
- Links. An admin swaps scenarios with a symbolic link. Root follows it only when the link is
  root's in a directory chain only root can change (:func:`gpuhc.fsutil.check_dir_chain`), and
  then reads the file it resolves to under the same rule, never through a link again.

A scenario named on the command line (``--nvml-scenario``) replaces the test scenario, and a
kernel log named there or in ``sources.kernel_log`` replaces its log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from gpuhc.errors import SourceError
from gpuhc.fsutil import UnsafePath, check_dir_chain, check_trusted_file
from gpuhc.limits import RELATIVE_LIMIT


def resolve(path: str) -> tuple[str, float]:
    """(the real path to read, the moment the scenario was placed). Raises SourceError naming
    the path when root must not follow it."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise SourceError(f"sources.test_scenario: {path}: {e.strerror or e}") from None
    placed = max(st.st_mtime, st.st_ctime)
    if not os.path.islink(path):
        return path, placed
    real = os.path.realpath(path)
    try:
        if os.geteuid() == 0 and st.st_uid != 0:
            raise UnsafePath(f"refusing the test scenario: the link {path} is owned by uid {st.st_uid}, not root")
        check_dir_chain(os.path.dirname(os.path.abspath(path)), "the test scenario's link", leaf="sticky")
        check_trusted_file(real, f"the test scenario {real} (linked from {path})")
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

    def read(self) -> Any:
        return shift_log(self.recorded.read(), self.placed)
