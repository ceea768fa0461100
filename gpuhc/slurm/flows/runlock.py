"""One Slurm-flow run per node at a time: a node-local ``flock`` taken before a run asks Slurm
anything about its node, held until the run is done with Slurm.

Why: Slurm has no compare-and-set. Health checks that overlap on one failing node (a slow run
and the next interval's, or a prolog beside a health check) each read the node in service, each
count, each drain; and a run whose read came before another's drain counts that drain against
the breaker and reports it open. Twenty health checks at once sent 10 identical DRAINs, and ten
of them exited 4 with "circuit breaker open". With the lock, the second run waits its
turn, then starts from what the first one did and remembered (docs/slurm.md, "One run at a time").

Only the Slurm part is serialised, never the checks: a prolog does not wait for an epilog's
burn-in, only for another run's drain, and a healthy run of a node gpuhc does not hold takes no
lock at all (it asks Slurm nothing). The wait is bounded by the run's own deadline; a run that
cannot get its turn leaves Slurm to the run that holds it and says so. A lock that cannot be
made (an unsafe state directory, a full disk) is said and the run goes on without it: the lock
is bookkeeping, never a reason to leave a failing node alone.

The file is ``slurm.lock`` in the state directory, which is root's alone (gpuhc.files.fsutil, the state
store's rules); it is opened without following a link and never written. The lock belongs to
the process: a second flow in the same process (a test, the remediation ladder after the
health check's decision) already holds it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from typing import Callable

from gpuhc.model.deadline import Deadline

LOCK_FILE = "slurm.lock"
POLL_S = 0.05
# Kept free of the wait, for what the run does once it has its turn (a read, perhaps a drain
# and its check; the actuator cuts its own waits to what is left).
RESERVE_S = 5.0

_held: dict[str, int] = {}  # lock path -> fd, for the life of this process's turn


class Turn:
    """What :func:`take` found: ``ok`` (go on), ``waited`` (another run acted first)."""

    def __init__(self, ok: bool, waited: bool = False, problem: str | None = None):
        self.ok, self.waited, self.problem = ok, waited, problem


def take(state_dir: str, deadline: Deadline, log: Callable[..., None]) -> Turn:
    """Wait for this node's turn until the run's ``deadline`` less :data:`RESERVE_S`."""
    path = os.path.join(state_dir, LOCK_FILE)
    if path in _held:
        return Turn(True)
    try:
        fd = _open(state_dir, path)
    except Exception as e:  # never a reason not to act: said, and the run goes on unlocked
        log(f"run lock {path} not taken ({e}): going on without it", loud=True)
        return Turn(True, problem=str(e))
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                log(f"run lock {path} not taken ({e.strerror}): going on without it", loud=True)
                return Turn(True, problem=e.strerror)
        if deadline.left(keep=RESERVE_S) < POLL_S:
            os.close(fd)
            log("another gpuhc run is acting on this node and did not finish in time: leaving Slurm to it",
                loud=True)
            return Turn(False, waited=True)
        if not waited:
            waited = True
            log("another gpuhc run is acting on this node: waiting for its turn")
        time.sleep(POLL_S)
    _held[path] = fd
    return Turn(True, waited=waited)


def release(state_dir: str | None = None) -> None:
    """Let the next run have its turn (all of this process's, without ``state_dir``). Leaving
    the process releases it too."""
    for path in [p for p in _held if state_dir is None or p == os.path.join(state_dir, LOCK_FILE)]:
        os.close(_held.pop(path))


def _open(state_dir: str, path: str) -> int:
    from gpuhc.files.fsutil import check_dir_chain, make_dirs

    make_dirs(state_dir, 0o700, "state directory")
    check_dir_chain(state_dir, "state directory")
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or mislead: refused
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file")
    return fd
