"""Parsed YAML kept between runs, so the health check need not import and run a YAML parser.

Every run reads the same few files (the config, the GPU profiles, and the Xid catalogs when the
kernel log holds an Xid); parsing them, with the YAML library's import, is most of what a
healthy run spends in Python (docs/ARCHITECTURE.md, "Speed"). This is a memo: given a file's
path and the text just read from it, it hands back what the parser made of that same text the
last time. The text is still read every run (with the caller's own checks, unchanged); the memo
is keyed by the path, the text's length and CRC-32, and a stamp of the parsing code (gpuhc's
version, the YAML library's and gpuhc.text.yamlpos's files, Python's version), so an edited file or
an upgraded parser is simply parsed again. Only successful parses are kept: errors, with their
file and line, always come from the parser itself.

The memo lives in one file, ``$GPUHC_CACHE_DIR/parsed-yaml`` (default ``/var/cache/gpuhc``;
set the variable empty to turn it off). It is trusted only where nobody but its reader (or
root) could have written it: as root, the directory chain must be root's (gpuhc.files.fsutil), and
the file root's, a regular file, not writable by group or others. On any doubt (unsafe,
unreadable, damaged, written by another Python) it is ignored and the files are parsed; a
failure to write it is never an error. It holds at most MAX_ENTRIES files of at most
MAX_TEXT_BYTES each, the least recently stored dropped first.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import _thread
import zlib
from typing import Any, Callable

DEFAULT_DIR = "/var/cache/gpuhc"
FILE_NAME = "parsed-yaml"
FORMAT = 1  # bump when what a kind's parse returns changes shape
MAX_ENTRIES = 48
MAX_TEXT_BYTES = 1 << 20  # larger files (big recordings) are parsed every time
MAX_CACHE_BYTES = 16 << 20

_memo: dict[str, tuple] = {}  # path -> (key, marshalled value)
_memo_dir: str | None = None  # the directory _memo was read from; None: not read yet
# What this process stored, and what it did not (_worth_storing), by path: the key of the parse.
_stored_here: dict[str, tuple] = {}
_unsettled: dict[str, tuple] = {}
_stamp: tuple | None = None
_lock = _thread.allocate_lock()  # the readers run in threads; one of them may parse a file one day


def cache_dir() -> str | None:
    """Where the memo lives, or None when turned off."""
    configured = os.environ.get("GPUHC_CACHE_DIR")
    if configured is None:
        return DEFAULT_DIR
    return configured or None


def cached(path: str, text: str, kind: str, parse: Callable[[str], Any]) -> Any:
    """``parse(text)``, or a fresh copy of what it returned for this path and text before.

    ``kind`` names the parse (two parsers of one file keep two entries). Values must be plain
    data (dicts, lists, tuples, strings, numbers, booleans, None): anything else is not kept."""
    directory = cache_dir()
    if directory is None:
        return parse(text)
    where = os.path.abspath(path)
    data = text.encode("utf-8", "surrogatepass")
    with _lock:
        key = (kind, _code_stamp(), len(data), zlib.crc32(data))
        found = _load(directory).get(where)
    if found is not None and found[0] == key:
        try:
            return marshal.loads(found[1])
        except Exception:  # damaged: parse instead, and store the parse below
            pass
    value = parse(text)
    if len(data) <= MAX_TEXT_BYTES:
        with _lock:
            if _worth_storing(directory, where, key):
                _store(directory, where, key, value)
    return value


def _worth_storing(directory: str, where: str, key: tuple) -> bool:
    """Not the parse of a file that changed while this process ran, until it reads the same
    twice in a row. A long process replaying recordings rewritten before every run (the
    campaign model: 64 nodes' files, a new time line each run) rewrote the whole memo file at
    every run, and pushed the files that do not change out of its MAX_ENTRIES; their parses
    are never used again. A file's first parse in a process is stored, as it always was; its
    stale entry is dropped (written out with the next parse stored)."""
    before = _stored_here.get(where)
    if before is None or before == key or _unsettled.get(where) == key:
        _unsettled.pop(where, None)
        _bounded(_stored_here, where, key)
        return True
    _bounded(_unsettled, where, key)
    _load(directory).pop(where, None)
    return False


def _bounded(table: dict[str, tuple], where: str, key: tuple) -> None:
    table.pop(where, None)
    table[where] = key
    while len(table) > 4 * MAX_ENTRIES:  # a process parsing ever new paths: the oldest forgotten
        table.pop(next(iter(table)))


def _code_stamp() -> tuple:
    """What the parses depend on besides the text: a change to any of it parses afresh."""
    global _stamp
    if _stamp is None:
        from importlib.util import find_spec

        from gpuhc import __version__

        files = []
        yaml_spec = find_spec("yaml")
        for f in (os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "text", "yamlpos.py"),
                  yaml_spec.origin if yaml_spec is not None else None):
            try:
                st = os.stat(f) if f else None
            except OSError:
                st = None
            files.append((f, st.st_size, st.st_mtime_ns) if st else (f, None, None))
        _stamp = (FORMAT, __version__, sys.version, tuple(files))
    return _stamp


def trusted_stat(st: os.stat_result) -> bool:
    """Owned by root or by us, and nobody else may write it (a file of the cache directory;
    gpuhc/sources/prev_boot.py's cache file too)."""
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def safe_dir(directory: str) -> bool:
    """May gpuhc keep and read a cache file in ``directory`` (every directory on its path
    root's, the leaf private to its owner)?"""
    from gpuhc.files.fsutil import UnsafePath, check_dir_chain

    try:
        check_dir_chain(directory, "parse cache", leaf="private")  # as root: every directory root's
        return trusted_stat(os.stat(directory))
    except (UnsafePath, OSError):
        return False


def _load(directory: str) -> dict[str, tuple]:
    """The memo, read once per process; {} when missing or not to be trusted."""
    global _memo, _memo_dir
    if _memo_dir == directory:
        return _memo
    _memo, _memo_dir = {}, directory
    _stored_here.clear(), _unsettled.clear()
    path = os.path.join(directory, FILE_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return _memo
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and trusted_stat(st) and st.st_size <= MAX_CACHE_BYTES
                and safe_dir(directory)):
            return _memo
        chunks, left = [], st.st_size + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        doc = marshal.loads(b"".join(chunks))
    except Exception:  # unreadable or damaged: start afresh
        return _memo
    finally:
        os.close(fd)
    if isinstance(doc, dict):
        _memo = {p: e for p, e in doc.items()
                 if isinstance(p, str) and isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], bytes)}
    return _memo


