"""A small JSON document on local disk, read-modify-written under a lock: the node's state
(:mod:`gpuhc.state.node`) and the sweep index (:mod:`gpuhc.sweep.store`) are each one of these.

Losing the document is survivable, corrupting it must never crash its reader, and two gpuhc
processes at once (a health check overlapping an epilog; two ``sweep analyze``) must not lose
each other's writes. Hence:

- an exclusive ``flock`` on a separate lock file around read-modify-write (shared for a read);
- write to a temporary file in the same directory, fsync, rename over the old one, fsync the
  directory (:func:`gpuhc.files.fsutil.write_atomic`): a crash leaves the old or the new document,
  never half of one. A transaction that changed only what the next run rewrites anyway (the
  state's ``last_run``) says so (:meth:`LockedJson.lightly`) and skips the two fsyncs: the health
  check runs every few minutes, and a disk flush a run for a time stamp is a cost paid for
  nothing;
- read through the bounded reader (:mod:`gpuhc.files.untrusted`): a FIFO, a link (to ``/dev/zero``,
  say), a huge or a deeply nested file must not hang the reader or eat the node's memory;
- a corrupt document is moved aside (``<file>.corrupt-<ns>``, a name never reused, the newest
  :data:`CORRUPT_KEEP` copies kept), reported through :attr:`LockedJson.problem`, and rebuilt
  from empty; one that is there but out of reach (permissions, I/O error) is left alone: the
  caller goes on without it and the write fails;
- as root, the directory and every one above it must be root's alone (:mod:`gpuhc.files.fsutil`):
  whoever could write there could plant the document.
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

CORRUPT_SUFFIX = ".corrupt-"  # + nanoseconds since the epoch; older copies are pruned
CORRUPT_KEEP = 5


class JsonStoreError(GpuhcError):
    pass


class LockedJson:
    """``directory/file``, locked through ``directory/lock_file``; errors are ``error`` (a
    :class:`JsonStoreError` unless the owner names its own) and name the document as ``what``."""

    def __init__(self, directory: str, file: str, lock_file: str, *, what: str, max_bytes: int, max_depth: int,
                 lock_timeout_s: float = 5.0, error: type[GpuhcError] = JsonStoreError):
        self.dir, self.file, self.lock_file, self.what = directory, file, lock_file, what
        self.path = os.path.join(directory, file)
        self.max_bytes, self.max_depth, self.lock_timeout_s, self.error = max_bytes, max_depth, lock_timeout_s, error
        self.problem: str | None = None  # set when a corrupt document was rebuilt
        self._light = False  # this transaction's changes need no fsync (lightly())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[dict[str, Any]]:
        """Yield the document; write it back atomically if the block ends without an exception."""
        self._ensure_dir()
        with self._locked():
            self._light = False
            doc = self._read()
            yield doc
            self._write(doc, durable=not self._light)

    def lightly(self) -> None:
        """Inside a transaction: its changes are ones a crash may lose (the next run writes them
        again), so the write skips the fsyncs. Readers still see the old or the new document,
        whole; a crash may keep the old one."""
        self._light = True

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
        # write there could plant a document that decides drains (gpuhc.files.fsutil).
        from gpuhc.files.fsutil import UnsafePath, check_dir_chain, make_dirs

        try:
            make_dirs(self.dir, 0o700, f"{self.what} directory")
            check_dir_chain(self.dir, f"{self.what} directory")
        except UnsafePath as e:
            raise self.error(str(e)) from None
        except OSError as e:
            raise self.error(f"cannot create {self.what} directory {self.dir}: {e.strerror}") from None

    @contextlib.contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        lock_path = os.path.join(self.dir, self.lock_file)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise self.error(f"cannot open lock file {lock_path}: {e.strerror}") from None
        try:
            deadline = time.monotonic() + self.lock_timeout_s
            mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
            while True:
                try:
                    fcntl.flock(fd, mode)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                        raise self.error(
                            f"{self.what} {self.path} is locked by another gpuhc process for over {self.lock_timeout_s:.0f} s"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _read(self, repair: bool = True) -> dict[str, Any]:
        # Through the bounded reader (docs/security.md): a file that is a FIFO, a link (to
        # /dev/zero, say) or hundreds of MB must not hang the health check past its deadline
        # or eat the node's memory. Such a file is treated as corrupt: set aside and rebuilt
        # (set aside = renamed, which moves a link or FIFO without opening it).
        from gpuhc.files.untrusted import UntrustedInputError, load_json, read_bounded

        try:
            data = read_bounded(self.path, self.max_bytes, f"{self.what} file")
            doc = load_json(data, f"{self.what} file {self.path}", self.max_depth)
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
        self.problem = f"{self.what} file {self.path} unreadable ({e.strerror or e}); judged without it"
        if repair:
            raise self.error(f"cannot read {self.what} {self.path}: {e.strerror or e}") from None
        return {}

    def _set_aside(self, e: Exception, repair: bool) -> None:
        """A corrupt document: report it and, when about to write, keep it aside for a person."""
        self.problem = f"{self.what} file {self.path} was unreadable ({e}); rebuilt from empty"
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
        prefix = self.file + CORRUPT_SUFFIX
        copies = []
        with contextlib.suppress(OSError):
            for name in os.listdir(self.dir):
                stamp = name[len(prefix):]
                if name.startswith(prefix) and stamp.isdigit():
                    copies.append((int(stamp), name))
        for _, name in sorted(copies)[:-CORRUPT_KEEP]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.dir, name))

    def _write(self, doc: dict[str, Any], durable: bool = True) -> None:
        from gpuhc.files.fsutil import write_atomic

        try:
            data = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
            write_atomic(self.path, data.encode(), 0o600, durable=durable)  # (its directory was checked above)
        except OSError as e:
            raise self.error(f"cannot write {self.what} {self.path}: {e.strerror}") from None
