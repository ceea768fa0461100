"""run_active: plan the stage, drive the worker, judge what came back, run DCGM.

Everything that can go wrong outside gpuhc (no GPU, no CuPy, a GPU held by another process, a
hung kernel, a bad config key) ends here as a Result with a clear message; nothing raises to
the runner. Which status each situation gets is listed in the package docstring.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from gpuhc.active import INSTALL_HINT, dcgm, topology
from gpuhc.active.context import ActiveContext
from gpuhc.active.plan import DCGM_TIMEOUT_S, Plan, Task, build
from gpuhc.active.progress import Progress
from gpuhc.active.registry import CHECK
from gpuhc.active.stall import stalled
from gpuhc.active.supervise import Outcome, Worker, default_argv, run_tasks, worker_env
from gpuhc.active.thresholds import thresholds_for
from gpuhc.errors import ConfigError, GpuhcError
from gpuhc.model.result import Action, Result, Status

RESERVE_S = 0.5  # kept back from the budget for judging and for the runner's own output


def run(stage: str, ctx: ActiveContext) -> list[Result]:
    try:
        return _run(stage, ctx)
    except ConfigError as e:
        return [Result("active", Status.ERROR, f"active checks not run: config: {e}")]
    except Exception as e:  # a bug in gpuhc must not look like a sick node
        return [Result("active", Status.ERROR, f"internal error in active checks: {_one_line(e)}")]


def _run(stage: str, ctx: ActiveContext) -> list[Result]:
    deadline = time.monotonic() + max(0.0, ctx.budget_s - RESERVE_S)
    from gpuhc.active import ACTIVE_CHECK_IDS

    plan = build(stage, ctx.config, ctx.check_enabled)
    if not plan.checks:
        return []
    thr = thresholds_for(ctx.profile_name, {c: ctx.threshold_overrides(c) for c in ACTIVE_CHECK_IDS})
    progress = Progress(ctx.progress)
    results: list[Result] = []
    try:
        if plan.tasks:
            results += _gpu_checks(plan, ctx, thr, deadline, progress)
        if plan.dcgm_level:
            results += _dcgm(plan, ctx, thr, deadline, progress)
    finally:
        progress.close()
    return results


def _gpu_checks(plan: Plan, ctx: ActiveContext, thr: dict, deadline: float, progress: Progress) -> list[Result]:
    cfg = plan.settings
    argv = ctx.worker_argv or default_argv()
    env = worker_env(cfg.get("env"))
    seen: dict[str, list[dict]] = {}

    def choose(hello: dict) -> tuple[list, list]:
        devices = hello.get("devices") or []
        wanted = [d for d in devices if ctx.gpus is None or d.get("index") in ctx.gpus]
        busy = [d for d in wanted if d.get("procs") and cfg["busy_gpu"] == "skip"]
        test = [d for d in wanted if d not in busy]
        seen.update(devices=devices, wanted=wanted, busy=busy, test=test)
        return [d["cuda"] for d in test], [d["cuda"] for d in devices]

    def timeout_of(task: Task, ngpu: int) -> float | None:
        vals = [ctx.check_timeout(c) for c in task.checks]
        vals = [v for v in vals if v]
        return max(vals) if vals else None

    startup = min(float(cfg["startup_timeout_s"]), max(1.0, deadline - time.monotonic()))
    sess = run_tasks(plan.tasks, lambda: Worker(argv, env), deadline, startup, choose, timeout_of, progress)
    checks = [c for c in plan.checks if CHECK[c].tasks]
    if sess.hello is None:
        return [Result(c, Status.ERROR, sess.start_error or "GPU worker did not start") for c in checks]
    hello = sess.hello
    if not seen.get("devices"):
        return [_no_gpu(c, hello) for c in checks]
    out: list[Result] = []
    if not seen["wanted"]:
        want = ",".join(str(g) for g in ctx.gpus or [])
        return [Result(c, Status.ERROR, f"none of the requested GPUs ({want}) is visible to CUDA") for c in checks]
    for d in seen["busy"]:
        out.append(_busy(d, ctx.busy_is_finding))
    outcomes = sess.outcomes or {}
    by_name = {t.name: t for t in plan.tasks}
    ngpu = len(seen["test"])

    def estimate(task: str) -> float:
        return by_name[task].estimate_s(ngpu) if task in by_name else 0.0

    for c in checks:
        out += _judge(c, outcomes, thr, ctx, estimate)
    return out


def _busy(d: dict, finding: bool) -> Result:
    """A GPU another process holds: the occupancy finding (docs/checks.md), which drains, unless
    the caller cannot tell whose the process is."""
    procs = ", ".join(f"pid {p['pid']} ({p.get('name') or '?'}"
                      + (f", {p['used'] / (1 << 30):.1f} GiB" if p.get("used") else "") + ")" for p in d["procs"])
    pids = [p["pid"] for p in d["procs"]]
    if finding:
        return Result("occupancy", Status.FAIL, f"{d['subject']} busy with {procs}: active checks skipped on it",
                      d["subject"], pids, 0, Action.DRAIN_REBOOT)
    return Result("active", Status.ERROR, f"{d['subject']} busy with {procs}: active checks skipped on it",
                  d["subject"], pids)


def _no_gpu(check: str, hello: dict) -> Result:
    n = hello.get("nvml_count")
    cuda_err = hello.get("cuda_error")
    if n and not hello.get("cupy"):
        return Result(check, Status.ERROR, f"{INSTALL_HINT} ({hello.get('cupy_error', 'CuPy missing')})")
    if n:
        return Result(check, Status.ERROR, f"NVML sees {n} GPUs but CUDA sees none: {cuda_err or 'no reason given'}")
    return Result(check, Status.NA, "no NVIDIA GPU on this node" + (f" ({cuda_err})" if cuda_err else ""))


def _judge(check: str, outcomes: dict[str, Outcome], thr: dict, ctx: ActiveContext,
           estimate: Callable[[str], float]) -> list[Result]:
    decl = CHECK[check]
    o = outcomes.get(decl.tasks[-1])
    if o is None:
        return [Result(check, Status.ERROR, "not run")]
    if o.status != "done":
        return [stalled(check, o, outcomes, estimate) or outcome_result(check, o)]
    data = {t: _delivered(outcomes.get(t)) for t in decl.tasks}
    return decl.judge(data, thr.get(check, {}), ctx.baseline)


def _delivered(o: Outcome | None) -> dict | None:
    """A task's data, or None when it did not deliver (an input task may fail on its own)."""
    return (o.data or {}) if o is not None and o.status == "done" else None


