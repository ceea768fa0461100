"""/dev/kmsg as a script of reads, for the kernel log source's tests: each ``os.read`` returns the
next record, or raises the next exception (EPIPE: a record overwritten under the reader; EAGAIN:
caught up)."""

from __future__ import annotations


def script_reads(monkeypatch, module, script: list) -> list:
    """Make ``module.os.read`` play ``script``; the script (what is left of it) is returned."""

    def fake_read(fd, n):
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    monkeypatch.setattr(module.os, "read", fake_read)
    return script
