"""Read a file that someone other than root may have written, without trusting it.

gpuhc runs as root and reads files that unprivileged parties write: probe results from sweep
jobs, recorded kernel logs and scenarios attached to tickets, Slurm dumps pasted by a user. Any
of them may be a symlink to ``/dev/zero`` or to a secret, a FIFO that never ends, a 200 MB line,
or JSON nested 200,000 levels deep. The rules (docs/ARCHITECTURE.md, "Untrusted input"):

- open without following a final symlink (``O_NOFOLLOW``) and without blocking on a FIFO
  (``O_NONBLOCK``), then insist on a regular file (``fstat`` on the open descriptor, so the check
  and the read see the same inode);
- read at most a stated number of bytes; a larger file is refused, or its tail is taken where
  the caller says the tail is what matters (a kernel log is judged by its newest lines);
- parse JSON with a bounded nesting depth, checked before the decoder recurses.

Every refusal is an :class:`UntrustedInputError` that names the file and what is wrong with it,
so the caller can report that one input and carry on with the rest.
"""

from __future__ import annotations

import errno
import os
import stat

from gpuhc.errors import SourceError

MiB = 1024 * 1024


class UntrustedInputError(SourceError):
    """One untrusted input that was refused; the message names the file and the reason.
    ``errno_hint`` is the OS error when the file could not be opened at all (EACCES, EIO...),
    so a caller can tell "out of reach" from "not what it should be"; None otherwise."""

    def __init__(self, message: str, errno_hint: int | None = None):
        super().__init__(message)
        self.errno_hint = errno_hint


def open_regular(path: str, what: str = "file", dir_fd: int | None = None, shown: str | None = None) -> int:
    """An fd for ``path`` opened read-only, never through a final symlink, never blocking on a
    FIFO or device, and only if it is a regular file. With ``dir_fd``, ``path`` is a name in
    that directory (openat), so a directory checked once cannot be swapped before the read;
    ``shown`` is then the whole path for messages. The caller closes it."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        path = shown or path
        if e.errno == errno.ELOOP:
            raise UntrustedInputError(f"{what} {path}: is a symbolic link; refusing to follow it") from None
        raise UntrustedInputError(f"{what} {path}: cannot open: {e.strerror}", e.errno) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedInputError(f"{what} {shown or path}: not a regular file ({_kind(st.st_mode)})")
        # Back to blocking reads: O_NONBLOCK only had to get us past open() on a FIFO.
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_directory(path: str, what: str = "directory", dir_fd: int | None = None) -> int:
    """An fd for the directory ``path``, never through a final symlink (``O_NOFOLLOW`` with
    ``O_DIRECTORY``). Read the files in it by name with ``dir_fd=`` (openat): whoever can write
    the directory's parent may swap it for a link between a check and a read, but not under an
    fd already open (docs/security.md). The caller closes it; FileNotFoundError passes through."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UntrustedInputError(f"{what} {path}: not a directory (a symbolic link?); refusing to read it") from None
        raise UntrustedInputError(f"{what} {path}: cannot open: {e.strerror}", e.errno) from None


def read_bounded(path: str, limit: int, what: str = "file", dir_fd: int | None = None,
                 shown: str | None = None) -> bytes:
    """The whole of ``path`` if it is a regular file of at most ``limit`` bytes; otherwise an
    :class:`UntrustedInputError` naming the file and the limit. ``dir_fd`` and ``shown`` as in
    :func:`open_regular`."""
    fd = open_regular(path, what, dir_fd, shown)
    try:
        data = read_upto(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UntrustedInputError(f"{what} {shown or path}: larger than the {_size(limit)} limit")
    return data


def read_tail(path: str, limit: int, what: str = "file") -> tuple[bytes, bool]:
    """The last ``limit`` bytes of the regular file ``path`` (all of it when smaller), and whether
    anything before them was left out. A cut-off first line is dropped, so every line returned
    is whole."""
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        data = read_upto(fd, limit)
    finally:
        os.close(fd)
    if not start:
        return data, False
    nl = data.find(b"\n")
    return (data[nl + 1:] if nl >= 0 else b""), True


def load_json(data: bytes | str, source: str, max_depth: int = 64):
    """Decode JSON whose nesting is at most ``max_depth`` (a deeper document is refused before
    the decoder recurses into it). Errors name ``source``."""
    import json

    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UntrustedInputError(f"{source}: not UTF-8 (byte {e.start})") from None
    depth = json_depth(data)
    if depth > max_depth:
        raise UntrustedInputError(f"{source}: JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(data)
    except ValueError as e:
        raise UntrustedInputError(f"{source}: not valid JSON: {e}") from None
    except RecursionError:  # unreachable after the depth check; kept so no input can crash us
        raise UntrustedInputError(f"{source}: JSON nested too deeply") from None


def json_depth(text: str | bytes) -> int:
    """The deepest bracket nesting in ``text``, ignoring brackets inside strings. Everything but
    brackets and quotes is dropped by C-speed ``translate`` first (escapes before that, so an
    escaped quote cannot end a string), so only a few hundred thousand brackets are walked for
    a 30 MB, 10,000-node Slurm dump (about 0.2 s)."""
    import array
    import re
    from itertools import accumulate

    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\" in data:
        data = re.sub(rb"\\.", b"", data, flags=re.S)
    brackets = re.sub(rb'"[^"]*"', b"", data.translate(None, _NOT_STRUCTURE))
    if not brackets.strip(b'"'):
        return 0
    return max(0, max(accumulate(array.array("b", brackets.replace(b'"', b"").translate(_STEP)))))


_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))
_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def read_upto(fd: int, n: int, offset: int | None = None) -> bytes:
    """Up to ``n`` bytes from ``fd`` (at ``offset`` with pread, else from where it stands), in
    chunks of 1 MiB, stopping early at the end of the file."""
    chunks, left = [], n
    while left > 0:
        want = min(left, MiB)
        chunk = os.read(fd, want) if offset is None else os.pread(fd, want, offset + n - left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_output(stream, limit: int, deadline: float) -> tuple[bytes, str]:
    """A program's output read as files are here: at most ``limit`` bytes (one more is read to
    tell a full answer from a longer one) and nothing past ``deadline`` (``time.monotonic()``).
    Returns the bytes and why the read ended: ``"eof"``, ``"limit"`` (more was there) or
    ``"timeout"``. The caller decides what a cut answer is worth and ends the program."""
    import selectors
    import time

    out = bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while len(out) <= limit:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return bytes(out), "timeout"
            chunk = os.read(stream.fileno(), min(65536, limit + 1 - len(out)))
            if not chunk:
                return bytes(out), "eof"
            out += chunk
    return bytes(out), "limit"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n} bytes"
