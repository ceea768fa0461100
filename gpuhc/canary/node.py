"""``gpuhc canary run`` on a node: start the canary's GPU worker, give it the cases and the
fleet's known answers, wait at most the run's limit, judge, and leave a result file for the
admin side (``gpuhc canary submit`` collects it).

The worker is the active checks' supervised child (gpuhc/active/supervise.py): a kernel that
hangs is killed at the deadline and the run is an ``error``, never a verdict on the GPU. A GPU
another process holds is left alone (an epilog slice may meet a job's straggler).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from gpuhc.canary import schedule, verdict
from gpuhc.canary.worker import TASK
from gpuhc.model.result import Result, Status

# The command that starts the GPU worker; None: gpuhc.canary.worker.argv(). Tests put the fake
# GPU here (tests/helpers/canary_fake.py): the hardware boundary, never a config key or an
# environment variable, because the epilog slice runs as root.
WORKER_ARGV: list[str] | None = None
LAST_FILE = "canary-last.json"  # in the node's state dir: when this node's GPUs last ran it


@dataclass
class Run:
    node: str
    started: float
    params: dict[str, Any]
    data: dict[str, Any] | None = None
    results: list[Result] = field(default_factory=list)
    error: str | None = None

    def record(self) -> dict[str, Any]:
        """The result file's document."""
        gpus = (self.data or {}).get("gpus") or {}
        return {"format": 1, "node": self.node, "started": self.started, "ended": time.time(),
                "cases": self.params["cases"], "seed": self.params["seed"], "repeats": self.params["repeats"],
                "injected": bool(self.params.get("inject")), "error": self.error,
                "software": (self.data or {}).get("software"),
                "gpus": {s: {"key": g.get("key"), "uuid": g.get("uuid"), "name": g.get("name"),
                             **verdict.gpu_summary(g, verdict.memory_of(self.data or {}, s))}
                         for s, g in gpus.items()},
                "results": [r.to_dict() for r in self.results],
                "data": self.data}


def _task(params: dict[str, Any]):
    from gpuhc.active.plan import Task

    class CanaryTask(Task):
        def estimate_s(self, ngpu: int) -> float:
            return 1.0  # the run's own limit bounds it (its timeout); start whenever a second is left

    return CanaryTask(TASK, params, [verdict.CHECK])


def run(params: dict[str, Any], max_seconds: float, gpus: list[int] | None = None, node: str | None = None) -> Run:
    from gpuhc.active.supervise import Worker, run_tasks, worker_env
    from gpuhc.canary.worker import argv

    r = Run(node or node_name(), time.time(), params)
    deadline = time.monotonic() + max_seconds
    wargv = list(WORKER_ARGV) if WORKER_ARGV else argv()
    chosen: dict[str, list] = {}

    def choose(hello: dict) -> tuple[list, list]:
        devs = [d for d in hello.get("devices") or [] if gpus is None or d.get("index") in gpus]
        chosen["busy"] = [d for d in devs if d.get("procs")]
        test = [d for d in devs if not d.get("procs") and d.get("cuda") is not None]
        return [d["cuda"] for d in test], [d["cuda"] for d in test]

    sess = run_tasks([_task(params)], lambda: Worker(wargv, worker_env()), deadline,
                     min(60.0, max_seconds), choose, lambda t, n: max_seconds)
    o = (sess.outcomes or {}).get(TASK)
    if o is None or o.status != "done":
        why = sess.start_error or (o.message if o else "not run") or (o.kind if o else "")
        if o is not None and o.kind == "cupy-missing":
            why = f"the canary needs `pip install gpuhc[gpu]` ({why or 'CuPy missing'})"
        r.error = f"canary not run: {why}"
        r.results = [Result(verdict.CHECK, Status.ERROR, r.error)]
        return r
    r.data = o.data
    r.results = verdict.judge(o.data or {})
    for d in chosen.get("busy") or []:
        r.results.append(Result(verdict.CHECK, Status.ERROR, f"{d['subject']} busy with another process: canary not run "
                                                             "on it", d["subject"]))
    if not (o.data or {}).get("gpus") and not chosen.get("busy"):
        r.results.append(Result(verdict.CHECK, Status.NA, "no GPU to run the canary on"))
    return r


