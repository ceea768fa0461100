"""Copies of the checkout's files with the modes root's own install would give them.

As root, gpuhc refuses a file it will trust (a hook, a test scenario, a config) when group or
others could write it (docs/security.md; gpuhc/files/fsutil.py). A checkout's modes are the clone's
umask (0664 under ``umask 002`` or after ``chmod -R g+w``), so a test that hands gpuhc a shipped
file copies it here first: the test then holds the rule, not the checkout's modes
(tests/README.md)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path


def _set_mode(path: Path) -> None:
    if path.is_dir():
        path.chmod(0o755)
    else:  # executable stays executable; nobody but the owner writes
        path.chmod(0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644)


def trusted_copy(src: Path, dest: Path) -> Path:
    """Copy the file or tree ``src`` to ``dest`` (which must not exist): files 0644 (0755 when
    executable), directories 0755, whatever the modes of ``src``."""
    if src.is_dir():
        shutil.copytree(src, dest, copy_function=shutil.copyfile)
        for p in [dest, *dest.rglob("*")]:
            _set_mode(p)
    else:
        shutil.copyfile(src, dest)
        dest.chmod(0o755 if src.stat().st_mode & stat.S_IXUSR else 0o644)
    return dest