def _store(directory: str, where: str, key: tuple, value: Any) -> None:
    """Add one parse to the memo and write the memo out; any failure leaves it as it was."""
    try:
        if contains_foreign(value):
            return
        blob = marshal.dumps(value)
    except Exception:  # (a RecursionError on a deep document)
        return
    memo = _load(directory)
    memo.pop(where, None)
    memo[where] = (key, blob)
    while len(memo) > MAX_ENTRIES:
        memo.pop(next(iter(memo)))
    try:
        data = marshal.dumps(memo)
        while len(data) > MAX_CACHE_BYTES and len(memo) > 1:
            memo.pop(next(iter(memo)))
            data = marshal.dumps(memo)
        from gpuhc.files.fsutil import make_dirs, write_atomic

        make_dirs(directory, 0o700, "parse cache")
        if not safe_dir(directory):
            return
        write_atomic(os.path.join(directory, FILE_NAME), data, 0o600, "parse cache", durable=False)
    except Exception:  # a read-only /var, another user's directory, a full disk: parse next time
        return


_PLAIN = {str, int, float, bool, type(None), bytes}


def contains_foreign(value: Any) -> bool:
    """True for anything a parse could return that marshal would not give back as the same
    type (a YAML date, a set, a subclass): such files are parsed every time (and a replay's
    state is copied value by value, gpuhc/sources/scenario_state.py)."""
    kind = type(value)
    if kind in _PLAIN:
        return False
    if kind is list or kind is tuple:
        return any(map(contains_foreign, value))
    if kind is dict:
        return any(contains_foreign(k) or contains_foreign(v) for k, v in value.items())
    return True