def outcome_result(check: str, o: Outcome) -> Result:
    """A task that did not deliver data: say why, by check id."""
    what = f"{o.task} task"
    if o.status in ("timeout", "skipped"):
        return Result(check, Status.ERROR, f"{what} {o.message}")
    kind, msg = o.kind or "internal", o.message
    if kind == "cupy-missing":
        return Result(check, Status.ERROR, f"{INSTALL_HINT} ({msg or 'CuPy missing'})")
    if kind == "nccl-missing":
        return Result(check, Status.ERROR, f"{INSTALL_HINT}: {msg}")
    if kind == "oom":
        return Result(check, Status.ERROR, f"{what}: out of GPU memory ({msg}); is another process using the GPU?")
    if kind == "ecc":
        return Result(check, Status.FAIL, f"{what}: uncorrectable ECC error reported by CUDA: {msg}", "node", msg,
                      None, Action.RESET_GPU)
    if kind == "cuda":
        return Result(check, Status.ERROR, f"{what}: CUDA error: {msg}")
    return Result(check, Status.ERROR, f"{what} failed: {msg}")


def _dcgm(plan: Plan, ctx: ActiveContext, thr: dict, deadline: float, progress: Progress) -> list[Result]:
    level = plan.dcgm_level
    limit = ctx.check_timeout("dcgm") or DCGM_TIMEOUT_S.get(level, 900.0)
    remaining = deadline - time.monotonic()
    if dcgm.find_dcgmi(plan.settings.get("dcgm_path")) is None and not plan.settings.get("dcgm_path"):
        return [Result(dcgm.CHECK, Status.NA, "DCGM not installed (no dcgmi)")]
    if remaining < min(60.0, limit):
        return [Result(dcgm.CHECK, Status.ERROR, f"dcgm not run: {max(0.0, remaining):.0f}s of the stage budget "
                                                 f"left for dcgmi diag -r {level}")]
    timeout = min(limit, remaining)
    progress.task_start("dcgm", 0, timeout)
    t0 = time.monotonic()
    res = dcgm.run(level, timeout, plan.settings.get("dcgm_path"), thr.get("dcgm", {}))
    progress.task_end("dcgm", "done", time.monotonic() - t0)
    return res


def read_topology(timeout_s: float = 60.0, worker_argv: list[str] | None = None) -> dict[str, Any]:
    """Topology of this node in the baseline's shape (for `gpuhc baseline capture`)."""
    deadline = time.monotonic() + timeout_s
    sess = run_tasks([Task("topology", {}, ["topology"])], lambda: Worker(worker_argv or default_argv(), worker_env()),
                     deadline, timeout_s, lambda h: ([], [d["cuda"] for d in h.get("devices") or []]),
                     lambda t, n: None)
    o = (sess.outcomes or {}).get("topology")
    if o is None or o.status != "done":
        why = sess.start_error or (o.message if o else "no result")
        raise GpuhcError(f"could not read the GPU topology: {why}")
    return topology.baseline_section(o.data or {})


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:200]
