"""Notice when someone else resumed a node that gpuhc drained, and let go of the old evidence.

The kernel-log checks hold a draining XID for a day (``xid.window_s``) so that a wrapped ring
buffer cannot make a sick GPU look healthy. But when an admin resets the GPU and resumes the
node (``scontrol update state=resume`` or ``gpuhc quarantine release``), the next health check
would find the same old XID and drain the node again at once. The admin's resume is the
acknowledgement: before judging, a health check that remembers holding the node asks Slurm
(one query, only in that case) and, if the node is back in service with a reason gpuhc did not
set, clears the held incidents of the kernel-log checks up to now. New events still count. The
same reading then serves the policy after the checks (re-read only right before a drain or a
resume), so a held node costs Slurm one query per run.
"""

from __future__ import annotations

from typing import Any, Callable

from gpuhc.errors import SlurmError

# Checks whose state holds kernel-log incidents across runs (see gpuhc.checks.xid.acknowledge).
KERNEL_LOG_CHECKS = ("xid", "nvswitch")


def released_by_someone_else(node) -> bool:
    from gpuhc.slurm.reason import owned

    return not node.drained and not node.down and not owned(node.reason)


def adopt_external_resume(flow, memory, log: Callable[..., None]):
    """Read the node once when gpuhc holds it, and acknowledge the kernel-log incidents if it
    was resumed behind gpuhc's back. Returns the reading, for the policy to decide on after the
    checks (one ``show node`` per run while held, not two); None when gpuhc holds nothing (no
    query at all) or Slurm did not answer."""
    if not memory.holding:
        return None
    try:
        node = flow.scontrol().node(flow.node)
    except SlurmError as e:
        log(f"could not ask Slurm whether {flow.node} was resumed ({e}); judging as usual")
        return None
    if released_by_someone_else(node):
        acknowledge_kernel_log(flow.opts.state_dir, flow.now())
        log(f"{flow.node} was resumed outside gpuhc since gpuhc drained it ({memory.reason}); "
            "acknowledging the kernel-log incidents before now", loud=True)
    return node


def acknowledge_kernel_log(state_dir: str, now: float) -> None:
    from gpuhc.checks.xid import acknowledge
    from gpuhc.state import StateStore

    with StateStore(state_dir).transaction() as doc:
        checks: dict[str, Any] = doc.setdefault("checks", {})
        for cid in KERNEL_LOG_CHECKS:
            checks[cid] = acknowledge(checks.get(cid), now)
