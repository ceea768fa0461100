"""The per-node state store: one small JSON document, written atomically under a lock.

What lives here: kernel-log cursors, counter baselines for growth checks, IB downtime samples,
consecutive pass/fail counts for the drain policy. Losing it is survivable (growth checks
re-baseline) but corrupting it must never crash a health check, and two gpuhc processes at once
(a health check overlapping an epilog) must not lose each other's writes. Hence:

- an exclusive ``flock`` on a separate lock file around read-modify-write;
- write to a temporary file in the same directory, fsync, rename over the old one, fsync the
  directory: a crash leaves either the old or the new document, never half of one;
- a corrupt document is moved aside (``state.json.corrupt-<time>``), reported through
  :attr:`StateStore.problem`, and rebuilt from empty; one that is there but out of reach
  (permissions, I/O error) is left alone: the run judges without it and the write fails.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from typing import Any, Iterator

from gpuhc.errors import GpuhcError

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"


class StateError(GpuhcError):
    pass


def default_state_dir(configured: str | None = None) -> str:
    from gpuhc.config import DEFAULT_STATE_DIR

    return os.environ.get("GPUHC_STATE_DIR") or configured or DEFAULT_STATE_DIR


class StateStore:
    def __init__(self, directory: str, lock_timeout_s: float = 5.0):
        self.dir = directory
        self.path = os.path.join(directory, STATE_FILE)
        self.lock_timeout_s = lock_timeout_s
        self.problem: str | None = None  # set when a corrupt document was rebuilt

    @contextlib.contextmanager
    def transaction(self) -> Iterator[dict[str, Any]]:
        """Yield the document; write it back atomically if the block ends without an exception."""
        self._ensure_dir()
        with self._locked():
            doc = self._read()
            yield doc
            self._write(doc)

    def read(self) -> dict[str, Any]:
        """A consistent copy of the document (shared lock), for read-only callers."""
        if not os.path.lexists(self.path):
            return {}
        self._ensure_dir()
        with self._locked(shared=True):
            return self._read(repair=False)

    # ------------------------------------------------------------------ internals

    def _ensure_dir(self) -> None:
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
        except OSError as e:
            raise StateError(f"cannot create state directory {self.dir}: {e.strerror}") from None
        if os.geteuid() == 0:
            st = os.stat(self.dir)
            if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise StateError(
                    f"refusing state directory {self.dir}: it must be owned by root and not writable by "
                    "group or others (someone could plant state that decides drains)"
                )

    @contextlib.contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        lock_path = os.path.join(self.dir, LOCK_FILE)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise StateError(f"cannot open lock file {lock_path}: {e.strerror}") from None
        try:
            deadline = time.monotonic() + self.lock_timeout_s
            mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
            while True:
                try:
                    fcntl.flock(fd, mode)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                        raise StateError(
                            f"state {self.path} is locked by another gpuhc process for over {self.lock_timeout_s:.0f} s"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _read(self, repair: bool = True) -> dict[str, Any]:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            if not isinstance(doc, dict):
                raise ValueError("top level is not an object")
            return doc
        except FileNotFoundError:
            return {}
        except (IsADirectoryError, ValueError, RecursionError) as e:  # bad JSON or UTF-8, not an object
            self._set_aside(e, repair)
            return {}
        except OSError as e:
            # The file may be perfectly good and only out of reach (permissions, EIO): moving it
            # aside would lose the node's memory (held Xids, drain counts). Judge without it, and
            # let the write fail loudly rather than overwrite it.
            self.problem = f"state file {self.path} unreadable ({e.strerror or e}); judged without it"
            if repair:
                raise StateError(f"cannot read state {self.path}: {e.strerror or e}") from None
            return {}

    def _set_aside(self, e: Exception, repair: bool) -> None:
        """A corrupt document: report it and, when about to write, keep it aside for a person."""
        self.problem = f"state file {self.path} was unreadable ({e}); rebuilt from empty"
        if repair:
            aside = f"{self.path}.corrupt-{int(time.time())}"
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
                self.problem += f", old copy kept as {aside}"

    def _write(self, doc: dict[str, Any]) -> None:
        from gpuhc.fsutil import write_atomic

        try:
            data = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
            write_atomic(self.path, data.encode(), 0o600)
        except OSError as e:
            raise StateError(f"cannot write state {self.path}: {e.strerror}") from None
