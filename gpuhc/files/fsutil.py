"""Every file gpuhc writes as root goes through here: safe from planted links, and whole.

gpuhc runs as root and writes into directories an admin configured (the event log, the
Prometheus textfile, the state, ``slurm.log_file``, post-mortem bundles, snapshots, baselines).
If anyone else can change what a path there leads to, root can be made to write through their
link into any file on the node (docs/ARCHITECTURE.md, "Writing as root"). So, as root:

- the directory written into, and every directory above it, must be owned by root and not
  writable by group or others. A sticky directory (``/tmp``) is fine *above* the target, since
  nobody can rename what root made there; the target directory itself must be root's alone,
  except for a whole-file replace (below), which nothing planted in the directory can redirect;
- a file appended to is opened with ``O_NOFOLLOW`` (a planted or dangling link is refused, never
  followed nor created through) and must be a regular file with one link;
- a whole file is written to a fresh hidden name opened ``O_EXCL|O_NOFOLLOW``, fsynced and
  renamed over the target (``rename`` replaces a planted link, it never follows it), so a reader
  (node_exporter, the next run) sees the old version or the new one, never half of one;
- directories gpuhc makes for itself get a stated mode whatever the umask.

A user running gpuhc on their own behalf may write where they like: the ownership rules apply
to root only. Refusals are :class:`UnsafePath` (a :class:`~gpuhc.errors.GpuhcError`) naming
the path; I/O failures stay ``OSError`` for the caller to name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Iterator

from gpuhc.errors import GpuhcError


class UnsafePath(GpuhcError):
    """A place root must not write to (or trust): someone else could change what it leads to."""


def check_root_owned(path: str, what: str, sticky_ok: bool = False) -> None:
    """As root, refuse ``path`` unless root owns it and neither group nor others can write it
    (``sticky_ok``: a sticky directory such as /tmp is allowed to be writable)."""
    if os.geteuid() != 0:
        return
    try:
        st = os.stat(path)
    except OSError as e:
        raise UnsafePath(f"refusing {what}: cannot stat {path}: {e.strerror}") from None
    if st.st_uid != 0:
        raise UnsafePath(f"refusing {what}: {path} is owned by uid {st.st_uid}, not root")
    sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_ok and sticky):
        raise UnsafePath(f"refusing {what}: {path} is writable by group or others (chmod go-w)")


def check_dir_chain(directory: str, what: str, leaf: str = "private") -> None:
    """As root, refuse ``directory`` if it or any directory above it could be changed by someone
    other than root. ``leaf``: ``"private"`` (root's alone), ``"sticky"`` (a sticky shared
    directory is fine: reading a root-owned file from /tmp), ``"any"`` (only the directories
    above are checked: a whole-file replace cannot be redirected from inside the directory).

    Both the path as written and the path it resolves to are checked, so a link in the chain
    counts only if its own directory is root's too."""
    if os.geteuid() != 0:
        return
    given = os.path.abspath(directory)
    real = os.path.realpath(given)
    if leaf != "any":
        check_root_owned(real, what, sticky_ok=leaf == "sticky")
    seen = {real}
    for start in (real, given):
        parent = os.path.dirname(start)
        while parent not in seen:
            seen.add(parent)
            check_root_owned(parent, f"{what} (in {parent}, a directory above it)", sticky_ok=True)
            parent = os.path.dirname(parent)


def check_trusted_file(path: str, what: str) -> str:
    """The one rule for a file root treats as evidence or config (a config, a baseline, a test
    scenario, an event log a lemon count reads, a hook; docs/security.md "Acting safely"). As
    root, refuse it if someone else could have written or swapped it: the file (a regular one),
    its directory and every directory above it must be root's and writable by nobody else, and
    every link on the way is root's, in such a directory, and leads only through such places
    (a link a user placed in sticky /tmp is refused, whatever it points to). A sticky directory
    (/tmp) may hold the file or a link: nobody else can rename a root-owned entry there.
    Returns the real path to open (the given path when not root)."""
    if os.geteuid() != 0:
        return path
    real = _resolve_trusted(path, what, 0)
    check_root_owned(real, what)
    try:
        regular = stat.S_ISREG(os.stat(real).st_mode)
    except OSError as e:
        raise UnsafePath(f"refusing {what}: cannot stat {real}: {e.strerror}") from None
    if not regular:
        raise UnsafePath(f"refusing {what}: {real} is not a regular file")
    check_dir_chain(os.path.dirname(real), what, leaf="sticky")
    check_dir_chain(os.path.dirname(os.path.abspath(path)), what, leaf="sticky")
    return real


def check_trusted_program(path: str, what: str) -> str:
    """The one rule for a program root runs (the IMEX tool, a configured program, a hook): the
    file rule above, and executable. Returns the real path, resolved once: run that, not the
    name or a link, so a later swap of a link cannot change what runs, and nothing in the real
    path's directories can be renamed or exchanged by anyone but root (the rename-exchange race
    of docs/security.md needs a directory someone else can write)."""
    real = check_trusted_file(path, what)
    if not os.access(real, os.X_OK):
        raise UnsafePath(f"refusing {what}: {real} is not executable")
    return real


