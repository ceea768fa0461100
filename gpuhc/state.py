"""The per-node state store: one small JSON document, written atomically under a lock.

What lives here: kernel-log cursors, counter baselines for growth checks, IB downtime samples,
consecutive pass/fail counts for the drain policy. Losing it is survivable (growth checks
re-baseline) but corrupting it must never crash a health check, and two gpuhc processes at once
(a health check overlapping an epilog) must not lose each other's writes. Hence:

- an exclusive ``flock`` on a separate lock file around read-modify-write;
- write to a temporary file in the same directory, fsync, rename over the old one, fsync the
  directory: a crash leaves either the old or the new document, never half of one;
- a corrupt document is moved aside (``state.json.corrupt-<ns>``, a name never reused, the
  newest CORRUPT_KEEP copies kept), reported through :attr:`StateStore.problem`, and rebuilt
  from empty; one that is there but out of reach (permissions, I/O error) is left alone: the
  run judges without it and the write fails.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from typing import Any, Iterator

from gpuhc.errors import GpuhcError

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
CORRUPT_SUFFIX = ".corrupt-"  # + nanoseconds since the epoch; older copies are pruned
CORRUPT_KEEP = 5
MAX_STATE_BYTES = 16 * 1024 * 1024  # a real node's document is tens of KB (8 GPUs x 18 links of counters)
MAX_STATE_DEPTH = 32  # gpuhc's own documents nest at most 6 deep


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
        # As root the directory and every one above it must be root's alone: anyone who could
        # write there could plant state that decides drains (gpuhc.fsutil).
        from gpuhc.fsutil import UnsafePath, check_dir_chain, make_dirs

        try:
            make_dirs(self.dir, 0o700, "state directory")
            check_dir_chain(self.dir, "state directory")
        except UnsafePath as e:
            raise StateError(str(e)) from None
        except OSError as e:
            raise StateError(f"cannot create state directory {self.dir}: {e.strerror}") from None

    @contextlib.contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        lock_path = os.path.join(self.dir, LOCK_FILE)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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
        # Through the bounded reader (docs/security.md): a state file that is a FIFO, a link
        # (to /dev/zero, say) or hundreds of MB must not hang the health check past its
        # deadline or eat the node's memory. Such a file is treated as corrupt: set aside and
        # rebuilt (set aside = renamed, which moves a link or FIFO without opening it).
        from gpuhc.untrusted import UntrustedInputError, load_json, read_bounded

        try:
            data = read_bounded(self.path, MAX_STATE_BYTES, "state file")
            doc = load_json(data, f"state file {self.path}", MAX_STATE_DEPTH)
            if not isinstance(doc, dict):
                raise ValueError("top level is not an object")
            return doc
        except UntrustedInputError as e:
            if not os.path.lexists(self.path):
                return {}
            if e.errno_hint not in (None, errno.ENOENT):  # out of reach, not corrupt
                return self._unreachable(OSError(e.errno_hint, str(e)), repair)
            self._set_aside(e, repair)
            return {}
        except ValueError as e:  # not an object
            self._set_aside(e, repair)
            return {}

    def _unreachable(self, e: OSError, repair: bool) -> dict[str, Any]:
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
            aside = self._keep_aside()
            if aside:
                self.problem += f", old copy kept as {aside}"

    def _keep_aside(self) -> str | None:
        """Move the corrupt document to a name no other copy has (three corruptions in one
        second keep three copies, the first one too), then keep the newest CORRUPT_KEEP. Only a
        writer holding the exclusive lock gets here, so no other gpuhc picks the same name."""
        stamp = time.time_ns()
        while os.path.lexists(aside := f"{self.path}{CORRUPT_SUFFIX}{stamp}"):
            stamp += 1
        try:
            os.replace(self.path, aside)
        except OSError:
            return None
        self._prune_corrupt()
        return aside

    def _prune_corrupt(self) -> None:
        prefix = STATE_FILE + CORRUPT_SUFFIX
        copies = []
        with contextlib.suppress(OSError):
            for name in os.listdir(self.dir):
                stamp = name[len(prefix):]
                if name.startswith(prefix) and stamp.isdigit():
                    copies.append((int(stamp), name))
        for _, name in sorted(copies)[:-CORRUPT_KEEP]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, name))

    def _write(self, doc: dict[str, Any]) -> None:
        from gpuhc.fsutil import write_atomic

        try:
            data = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
            write_atomic(self.path, data.encode(), 0o600)  # (its directory was checked above)
        except OSError as e:
            raise StateError(f"cannot write state {self.path}: {e.strerror}") from None
