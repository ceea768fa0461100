"""A wedged driver is a fault: NVML that hangs or fails on consecutive health checks drains the
node (issue 30; docs/slurm.md, "A wedged driver").

Why: a check that times out or cannot read its source is an ERROR, "gpuhc could not judge", and
an ERROR never drains: one flaky read must not take a node out. But a GPU whose driver stopped
answering (NVML calls blocking for tens of seconds on a GPU throwing errors, NVIDIA/DCGM#313;
``nvidia-smi`` hanging) is the classic black hole: every health check says ERROR, the prolog
lets every job run, and every job on it hangs or dies. So the health check counts its runs in
a row in which the NVML source timed out or failed, or NVML itself answered "Timeout" (gpu-count's
could-not-judge ERROR, gpuhc/checks/gpu_count.py) (:func:`nvml_trouble`); at
:data:`WEDGED_RUNS` it adds a FAIL, ``nvml``, whose action is drain-and-reboot, and the node is
drained like any other failure: through the policy and the circuit breaker, with a reason that
says what happened. One clean read sets the count back to 0.

The count is the node's state (``slurm.wedged.<node>``, through :mod:`gpuhc.slurm.flows.memory`); a run
without NVML trouble and a count of 0 writes nothing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuhc.model.result import Action, Result, Status

if TYPE_CHECKING:
    from gpuhc.slurm.flows.frame import Flow

WEDGED_RUNS = 2  # consecutive health checks (minutes apart) with NVML hanging or failing
CHECK = "nvml"  # the FAIL's check id in the reason: "gpuhc: nvml NVML hung or failed on ..."
# The runner's words for a source that timed out or failed (gpuhc/runner.py), naming nvml.
_TROUBLE = re.compile(r"^(timed out after [\d.]+s reading|could not read) .*\bnvml\b")


def nvml_trouble(results: list[Result]) -> str | None:
    """The first ERROR that says the NVML source hung or failed in this run, or None: the
    runner's words for a source that hung, or gpu-count's for NVML answering "Timeout"."""
    from gpuhc.checks.gpu_count import ID as GPU_COUNT, TIMED_OUT

    for r in results:
        msg = r.message or ""
        if r.status is Status.ERROR and (_TROUBLE.match(msg) or (r.check == GPU_COUNT and msg.startswith(TIMED_OUT))):
            return f"{r.check}: {r.message}"
    return None


def wedged_result(runs: int, detail: str) -> Result:
    return Result(CHECK, Status.FAIL, f"NVML hung or failed on {runs} consecutive health checks (driver wedged?): "
                  f"{detail}", "node", action=Action.DRAIN_REBOOT)


def update(flow: Flow, report: Any) -> None:
    """Count this run and, at :data:`WEDGED_RUNS`, add the FAIL to ``report.results``. State that
    cannot be read or written is said and changes nothing."""
    from gpuhc.slurm.flows.memory import count_wedged

    trouble = nvml_trouble(report.results)
    try:
        runs = count_wedged(flow, trouble is not None)
    except Exception as e:
        flow.log(f"wedged-driver count not kept ({e})", loud=True)
        return
    if trouble and runs >= WEDGED_RUNS:
        report.results.append(wedged_result(runs, trouble))
        flow.log(f"NVML hung or failed on {runs} health checks in a row: a wedged driver is a fault", loud=True)
