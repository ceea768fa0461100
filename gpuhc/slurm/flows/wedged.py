"""A wedged driver is a fault: NVML that hangs or fails on consecutive health checks, for long
enough, drains the node (docs/slurm.md, "Fail open, fail closed").

Why: a check that times out or cannot read its source is an ERROR, "gpuhc could not judge", and
an ERROR never drains: one flaky read must not take a node out. But a GPU whose driver stopped
answering (NVML calls blocking for tens of seconds on a GPU throwing errors, NVIDIA/DCGM#313;
``nvidia-smi`` hanging) is the classic black hole: every health check says ERROR, the prolog
lets every job run, and every job on it hangs or dies. So the health check counts its runs in
a row in which the NVML source timed out or failed, or NVML itself answered "Timeout" (gpu-count's
could-not-judge ERROR, gpuhc/checks/gpu_count.py) (:func:`nvml_trouble`). Once they are held as
the evidence table's ``driver`` hold says (``evidence.driver``: 3 runs spanning 20 minutes by
default, gpuhc/catalog/evidence.py; a healthy GPU in a long resource-manager call stalls NVML for
minutes, a wedged driver stays until the node reboots), it adds a FAIL, ``nvml``, whose action is
drain-and-reboot, and the node is drained like any other failure: through the policy and the
circuit breaker, with a reason that says how long. One clean read sets the count back to 0. A
task hung in the driver meanwhile is the hung-task check's FAIL, which drains at once.

The count is the node's state (``slurm.wedged.<node>``, through :mod:`gpuhc.slurm.flows.memory`); a run
without NVML trouble and a count of 0 writes nothing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpuhc.model.result import Action, Result, Status

if TYPE_CHECKING:
    from gpuhc.slurm.flows.frame import Flow

CHECK = "nvml"  # the FAIL's check id in the reason: "gpuhc: nvml NVML hung or failed on ..."
EVIDENCE = "nvml-wedged"  # its class in the evidence table (gpuhc/catalog/evidence.py), whose hold it waits for
# The runner's words for a source that timed out or failed (gpuhc/run/runner.py), naming nvml.
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


def wedged_result(runs: int, span_s: float, detail: str) -> Result:
    from gpuhc.catalog.evidence import span_text

    return Result(CHECK, Status.FAIL, f"NVML hung or failed on {runs} consecutive health checks over "
                  f"{span_text(round(span_s))} (driver wedged?): {detail}", "node", action=Action.DRAIN_REBOOT,
                  evidence=EVIDENCE)


def update(flow: Flow, report: Any) -> None:
    """Count this run and, once the count is held (``evidence.driver``), add the FAIL to
    ``report.results``. State that cannot be read or written is said and changes nothing."""
    from gpuhc.catalog.evidence import by_id, holds_from
    from gpuhc.slurm.flows.memory import count_wedged

    trouble = nvml_trouble(report.results)
    try:
        runs, first = count_wedged(flow, trouble is not None)
    except Exception as e:
        flow.log(f"wedged-driver count not kept ({e})", loud=True)
        return
    if not trouble:
        return
    hold = holds_from(flow.opts.config.section("evidence"))[by_id(EVIDENCE).hold]
    span = max(0.0, flow.now() - first)
    if runs >= hold.runs and span >= hold.span_s:
        report.results.append(wedged_result(runs, span, trouble))
        flow.log(f"NVML hung or failed on {runs} health checks in a row over {round(span)} s: a wedged driver "
                 "is a fault", loud=True)
    else:
        flow.log(f"NVML hung or failed on {runs} health check(s) in a row over {round(span)} s; drains when "
                 f"held {hold.runs} runs over {round(hold.span_s)} s (evidence.{by_id(EVIDENCE).hold})")
