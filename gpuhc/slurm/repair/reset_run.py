"""Carry out a GPU reset plan (:mod:`gpuhc.slurm.repair.reset_plan`): quiesce, reset, bring everything
back in reverse order, wait for the NVSwitch fabric, check that NVML lists the same GPUs.

Every step is logged with its outcome. What was stopped is always brought back: a step that
fails (or a deadline that runs out) starts the services again and turns persistence back on,
in reverse order, before the outcome says "fall through", which the ladder takes to its reboot
rung (docs/repair.md "The GPU reset procedure"). Each command has a timeout inside the run's
deadline and runs under :func:`gpuhc.slurm.repair.gpureset.run_argv`'s watchdog; putting things back gets
a few seconds even past it, because a node left with its services stopped is worse than a late
health check. Every NVML read runs bounded (:func:`gpuhc.slurm.repair.gpureset.call_bounded`): one that
does not answer, or a command that does not end when killed, marks the outcome ``wedged`` (the
driver is stuck: no further reset, the reboot rung). A service whose start fails is started once
more at once; one that then runs does not send the node to a reboot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuhc.model.nvml import NvmlReading
from gpuhc.slurm.repair.gpureset import NvmlHung, call_bounded, run_argv
from gpuhc.slurm.repair.reset_plan import NO_FABRIC, Plan, Step

RESTORE_MIN_S = 5.0  # each restoring command gets at least this, deadline or not
POLL_S = 1.0  # fabric state polling interval


@dataclass(frozen=True)
class Timeouts:
    command_s: float  # systemctl, nvidia-smi -pm
    reset_s: float  # the reset command
    fabric_s: float  # the wait for the fabric after the reset


@dataclass
class Outcome:
    ok: bool
    fallthrough: bool  # the procedure failed: the ladder goes to its reboot rung
    detail: str
    log: list[dict] = field(default_factory=list)  # {"step", "target", "ok", "detail"}
    wedged: bool = False  # NVML did not answer, or a command was left behind: the driver is stuck


class _Run:
    def __init__(self, plan: Plan, t: Timeouts, read_nvml: Callable[[], NvmlReading],
                 rescan: Callable[[], list], log: Callable[[str], None], deadline: float):
        self.plan, self.t, self.read_nvml, self.rescan, self.say = plan, t, read_nvml, rescan, log
        self.deadline = deadline
        self.undo: list[Step] = []  # quiesce steps done, to put back in reverse
        self.record: list[dict] = []
        self.wedged = False

    def note(self, step: Step, ok: bool, detail: str) -> None:
        self.record.append({"step": step.kind, "target": step.target, "ok": ok, "detail": detail})
        self.say(f"reset procedure: {step.kind} {step.target}: {'ok' if ok else 'FAILED'}: {detail}")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def command(self, step: Step, argv: tuple[str, ...], limit: float, restoring: bool = False) -> bool:
        timeout = min(limit, self.left())
        if restoring:
            timeout = max(timeout, RESTORE_MIN_S)
        if timeout < 1.0:
            self.note(step, False, "no time left in this run")
            return False
        r = run_argv(argv, timeout)
        self.wedged = self.wedged or r.stuck
        self.note(step, r.ok, r.detail)
        return r.ok

    def nvml(self, step: Step):
        """One bounded NVML read; None (noted, wedged) when it does not answer."""
        try:
            return self.read_nvml()
        except NvmlHung as e:
            self.wedged = True
            self.note(step, False, f"NVML hangs ({e})")
            return None

    def restore(self) -> bool:
        """Undo the quiesce steps done so far, newest first; True when all came back."""
        ok = True
        while self.undo:
            step = self.undo.pop()
            back = Step("restore", step.target, step.undo)
            ok = self.command(back, step.undo, self.t.command_s, restoring=True) and ok
        return ok

    def holders_gone(self, step: Step) -> bool:
        scope = {self.plan.devices.get(i) for i in self.plan.scope} - {None}
        left = [h for h in self.rescan() if scope & set(h.devices) and h.unit not in self.plan.kept]
        detail = "; ".join(f"pid {h.pid} ({h.comm}, {h.unit or 'no unit'})" for h in left)
        self.note(step, not left, f"still held by {detail}" if left else "nothing holds the GPUs")
        return not left

    def wait_fabric(self, step: Step) -> bool:
        end = time.monotonic() + min(self.t.fabric_s, max(0.0, self.left()))
        while True:
            reading = self.nvml(step)
            if reading is None:
                return False
            pending = [f"gpu{g.index} {g.fabric_state}" for g in reading.gpus
                       if g.fabric_state not in NO_FABRIC and g.fabric_state != "completed"]
            if reading.available and not pending:
                self.note(step, True, "every GPU's fabric registration completed")
                return True
            if time.monotonic() + POLL_S > end:
                why = ", ".join(pending) if reading.available else f"NVML not available ({reading.error})"
                self.note(step, False, f"fabric not complete in time: {why}")
                return False
            time.sleep(POLL_S)

    def verify(self, step: Step) -> bool:
        reading = self.nvml(step)
        if reading is None:
            return False
        seen = {g.index: g.uuid for g in reading.gpus if not g.lost}
        ok = reading.available and seen == self.plan.expected_uuids
        if ok:
            detail = f"NVML lists the same {len(seen)} GPUs"
        elif not reading.available:
            detail = f"NVML not available after the reset ({reading.error})"
        else:
            diff = sorted(set(seen.items()) ^ set(self.plan.expected_uuids.items()))
            detail = "GPUs differ from before the reset: " + ", ".join(f"gpu{i} {u}" for i, u in diff)
        self.note(step, ok, detail)
        return ok

    def go(self) -> Outcome:
        for step in self.plan.steps:
            if step.kind in ("persistence-off", "stop"):
                if not self.command(step, step.argv, self.t.command_s):
                    return self.fail(step)
                self.undo.append(step)
            elif step.kind == "check-holders":
                if not self.holders_gone(step):
                    return self.fail(step)
            elif step.kind == "reset":
                if not self.command(step, step.argv, self.t.reset_s):
                    return self.fail(step)
            elif step.kind in ("start", "persistence-on"):
                done = next((u for u in self.undo if u.undo == step.argv), None)
                ok = self.command(step, step.argv, self.t.command_s, restoring=True)
                if not ok and not self.wedged:  # once more at once: a unit's start can fail on a race
                    ok = self.command(Step(step.kind, step.target, step.argv), step.argv, self.t.command_s,
                                      restoring=True)
                if ok and done is not None:
                    self.undo.remove(done)
            elif self.undo:  # a start or persistence-on failed twice above: restore tries again, then the reboot rung
                return self.fail(Step("restore", "services"))
            elif step.kind == "wait-fabric":
                if not self.wait_fabric(step):
                    return self.fail(step)
            elif step.kind == "verify" and not self.verify(step):
                return self.fail(step)
        return Outcome(True, False, f"reset gpu{','.join(map(str, self.plan.scope))}: every step ok", self.record)

    def fail(self, step: Step) -> Outcome:
        restored = self.restore()
        what = f"{step.kind} {step.target} failed" + ("" if restored else "; NOT everything could be put back")
        if self.wedged:
            what += "; the driver does not answer (wedged): no further reset, reboot"
        return Outcome(False, True, what, self.record, self.wedged)


def execute(plan: Plan, t: Timeouts, read_nvml: Callable[[], NvmlReading], rescan: Callable[[], list],
            log: Callable[[str], None], deadline: float) -> Outcome:
    """Run the plan; a blocked plan changes nothing and falls through at once."""
    if not plan.ok:
        for b in plan.blockers:
            log(f"reset procedure: not attempted: {b}")
        return Outcome(False, True, "not attempted: " + "; ".join(plan.blockers))
    return _Run(plan, t, read_nvml, rescan, log, deadline).go()


def procedure(remediation: dict, targets: tuple[int, ...], read_nvml: Callable[[], NvmlReading],
              log: Callable[[str], None], deadline: float,
              read_mig: Callable[[], tuple[int, ...]] | None = None) -> tuple[Plan | None, Outcome]:
    """Read the node, plan and carry out the reset of ``targets`` (the ladder's reset rung);
    ``read_mig``: the GPUs in MIG mode (an NVML read, bounded like the others)."""
    from gpuhc.slurm.repair.reset_probe import ProbeSettings, holders, plan_now

    reset = remediation["reset"]
    s = ProbeSettings.from_section(reset)

    def bounded_nvml() -> NvmlReading:  # never past the run's deadline, never past a command's timeout
        return call_bounded(read_nvml, max(0.5, min(s.timeout_s, deadline - time.monotonic())), "NVML read")

    try:
        before = bounded_nvml()
        mig = call_bounded(read_mig, max(0.5, min(s.timeout_s, deadline - time.monotonic())),
                           "NVML MIG mode") if read_mig is not None else ()
    except NvmlHung as e:
        log(f"reset procedure: not attempted: NVML hangs ({e})")
        return None, Outcome(False, True, f"not attempted: NVML hangs ({e}); the driver is wedged", wedged=True)
    plan = plan_now(remediation, targets, before, deadline, mig)
    log("reset procedure: plan: " + " | ".join(plan.lines()))
    t = Timeouts(s.timeout_s, float(remediation["reset_timeout_s"]), float(reset["fabric_timeout_s"]))
    return plan, execute(plan, t, bounded_nvml, lambda: holders(s.proc_root, deadline)[0], log, deadline)
