"""The `owners` fixture: gpuhc runs "as root" whatever the suite runs as, for the checks that
ask the kernel who owns a path (tests/postmortem/test_job.py, tests/postmortem/test_retire.py)."""

from __future__ import annotations


import os

import pytest


@pytest.fixture
def owners(monkeypatch):
    """Run as "root": ``os.geteuid()`` is 0 and every path is owned by root unless listed here."""
    real_stat = os.stat
    table: dict[str, int] = {}

    def fake_stat(path, *a, **k):
        st = real_stat(path, *a, **k)
        if isinstance(path, int):
            return st
        uid = table.get(os.path.abspath(os.fspath(path)), 0)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, st.st_gid, st.st_size,
                               int(st.st_atime), int(st.st_mtime), int(st.st_ctime)))

    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return table
