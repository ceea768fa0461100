"""Append one JSON line per run to a local event log.

Several gpuhc runs can overlap on a node (the periodic health check, a prolog, an admin's manual
``gpuhc check``), and each appends. The file is opened with ``O_APPEND`` and the whole line is
handed to the kernel in a single ``write``, under an advisory ``flock``: on a local filesystem
that keeps every line whole and in one piece, whoever else is writing. The file is reopened on
every run, so logrotate's ``create`` and ``copytruncate`` both work. It is opened the way every
file root appends to is (:mod:`gpuhc.fsutil`): never through a link.

Nothing here raises: a full disk, a read-only filesystem or a directory in the file's place
returns a one-line message for the caller to log, and the health verdict stands.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import time
from typing import Any

DIR_MODE = 0o755
FILE_MODE = 0o644


def encode_line(report: dict[str, Any]) -> bytes:
    """The report as one line of JSON (ASCII, no raw newlines), ending in a newline.

    Non-finite floats become null (bare NaN is not JSON, and log shippers reject the line);
    anything that is not JSON-able is written as its ``str`` rather than dropping the event.
    """
    doc = dict(_clean(report))
    doc.setdefault("logged_at", round(time.time(), 3))
    return (json.dumps(doc, default=str, allow_nan=False, separators=(",", ":")) + "\n").encode("ascii")


def append_event(path: str, report: dict[str, Any]) -> str | None:
    """Append ``report`` as one JSON line to ``path``; None on success, else why not.

    As root the file is never opened through a link (a planted ``events.jsonl -> /root/x`` or a
    dangling one is refused, not followed) and its directories must be root's
    (:func:`gpuhc.fsutil.open_append`)."""
    from gpuhc.fsutil import UnsafePath, open_append

    try:
        data = encode_line(report)
    except Exception as e:  # a report that cannot be encoded is a bug, but not one worth a drain
        return f"event log {path}: cannot encode the report: {type(e).__name__}: {e}"
    try:
        fd = open_append(path, "event log", FILE_MODE, DIR_MODE)
    except UnsafePath as e:
        return str(e)
    except OSError as e:
        return f"event log {path}: {_why(e)}"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # e.g. a filesystem without locks: O_APPEND alone still keeps lines whole
        written = os.write(fd, data)
        if written != len(data):
            # only on a full disk or a signal: a line cut short is reported, not completed later
            return f"event log {path}: short write ({written} of {len(data)} bytes)"
        return None
    except OSError as e:
        return f"event log {path}: {_why(e)}"
    finally:
        os.close(fd)  # also drops the flock


def _why(e: OSError) -> str:
    name = errno.errorcode.get(e.errno or 0, "")
    text = e.strerror or str(e)
    return f"{text} ({name})" if name else text


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
