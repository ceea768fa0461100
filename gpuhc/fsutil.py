"""Write a file whole or not at all.

State that decides drains, Prometheus textfiles that node_exporter may read at any moment,
sweep results gathered from many ranks, snapshots an admin attaches to a ticket: each must be
the old version or the new one, never half of one, also across a crash. Hence a temporary file
in the same directory (hidden, so a collector globbing ``*.prom`` never picks it up), fsync,
rename over the target, fsync the directory.
"""

from __future__ import annotations

import contextlib
import os


def write_atomic(path: str, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data``; the file gets exactly ``mode`` whatever the umask.
    Raises OSError (callers turn it into their own error, naming the file).

    ``durable=False`` skips the two fsyncs, for a file the next run rewrites anyway (metrics):
    readers still see the old file or the new one, and a crash may leave the old one or an
    empty one, never a torn one."""
    directory = os.path.dirname(os.path.abspath(path))
    # A fresh unguessable name opened with O_EXCL|O_NOFOLLOW: a link planted in the directory
    # is never followed (gpuhc writes as root, sometimes into directories other tools share).
    # Not tempfile.mkstemp: importing it costs the health check ~8 ms on every run.
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
