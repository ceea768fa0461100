"""The host reader's bounded probes (gpuhc/sources/host.py): a mount's ``stat -f`` and a GPU
service's answer. Mount probes start together and are collected by their own deadlines, so one
hung file system costs its own timeout, not the sum; a child stuck in a file system is killed
and never waited for (it wakes only with it). A service's probe is asked again after a short
pause while it fails and the shared deadline allows (docs/checks.md, "services")."""

from __future__ import annotations

import time
from typing import Any


# ------------------------------------------------------------------ mount probes


def start_probes(stat: str | None, paths: list[str]) -> dict[str, Any]:
    # subprocess and socket are imported where used: most runs probe no mount and no service
    # (docs/checks.md, "What a check costs"), and the two cost the health check ~3 ms to import.
    import subprocess

    started: dict[str, Any] = {}
    for path in dict.fromkeys(paths):
        if stat is None:
            started[path] = "stat not found in a root-owned system directory"
            continue
        try:
            started[path] = (subprocess.Popen([stat, "-f", "-c", "%a %b %S", "--", path], stdin=subprocess.DEVNULL,
                                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL), time.monotonic())
        except OSError as e:
            started[path] = f"cannot run stat: {e.strerror or e}"
    return started


def finish_probes(started: dict[str, Any], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Each probe's answer by its deadline, counted from its start (the service probes ran in
    between: their time is not the mounts'); the late ones killed and left unwaited."""
    import subprocess

    out: dict[str, dict[str, Any]] = {}
    for path, probe in started.items():
        if isinstance(probe, str):
            out[path] = {"ok": False, "error": probe}
            continue
        proc, t0 = probe
        try:
            text, _ = proc.communicate(timeout=max(0.0, t0 + timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()  # not waited for: a child stuck in the file system wakes only with it
            out[path] = {"ok": False, "seconds": round(time.monotonic() - t0, 3),
                         "error": f"no answer within {timeout_s:g}s"}
            continue
        seconds = round(time.monotonic() - t0, 3)
        nums = text.decode(errors="replace").split()
        if proc.returncode != 0 or len(nums) != 3 or not all(n.isdigit() for n in nums):
            out[path] = {"ok": False, "seconds": seconds, "error": f"stat -f failed (exit {proc.returncode})"}
            continue
        avail, total, bsize = (int(n) for n in nums)
        out[path] = {"ok": True, "seconds": seconds, "free": avail * bsize, "total": total * bsize}
    return out


# ------------------------------------------------------------------ service probes

RETRY_PAUSES_S = (0.5, 1.0)  # between a service probe's attempts: three at most


def retried(probe, timeout_s: float, deadline: float, sleep=time.sleep) -> dict[str, Any]:
    """A service's probe (``probe(timeout) -> (answering, error)``) asked again after a short
    pause while it fails and the shared ``deadline`` allows: one slow answer of a busy host
    engine is no outage. ``attempts`` says how many it took; the error is the last."""
    answering, error, attempts = None, None, 0
    for pause in (*RETRY_PAUSES_S, None):
        left = deadline - time.monotonic()
        if attempts and left <= 0:
            break
        attempts += 1
        answering, error = probe(max(0.1, min(timeout_s, left)))
        if answering is not False or pause is None or deadline - time.monotonic() <= pause:
            break
        sleep(pause)
    out: dict[str, Any] = {"answering": answering, "error": error}
    if attempts > 1:
        out["attempts"] = attempts
    return out


def socket_answers(path: str, timeout_s: float) -> tuple[bool, str | None]:
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        s.connect(path)
        return True, None
    except OSError as e:
        return False, f"{path}: {e.strerror or e}"
    finally:
        s.close()
