"""A link between GPUs that stalls: the epilog's P2P or NCCL task that never ends while the
same GPUs computed, held over epilogs before it drains (docs/checks.md, "Evidence to act").

Why: a stalled NVLink (or the switch path between two GPUs) rarely leaves an error code.
Meta's Llama 3 report (arXiv 2407.21783, section 3.3.4) describes NVLink failures that show only
as load/store operations stalled inside CUDA kernels; every rank of a job then waits in its
collective until NCCL's watchdog kills it, the node frees first and gets the next job, and the
next job hangs the same way. In the epilog the same link makes the peer copy (``p2p``) or the
all-reduce (``nccl``) run until the supervisor kills it (gpuhc/active/supervise.py). A task
that timed out is, on its own, "gpuhc could not judge" (ERROR, never a drain): a worker that
did not start, a slow first compile, a budget cut short say nothing about the link.

So a time-out is read as a stall only when the rest of the session says the GPUs work:

- the task is a link task (``p2p``, ``nccl``);
- it ran at least :data:`FACTOR` times its healthy estimate (gpuhc/active/registry.py, itself
  generous), and at least :data:`MIN_S`: a link a little slow or a configured time-out shorter
  than the estimate is not a stall;
- a task that computes on the same GPUs (burn-in, HBM, memory test) completed in the same
  session: the worker, CUDA and each GPU answered.

Then it is a FAIL of class :data:`EVIDENCE`, which the runner holds (``evidence.link``: two
epilogs in a row, at most a week apart, gpuhc/run/hold.py) before it drains and reboots: a
reboot retrains the links; a link that stalls again after it is a ticket. One epilog in which
the task completes starts the count again. Pure: outcomes in, a result or None out.
"""

from __future__ import annotations

from typing import Callable

from gpuhc.active.supervise import Outcome
from gpuhc.model.result import Action, Result, Status

EVIDENCE = "gpu-link-stall"  # its class in the evidence table (gpuhc/catalog/evidence.py)
LINK_TASKS = ("p2p", "nccl")
COMPUTE_TASKS = ("burnin", "hbm", "memtest")  # each runs a kernel on every GPU under test
FACTOR = 3.0
MIN_S = 10.0


def stalled(check: str, o: Outcome, outcomes: dict[str, Outcome], estimate: Callable[[str], float]) -> Result | None:
    """The stall FAIL for ``check`` whose task ``o`` timed out, or None when the time-out does
    not show a stall (``estimate(task)``: the task's healthy seconds on these GPUs)."""
    if o.status != "timeout" or o.task not in LINK_TASKS:
        return None
    healthy = estimate(o.task)
    computed = [t for t in COMPUTE_TASKS if (x := outcomes.get(t)) is not None and x.status == "done"]
    if o.seconds < max(MIN_S, FACTOR * healthy) or not computed:
        return None
    times = o.seconds / max(healthy, 0.1)
    return Result(check, Status.FAIL, f"{o.task} task stalled: no answer in {o.seconds:.0f}s, {times:.0f}x its "
                  f"healthy time, while {computed[0]} completed on the same GPUs (a link between GPUs that stalls?)",
                  "node", action=Action.DRAIN_REBOOT, evidence=EVIDENCE)
