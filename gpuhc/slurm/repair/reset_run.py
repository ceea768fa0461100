"""Carry out a GPU reset plan (:mod:`gpuhc.slurm.repair.reset_plan`): quiesce, reset, bring everything
back in reverse order, wait for the NVSwitch fabric, check that NVML lists the same GPUs.

Every step is logged with its outcome. What was stopped is always brought back: a step that
fails (or a deadline that runs out) starts the services again and turns persistence back on,
in reverse order, before the outcome says "fall through", which the ladder takes to its reboot
rung (docs/repair.md "The GPU reset procedure"). Each command has a timeout inside the run's
deadline and runs under :func:`gpuhc.slurm.repair.gpureset.run_argv`'s watchdog; putting things back gets
a few seconds even past it, because a node left with its services stopped is worse than a late
health check; and each change is journaled before it is made (:mod:`gpuhc.slurm.repair.undo_journal`),
so a run killed past that point (slurmd's kill, a ``kill -9``) is put right by the next one. gpuhc's
own node watcher is asked to let go of NVML first (the ``yield`` step); where only gpuhc itself is in
the way (the watcher does not let go, the journal cannot be written) the outcome says ``retry``:
nothing was changed and the ladder tries again next run, without counting it, never a reboot for
it. Every NVML read runs bounded (:func:`gpuhc.slurm.repair.gpureset.call_bounded`): one that
does not answer, or a command that does not end when killed, marks the outcome ``wedged`` (the
driver is stuck: no further reset, the reboot rung). A service whose start fails is started once
more at once; one that then runs does not send the node to a reboot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuhc.model.deadline import Deadline
from gpuhc.model.nvml import NvmlReading
from gpuhc.slurm.repair.gpureset import NvmlHung, call_bounded, run_argv
from gpuhc.slurm.repair.reset_plan import NO_FABRIC, Plan, Step

if TYPE_CHECKING:
    from gpuhc.slurm.repair.reset_probe import ReadProcs

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
    retry: bool = False  # only gpuhc itself stood in the way (its watcher, its journal): not counted, no reboot


# The undo of each quiesce step, as the journal names it (gpuhc/slurm/repair/undo_journal.py).
_UNDO_KIND = {"persistence-off": "persistence-on", "stop": "start"}


@dataclass(frozen=True)
class Own:
    """gpuhc's side of the node for one reset: the state directory where the undo is journaled
    and the watchers register, and how long they get to let go of NVML."""

    state_dir: str
    yield_s: float
    proc_root: str = "/proc"


class _Run:
    def __init__(self, plan: Plan, t: Timeouts, read_nvml: Callable[[], NvmlReading],
                 rescan: Callable[[], list], log: Callable[[str], None], deadline: Deadline, own: Own | None = None):
        self.plan, self.t, self.read_nvml, self.rescan, self.say = plan, t, read_nvml, rescan, log
        self.deadline = deadline
        self.undo: list[Step] = []  # quiesce steps done, to put back in reverse
        self.record: list[dict] = []
        self.wedged = False
        self.own = own
        self.journal = None
        if own is not None:
            from gpuhc.slurm.repair.undo_journal import Journal

            self.journal = Journal(own.state_dir)
        self.yielders: set[int] = set()  # gpuhc's own watchers that let go for this reset
        self.retry = False  # only gpuhc itself stood in the way

    def note(self, step: Step, ok: bool, detail: str) -> None:
        self.record.append({"step": step.kind, "target": step.target, "ok": ok, "detail": detail})
        self.say(f"reset procedure: {step.kind} {step.target}: {'ok' if ok else 'FAILED'}: {detail}")

    def left(self) -> float:
        return self.deadline.left()

    def command(self, step: Step, argv: tuple[str, ...], limit: float, restoring: bool = False) -> bool:
        timeout = self.deadline.cap(limit)
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

    def quiesce(self, step: Step) -> bool:
        """Write the undo ahead, then change the node. A journal that cannot be written changes
        nothing: the reset is not tried (gpuhc's own failure is never a reboot)."""
        if self.journal is not None:
            try:
                self.journal.add(_UNDO_KIND[step.kind], step.target)
            except Exception as e:
                self.note(step, False, f"the undo could not be journaled ({type(e).__name__}: {e}): not changed")
                self.retry = True
                return False
        self.undo.append(step)  # a step that fails half-way is undone all the same (start, -pm 1: harmless)
        return self.command(step, step.argv, self.t.command_s)

    def undone(self, step: Step) -> None:
        """Its undo ran: out of the journal (the replay of a killed run would do it again)."""
        if step in self.undo:
            self.undo.remove(step)
        if self.journal is not None:
            try:
                self.journal.done(_UNDO_KIND[step.kind], step.target)
            except Exception as e:  # left pending: the next run replays it (a start twice is harmless)
                self.say(f"reset procedure: journal not updated ({type(e).__name__}: {e}): the next run replays it")

    def restore(self) -> bool:
        """Undo the quiesce steps done so far, newest first; True when all came back."""
        ok = True
        for step in list(reversed(self.undo)):
            back = Step("restore", step.target, step.undo)
            if self.command(back, step.undo, self.t.command_s, restoring=True):
                self.undone(step)
            else:
                ok = False
        return ok

    def holders_gone(self, step: Step) -> bool:
        scope = {self.plan.devices.get(i) for i in self.plan.scope} - {None}
        left = [h for h in self.rescan() if scope & set(h.devices) and h.unit not in self.plan.kept]
        detail = "; ".join(f"pid {h.pid} ({h.comm}, {h.unit or 'no unit'})" for h in left)
        self.note(step, not left, f"still held by {detail}" if left else "nothing holds the GPUs")
        if left and all(h.pid in self.yielders for h in left):
            self.retry = True  # only gpuhc's watcher, which said it let go: gpuhc's to fix, not the GPU's
        return not left

    def yield_own(self, step: Step) -> bool:
        """Ask gpuhc's own watchers to let go of NVML and wait for each to say so, within
        ``Own.yield_s`` (cut to the deadline). Not in time: no reset this run, no reboot."""
        from gpuhc.slurm.repair import nvml_yield

        if self.own is None:
            self.note(step, False, "gpuhc's watcher holds the GPUs and this run cannot ask it to let go")
            self.retry = True
            return False
        wanted = {int(p) for p in step.target.split(",") if p.isdigit()}
        wait = self.deadline.cap(self.own.yield_s, keep=1.0)
        try:
            # until this run's end and its restores: a killed run's request lapses by itself
            req = nvml_yield.ask(self.own.state_dir, time.time() + max(self.left(), wait) + RESTORE_MIN_S * len(self.plan.steps))
        except Exception as e:
            self.note(step, False, f"the request could not be written ({type(e).__name__}: {e})")
            self.retry = True
            return False
        end = time.monotonic() + wait
        while True:
            still = {h.pid for h in self.rescan()} & wanted  # a watcher that exited has let go too
            done = nvml_yield.acked(self.own.state_dir, req, still) | (wanted - still)
            if done >= wanted or time.monotonic() >= end:
                break
            time.sleep(nvml_yield.POLL_S)
        self.yielders = done
        late = sorted(wanted - done)
        if late:
            self.note(step, False, f"gpuhc watch (pid {', '.join(map(str, late))}) did not let go of NVML within "
                                   f"{wait:.0f}s: no reset this run, tried again next run (no reboot for it)")
            self.retry = True
            return False
        self.note(step, True, f"gpuhc watch (pid {', '.join(map(str, sorted(wanted)))}) let go of NVML")
        return True

    def wait_fabric(self, step: Step) -> bool:
        end = time.monotonic() + self.deadline.cap(self.t.fabric_s)
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
        try:
            return self.steps()
        finally:
            if self.own is not None and any(s.kind == "yield" for s in self.plan.steps):
                from gpuhc.slurm.repair import nvml_yield

                nvml_yield.release(self.own.state_dir)  # the watchers take NVML back

    def steps(self) -> Outcome:
        for step in self.plan.steps:
            if step.kind == "yield":
                if not self.yield_own(step):
                    return self.fail(step)
            elif step.kind in ("persistence-off", "stop"):
                if not self.quiesce(step):
                    return self.fail(step)
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
                    self.undone(done)
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
        retry = self.retry and restored and not self.wedged
        if retry:
            what += "; only gpuhc itself was in the way: tried again next run, no reboot for it"
        return Outcome(False, not retry, what, self.record, self.wedged, retry)


def execute(plan: Plan, t: Timeouts, read_nvml: Callable[[], NvmlReading], rescan: Callable[[], list],
            log: Callable[[str], None], deadline: Deadline, own: Own | None = None) -> Outcome:
    """Run the plan; a blocked plan changes nothing and falls through at once. ``own``: where
    the undo is journaled and gpuhc's watchers are asked to let go (None: neither)."""
    if not plan.ok:
        for b in plan.blockers:
            log(f"reset procedure: not attempted: {b}")
        return Outcome(False, True, "not attempted: " + "; ".join(plan.blockers))
    return _Run(plan, t, read_nvml, rescan, log, deadline, own).go()


def procedure(remediation: dict, targets: tuple[int, ...], read_nvml: Callable[[], NvmlReading],
              log: Callable[[str], None], deadline: Deadline,
              read_mig: Callable[[], tuple[int, ...]] | None = None,
              state_dir: str | None = None,
              read_procs: ReadProcs | None = None) -> tuple[Plan | None, Outcome]:
    """Read the node, plan and carry out the reset of ``targets`` (the ladder's reset rung);
    ``read_mig``: the GPUs in MIG mode (an NVML read, bounded like the others); ``state_dir``:
    the node's state, where the undo is journaled and gpuhc's watchers register; ``read_procs``:
    NVML's process lists of the GPUs (the occupancy reader; None: not read, the plan refuses)."""
    from gpuhc.slurm.repair.reset_probe import ProbeSettings, holders, plan_now

    reset = remediation["reset"]
    s = ProbeSettings.from_section(reset)

    def bounded_nvml() -> NvmlReading:  # never past the run's deadline, never past a command's timeout
        return call_bounded(read_nvml, max(0.5, deadline.cap(s.timeout_s)), "NVML read")

    try:
        before = bounded_nvml()
        mig = call_bounded(read_mig, max(0.5, deadline.cap(s.timeout_s)), "NVML MIG mode") if read_mig is not None else ()
    except NvmlHung as e:
        log(f"reset procedure: not attempted: NVML hangs ({e})")
        return None, Outcome(False, True, f"not attempted: NVML hangs ({e}); the driver is wedged", wedged=True)
    plan = plan_now(remediation, targets, before, deadline, mig, state_dir=state_dir, read_procs=read_procs)
    log("reset procedure: plan: " + " | ".join(plan.lines()))
    t = Timeouts(s.timeout_s, float(remediation["reset_timeout_s"]), float(reset["fabric_timeout_s"]))
    own = Own(state_dir, float(reset.get("yield_timeout_s", 10.0)), s.proc_root) if state_dir is not None else None
    return plan, execute(plan, t, bounded_nvml, lambda: holders(s.proc_root, deadline)[0], log, deadline, own)
