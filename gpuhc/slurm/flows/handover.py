"""Notice when someone else resumed a node that gpuhc drained, and let go of the old evidence.

The kernel-log checks hold a draining XID for a day (``xid.window_s``) so that a wrapped ring
buffer cannot make a sick GPU look healthy. But when an admin resets the GPU and resumes the
node (``scontrol update state=resume`` or ``gpuhc quarantine release``), the next run would
find the same old XID and drain the node again at once. The admin's resume is the
acknowledgement, wherever gpuhc sees it first: before judging, a health check, prolog or epilog
that remembers holding the node asks Slurm (one query, only in that case) and, if the node is
back in service, clears the held incidents of the kernel-log checks up to now, the evidence
other checks hold over hours (NVLink growth, IB flaps) and the runner's count of held host
evidence (gpuhc/run/hold.py: a repaired DCGM or mount starts its count again, not at the drain
it already bought), and forgets the hold (so the next run asks nothing and acknowledges nothing
again). New events still count.
The same resume restarts the node's lemon history (gpuhc/slurm/repair/lemon_memory.py, ``forgive``):
a person said the node is mended, and its next unrelated drain must not retire it.
The prolog matters most: with a job queued for the node, its prolog runs seconds after the
resume, before any health check (it re-drained the node and requeued the job).

"Back in service" is the state, not the reason: a release may keep the old reason of a node it
resumes (gpuhc/slurm/read/releases.py, "scontrol update State=RESUME"). Only gpuhc's own resume clears the hold before it
is seen, so a node in service that gpuhc still remembers holding was resumed by someone else;
the exception is a node Slurm returned to service by itself after gpuhc's reboot, whose
boot-time retest decides (:func:`gpuhc.slurm.repair.quarantine.returned_before_retest`). The same
reading then serves the policy after the checks (re-read only right before a drain or a
resume), so a held node costs Slurm one query per run.
"""

from __future__ import annotations

from typing import Any, Callable

from gpuhc.errors import SlurmError


def released_by_someone_else(node) -> bool:
    """In service although gpuhc remembers holding it (the caller's condition), and not by
    Slurm's own return after a reboot."""
    from gpuhc.slurm.repair.quarantine import returned_before_retest

    return not node.drained and not node.down and not returned_before_retest(node)


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
    if released_by_someone_else(node) and not cold_start(flow, node, memory, log):
        acknowledge_kernel_log(flow.opts.state_dir, flow.now(), flow.node)
        log(f"{flow.node} was resumed outside gpuhc since gpuhc drained it ({memory.reason}); "
            "acknowledging the kernel-log incidents before now", loud=True)
    return node


def cold_start(flow, node, memory, log: Callable[..., None]) -> bool:
    """Did slurmctld start without its saved state (``slurmctld -c``) since gpuhc drained the
    node? Its node table then comes from slurm.conf alone: the drain and its reason are gone, no
    person resumed anything, and the held evidence must stand. Told by the controller's
    BOOT_TIME after gpuhc's drain with no reason left on the node (a warm restart keeps both the
    drain and the reason). One more query, only on a held node found in service."""
    if node.reason or memory.drained_at is None:
        return False
    try:
        boot = flow.scontrol().controller_boot_time()
    except SlurmError as e:
        log(f"could not ask when slurmctld started ({e}): taking the resume as an admin's")
        return False
    if boot is None or boot <= memory.drained_at:
        return False
    log(f"{flow.node} is in service with no reason, and slurmctld started after gpuhc drained it: a cold "
        "start lost the drain, not an admin's resume; the held evidence stands", loud=True)
    return True


def acknowledge_kernel_log(state_dir: str, now: float, node: str | None = None) -> None:
    """Drop the held kernel-log incidents up to ``now``, what the other checks hold (their
    ``Check.acknowledge``) and the runner's counts of held evidence (every one of them counted
    runs before now); with ``node``, also forget gpuhc's hold on it in the same transaction (the
    resume that acknowledged is then seen once, not at every run: a second acknowledgement would
    drop incidents newer than the resume). The flap count and gpuhc's last resume stay."""
    from gpuhc.checks import passive_checks
    from gpuhc.run.hold import STATE_KEY as HELD_KEY
    from gpuhc.slurm.flows.memory import forget_hold
    from gpuhc.state.node import StateStore

    holders = [c for c in passive_checks() if c.acknowledge is not None]  # the checks say so (Check.acknowledge)
    with StateStore(state_dir).transaction() as doc:
        checks: dict[str, Any] = doc.setdefault("checks", {})
        for c in holders:
            checks[c.id] = c.acknowledge(checks.get(c.id), now)
        doc.pop(HELD_KEY, None)
        if node is not None:
            forget_hold(doc, node)
            from gpuhc.slurm.repair.lemon_memory import forgive

            forgive(doc, now)  # a person's resume says the node is mended: its lemon history restarts
