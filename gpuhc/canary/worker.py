"""The canary's GPU worker: the active checks' worker protocol (gpuhc/active/worker.py: hello,
one JSON task per line, raw data back), serving the one task ``canary``.

A process of its own, like every active check's GPU work, so that the parent can kill a kernel
that hangs at its deadline. ``serve`` takes the backend and the hello, so the tests' fake GPU
(tests/helpers/canary_fake.py) runs this same loop.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

TASK = "canary"
BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from gpuhc.canary.worker import main; sys.exit(main())"


def argv() -> list[str]:
    """Like the active checks' worker: isolated (``-I``), gpuhc from where this gpuhc came from."""
    from gpuhc.active.supervise import default_argv

    return default_argv()[:4] + [BOOT] + default_argv()[5:]


def serve(backend: Callable[[], Any], hello: Callable[[], dict]) -> int:
    from gpuhc.active.gpu import classify
    from gpuhc.active.worker import Protocol, _die_with_parent
    from gpuhc.canary.work import measure

    _die_with_parent()
    proto = Protocol()
    info = hello()
    proto.emit(info)
    by_cuda = {d["cuda"]: d for d in info.get("devices") or []}
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        if req.get("task") == "quit":
            break
        proto.emit({"ev": "start", "task": req.get("task")})
        t0 = time.monotonic()
        ev: dict[str, Any] = {"task": req.get("task")}
        try:
            if req.get("task") != TASK:
                raise ValueError(f"unknown task {req.get('task')!r}")
            devices = [by_cuda[i] for i in req.get("devices") or [] if i in by_cuda]
            ev.update(ev="done", data=measure(req.get("params") or {}, devices, backend()))
        except BaseException as e:  # the parent decides what it means
            kind, message = classify(e)
            ev.update(ev="fail", kind=kind, message=message, restart=kind in ("cuda", "ecc"))
        finally:
            _release()
        ev["seconds"] = round(time.monotonic() - t0, 3)
        proto.emit(ev)
        if ev.get("restart"):
            break
    return 0


def _release() -> None:
    """Every GPU buffer back to the driver after the task, as the active checks' worker does."""
    import gc

    gc.collect()
    if "cupy" in sys.modules:
        try:
            from gpuhc.active.gpu import release

            release()
        except Exception:
            pass


def main() -> int:
    from gpuhc.active.worker import hello
    from gpuhc.canary.cupy_backend import CupyBackend

    return serve(CupyBackend, hello)


if __name__ == "__main__":
    sys.exit(main())