def write_result(run_: Run, results_dir: str) -> str:
    """``<results_dir>/<node>/<time>-<random>.json``, written whole (a reader never sees half)."""
    from gpuhc.files.fsutil import make_dirs, write_atomic

    d = os.path.join(results_dir, run_.node)
    make_dirs(d, 0o755, what="canary results directory")
    name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(run_.started)) + f"-{secrets.token_hex(3)}.json"
    path = os.path.join(d, name)
    write_atomic(path, json.dumps(run_.record(), sort_keys=True, default=str).encode(), mode=0o644,
                 what="canary result")
    return path


def due(state_dir: str, cadence: "schedule.Cadence", results_dir: str | None = None, node: str | None = None,
        now: float | None = None) -> bool:
    """The epilog slice's question: has this node's canary not run within the cadence? Its last
    run is the newer of the local stamp (a run as root) and its newest result file (a canary job
    runs as the operator account, which cannot write root's state directory); its cadence the
    short one while the stamp says a run here warned within ``suspect_days``
    (:func:`gpuhc.canary.schedule.next_due_h`, as the fleet's)."""
    stamp = read_stamp(state_dir)
    runs = [t for t in (stamp.get("ended"), newest_result(results_dir, node)) if t is not None]
    now_h = (time.time() if now is None else now) / 3600.0
    last_h = max(runs) / 3600.0 if runs else None
    return schedule.next_due_h(last_h, stamp.get("status", schedule.OK), stamp.get("suspect_until_h"), now_h,
                               cadence) <= now_h


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def newest_result(results_dir: str | None, node: str | None) -> float | None:
    if not results_dir:
        return None
    try:
        d = os.path.join(results_dir, node or node_name())
        times = [os.lstat(os.path.join(d, n)).st_mtime for n in os.listdir(d) if n.endswith(".json")]
    except OSError:
        return None
    return max(times) if times else None


def read_stamp(state_dir: str) -> dict[str, Any]:
    """The local stamp: ``ended`` (epoch s), the node's standing (``status``, ``suspect_until_h``);
    {} when missing, unreadable or not ours (the canary is due)."""
    from gpuhc.files.untrusted import load_json, read_bounded

    try:
        path = os.path.join(state_dir, LAST_FILE)
        doc = load_json(read_bounded(path, 4096, "canary stamp"), path)
        out = {"ended": float(doc["ended"])}
    except Exception:
        return {}
    until = doc.get("suspect_until_h")
    if doc.get("status") == schedule.SUSPECT and isinstance(until, (int, float)) and not isinstance(until, bool):
        out.update(status=schedule.SUSPECT, suspect_until_h=float(until))
    return out


def write_last(state_dir: str, run_: Run, cadence: "schedule.Cadence | None" = None) -> str | None:
    """The local stamp, with the node's standing after this run (an unconfirmed mismatch keeps
    the short cadence for ``suspect_days``: :func:`gpuhc.canary.schedule.step`); None, or why not
    (a canary job's user may not write the state directory: its result file in the results
    directory is its stamp then)."""
    from gpuhc.files.fsutil import make_dirs, write_atomic

    now = time.time()
    statuses = {r.status.value for r in run_.results}
    verdict = "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
    before = read_stamp(state_dir)
    status, until = schedule.step(before.get("status", schedule.OK), before.get("suspect_until_h"), verdict,
                                  now / 3600.0, cadence or schedule.Cadence())
    doc = {"ended": now, "node": run_.node, "status": status, "suspect_until_h": until}
    try:
        make_dirs(state_dir, 0o755, what="state directory")
        write_atomic(os.path.join(state_dir, LAST_FILE), json.dumps(doc).encode(), mode=0o644, what="canary stamp")
    except OSError as e:
        return f"no local canary stamp in {state_dir}: {e.strerror or e}"
    return None
