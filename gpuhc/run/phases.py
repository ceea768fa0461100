"""Phase marks for the speed bench (bench/bench_check.py): when did the run reach each point.

Off unless ``GPUHC_PHASES`` names a file: then every :func:`mark` records ``(name, time.time())``
and the marks are appended to that file as one JSON line when the process exits normally. A
mark costs a list append when on and a global lookup when off; the bench turns the marks into
phases (interpreter and imports, NVML init, reads, judging, write-out) so that a regression is
easy to place. Stdlib only, imported by the first lines that run.
"""

from __future__ import annotations

import os
import time

# When gpuhc's first line ran (the interpreter's own start-up is before it): the start of the
# ``before_run`` phase of ``gpuhc check --timings`` (gpuhc/run/timings.py).
STARTED = time.perf_counter()
_PATH = os.environ.get("GPUHC_PHASES") or None
_marks: list[tuple[str, float]] = []


def mark(name: str) -> None:
    if _PATH is not None:
        _marks.append((name, time.time()))


def flush() -> None:
    """Write the marks now (a process that leaves with os._exit skips atexit)."""
    if _PATH is not None and _marks:
        _dump()
        _marks.clear()


def _dump() -> None:
    import json

    if not _marks:
        return
    try:
        with open(_PATH, "a", encoding="utf-8") as f:  # type: ignore[arg-type]
            f.write(json.dumps({"pid": os.getpid(), "marks": _marks}) + "\n")
    except OSError:
        pass  # a bench aid: never a reason for the run to fail


if _PATH is not None:
    import atexit

    atexit.register(_dump)