def trusted_which(name: str, what: str, dirs: tuple[str, ...] = ()) -> str | None:
    """A program root may run, found as the tool would be (``name`` itself when it holds a
    ``/``, else PATH, else ``dirs``) and put under :func:`check_trusted_program`: the real path
    to run, None when there is none, UnsafePath when what was found must not run as root."""
    import shutil

    found = name if "/" in name else shutil.which(name) or next(
        (p for p in (os.path.join(d, name) for d in dirs) if os.access(p, os.X_OK)), None)
    if found is None or not os.path.lexists(found):
        return None
    return check_trusted_program(found, what) if os.geteuid() == 0 else found


def _resolve_trusted(path: str, what: str, depth: int) -> str:
    """``path`` resolved link by link; each link must be root's, in a directory only root can
    change (sticky allowed). UnsafePath otherwise."""
    if depth > 40:
        raise UnsafePath(f"refusing {what}: too many links on the way to {path}")
    cur = "/"
    for comp in [c for c in os.path.abspath(path).split("/") if c]:
        nxt = os.path.join(cur, comp)
        try:
            st = os.lstat(nxt)
        except OSError as e:
            raise UnsafePath(f"refusing {what}: cannot stat {nxt}: {e.strerror}") from None
        if not stat.S_ISLNK(st.st_mode):
            cur = nxt
            continue
        if st.st_uid != 0:
            raise UnsafePath(f"refusing {what}: {nxt} is a link owned by uid {st.st_uid}, not root")
        check_root_owned(cur, f"{what} (the link {nxt} is in {cur})", sticky_ok=True)
        cur = _resolve_trusted(os.path.join(cur, os.readlink(nxt)), what, depth + 1)
    return cur


def make_dirs(path: str, mode: int = 0o755, what: str | None = None) -> None:
    """``mkdir -p`` whose new directories get ``mode`` whatever the umask (a root cron job with
    umask 077 would otherwise hide a log directory from the log shipper; a state directory
    asks for 0700). Existing directories are left as they are. With ``what`` (as root), the
    nearest existing directory is checked first: root makes nothing inside a place others own."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if missing and what is not None:
        check_dir_chain(path, what, leaf="sticky")
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            if not os.path.isdir(d):
                raise
            continue  # another run made it first
        os.chmod(d, mode)


def open_append(path: str, what: str, mode: int = 0o644, dir_mode: int = 0o755) -> int:
    """An fd to append to ``path``, made (with its directories) when missing. Never through a
    link, dangling or not; only a regular file with one link. The caller closes it.

    Raises :class:`UnsafePath` for a link or an unsafe directory, ``OSError`` otherwise."""
    directory = os.path.dirname(os.path.abspath(path))
    make_dirs(directory, dir_mode, f"{what}'s directory")
    check_dir_chain(directory, f"{what}'s directory")
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd, created = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode), True
    except FileExistsError:
        fd, created = _open_existing(path, flags, what), False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"refusing {what}: {path} is not a regular file with one link")
        if os.geteuid() == 0 and st.st_nlink != 1:
            raise UnsafePath(f"refusing {what}: {path} has {st.st_nlink} hard links; root appends only to "
                             "a file with one link (another could be anyone's)")
        if created:
            os.fchmod(fd, mode)  # the umask must not hide the file from whoever reads it
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_existing(path: str, flags: int, what: str) -> int:
    try:
        return os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(f"refusing {what}: {path} is a symbolic link; not following it") from None
        raise


def write_atomic(path: str, data: bytes, mode: int = 0o644, what: str | None = None, durable: bool = True) -> None:
    """Replace ``path`` with ``data``; the file gets exactly ``mode`` whatever the umask.

    ``what`` names the file in a refusal and turns on the directory checks (as root); sweep
    results, written by the unprivileged probe account into its own directory, pass none.
    ``durable=False`` skips the two fsyncs, for a file the next run rewrites anyway (metrics):
    readers still see the old file or the new one, and a crash may leave the old one or an
    empty one, never a torn one.
    Raises :class:`UnsafePath` or OSError (callers name the file)."""
    directory = os.path.dirname(os.path.abspath(path))
    if what is not None and os.path.isdir(directory):  # (a missing one fails below, by name)
        check_dir_chain(directory, f"{what}'s directory", leaf="any")
    # A fresh unguessable name opened with O_EXCL|O_NOFOLLOW: a link planted in the directory
    # is never followed. Not tempfile.mkstemp: importing it costs the health check ~8 ms.
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


def write_new(path: str, data: bytes, mode: int = 0o600) -> None:
    """Create ``path`` (it must not exist: ``O_EXCL|O_NOFOLLOW``) holding ``data``. For files
    inside a directory gpuhc just made for itself (a post-mortem bundle's staging directory)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A fresh private directory (0700, an unguessable name under $TMPDIR or /tmp) for the block,
    removed with what it holds when the block ends. Not tempfile.TemporaryDirectory: importing
    tempfile (with shutil, random, bz2 and lzma) costs a replayed health check ~4 ms, more than
    the rest of its state handling (docs/checks.md, "What a check costs")."""
    base = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(100):
        path = os.path.join(base, f"{prefix}{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free name for a scratch directory in {base}")
    try:
        yield path
    finally:
        _remove_tree(path)


def _remove_tree(path: str) -> None:
    """``path`` and everything under it; a link is removed, never followed."""
    with contextlib.suppress(FileNotFoundError), os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(entry.path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)
