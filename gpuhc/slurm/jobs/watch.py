"""The node watcher (``gpuhc watch``): the jobs check every 10-15 s, faster than the health check.

The health check runs every ``HealthCheckInterval`` (300 s in slurm/slurm.conf.example), so a
hang inside a job is named on average 150 s after it starts. The watcher reads the same
samples (gpuhc/sources/job_activity.py) only of the GPUs that hold a job, judges them with the
same check (gpuhc/checks/jobs.py) and its state, and records what it calls the way the health
check does: the check's state, the job's AdminComment, the log and the ``job_finding`` hook
(gpuhc/slurm/jobs/act.py, called as it is). docs/checks.md, "jobs", "The node watcher".

- **Optional.** ``examples/systemd/gpuhc-watch.service`` is installed, never enabled.
- **Cheap.** One reader is kept, so a process's progress and GPM SM activity are measured
  between two rounds, without waiting; NVML is initialised once for the watcher's life (it
  holds no GPU context: NVML is not CUDA). A node whose GPUs hold no job costs one process
  listing per GPU a round, and writes nothing.
- **Never in the way.** It never drains, resumes or requeues on its own account (a FAIL the
  check would return is left to the health check); it takes the node's run lock
  (gpuhc/slurm/flows/runlock.py) only around the Slurm write, and gives it up when that is done.
  Its NVML would stop a GPU reset (the driver refuses one while any client holds the GPU), so it
  lets go when the reset asks (gpuhc/slurm/repair/nvml_yield.py): it looks for the request every
  ``nvml_yield.POLL_S`` between rounds, shuts NVML down, says so, waits while the request
  stands (bounded), and takes NVML back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

INTERVAL_S = 12.0  # a hang is called 12 s after it starts; one more round names it: within 30 s
IDLE_EVERY_S = 60.0  # a job whose GPUs here are all idle: its record read at most this often
POLL_S = 0.5  # between rounds, a GPU reset's request is looked for this often (one lstat)


@dataclass
class Round:
    """What one round did (for the caller's log and the tests)."""

    results: list = field(default_factory=list)
    jobs: int = 0
    published: bool = False  # the Slurm side (jobs_act) ran, under the run lock
    lock_busy: bool = False


@dataclass
class _Report:
    """The part of a RunReport that jobs_act reads."""

    results: list


class Watcher:
    """Rounds of the jobs check for one node. ``reader`` has ``read() -> Activity`` (the live
    reader kept between rounds; a replay's in tests); ``flow`` is a passive-stage Flow."""

    def __init__(self, flow: Any, reader: Any, clock: Callable[[], float] = time.time):
        from gpuhc.checks.jobs import CHECKS
        from gpuhc.run.plan import resolve

        self.flow = flow
        self.reader = reader
        self.clock = clock
        check = CHECKS[0]
        eff = resolve(check, flow.opts.config)
        self.enabled = eff.enabled
        self.thresholds = {**check.defaults, **eff.overrides}
        self._held_before = False
        self._idle_asked = float("-inf")

    def round(self) -> Round:
        from gpuhc.checks import jobs
        from gpuhc.checks.base import Context
        from gpuhc.model.result import Status
        from gpuhc.model.snapshot import Snapshot
        from gpuhc.state.node import StateStore

        out = Round()
        act = self.reader.read()
        held = bool(act.available and act.gpus)
        if not held and not self._held_before:
            return out  # no job on the GPUs now nor in the last round: nothing to judge or write
        self._held_before = held
        now = self.clock() if self.flow.opts.now is None else self.flow.opts.now
        store = StateStore(self.flow.opts.state_dir)
        doc = store.read()
        checks = doc.get("checks") if isinstance(doc.get("checks"), dict) else {}
        prev = checks.get(jobs.ID) if isinstance(checks.get(jobs.ID), dict) else {}
        judged = jobs.judge(Snapshot(self.flow.node, now, activity=act), Context(thresholds=self.thresholds, prev=prev))
        out.results = [r for r in judged.results if r.status is not Status.FAIL]  # a drain is the health check's
        out.jobs = len({r.subject for r in out.results if r.subject.startswith("job")})
        with store.transaction() as d:
            if not isinstance(d.get("checks"), dict):
                d["checks"] = {}
            d["checks"][jobs.ID] = judged.state or {}
        if self._worth_publishing(out.results, doc, now):
            self._publish(out)
        return out

    def _worth_publishing(self, results: list, doc: dict, now: float) -> bool:
        """Call the Slurm side only with something to say, as jobs_act itself decides what to
        ask (gpuhc/slurm/jobs/act.py): a view that differs from the one written, a job that
        ended, a hang the opt-in requeue may act on; a job whose GPUs here are all idle (only
        the record says whether another node sees it hung) at most every ``IDLE_EVERY_S``,
        so that a long data-loading pause costs no Slurm read every round."""
        from gpuhc.slurm.jobs.act import STATE_KEY, refused_before, views_of

        want, idle = views_of(_Report(results), self.flow.node)
        mine = doc.get(STATE_KEY) if isinstance(doc.get(STATE_KEY), dict) else {}
        skip = refused_before(_Report(results), mine)  # another user's processes: said once, never asked again
        want, idle = {j: v for j, v in want.items() if j not in skip}, idle - skip
        published = mine.get("published") if isinstance(mine.get("published"), dict) else {}
        requeued = mine.get("requeued") if isinstance(mine.get("requeued"), dict) else {}
        if any((v.token() if v else None) != published.get(j) and (v or j in published) for j, v in want.items()):
            return True
        if any(j not in want and j not in idle for j in published):
            return True
        if float(self.thresholds.get("requeue_after_s") or 0) > 0 and any(
                v is not None and v.signature == "hang" and j not in requeued for j, v in want.items()):
            return True
        if idle and now - self._idle_asked >= IDLE_EVERY_S:
            self._idle_asked = now
            return True
        return False

    def _publish(self, out: Round) -> None:
        from gpuhc.slurm.flows import runlock
        from gpuhc.slurm.jobs.act import after_healthcheck

        self.flow.restart()  # each round has the health check's whole deadline
        turn = runlock.take(self.flow.opts.state_dir, self.flow.deadline, self.flow.log)
        if not turn.ok:
            out.lock_busy = True  # a health check or prolog is acting: its run records the same
            return
        try:
            after_healthcheck(self.flow, _Report(out.results))
            out.published = True
        finally:
            runlock.release()

    def run(self, interval_s: float = INTERVAL_S, rounds: int | None = None,
            sleep: Callable[[float], None] = time.sleep) -> None:
        """Round after round every ``interval_s`` (``rounds``: stop after that many)."""
        from gpuhc.slurm.repair import nvml_yield

        try:
            registered = nvml_yield.register(self.flow.opts.state_dir)
        except Exception as e:  # unregistered, it is a holder like any other: a reset falls back to a reboot
            self.flow.log(f"watch: cannot register to let go of NVML for a GPU reset: {type(e).__name__}: {e}",
                          loud=True)
            registered = None
        try:
            self._rounds(interval_s, rounds, sleep)
        finally:
            if registered is not None:
                nvml_yield.unregister(registered)

    def _rounds(self, interval_s: float, rounds: int | None, sleep: Callable[[float], None]) -> None:
        from gpuhc.errors import GpuhcError

        done = 0
        while rounds is None or done < rounds:
            self._honour_yield(sleep)
            t0 = time.monotonic()
            try:
                r = self.round()
                for res in r.results:
                    if getattr(res.status, "value", res.status) == "warn":
                        self.flow.log(f"watch: {res.message}")
            except GpuhcError as e:  # the node could not be read this round (state, NVML): said, and on
                self.flow.log(f"watch: round not judged: {e}", loud=True)
            except Exception as e:  # a bug in one round must not stop the watching
                self.flow.log(f"watch: internal error: {type(e).__name__}: {e}", loud=True)
            done += 1
            if rounds is not None and done >= rounds:
                break
            while (left := interval_s - (time.monotonic() - t0)) > 0:  # a reset's request seen within POLL_S
                self._honour_yield(sleep)
                sleep(min(left, POLL_S))

    def _honour_yield(self, sleep: Callable[[float], None]) -> bool:
        """A GPU reset asks for NVML (gpuhc/slurm/repair/nvml_yield.py): shut it down, say so, wait
        while the request stands (never past its end nor ``MAX_YIELD_S``), take NVML back.
        True when it yielded."""
        from gpuhc.slurm.repair import nvml_yield

        state_dir = self.flow.opts.state_dir
        try:
            req = nvml_yield.asked(state_dir)
            if req is None:
                return False
            release = getattr(self.reader, "release", None)
            if release is not None:
                release()
            ack = nvml_yield.acknowledge(state_dir, req)
        except Exception as e:  # cannot yield: the reset says gpuhc was in the way and tries again later
            self.flow.log(f"watch: could not let go of NVML for a GPU reset: {type(e).__name__}: {e}", loud=True)
            return False
        self.flow.log(f"watch: a GPU reset asked for NVML: let go (request {req.id})", loud=True)
        end = time.monotonic() + min(nvml_yield.MAX_YIELD_S, max(0.0, req.until - time.time()))
        try:
            while time.monotonic() < end and nvml_yield.asked(state_dir) is not None:
                sleep(nvml_yield.POLL_S)
        finally:
            nvml_yield.withdraw(ack)
        self._held_before = False  # the samples before the reset say nothing about after it
        self.flow.log("watch: the GPU reset is over: NVML taken back at the next round")
        return True


def live_reader(config: Any) -> Any:
    """The live activity reader the watcher keeps, NVML initialised for its life."""
    from gpuhc.checks.jobs import CHECKS, source_settings
    from gpuhc.run.plan import resolve
    from gpuhc.sources.job_activity import ActivityLive

    eff = resolve(CHECKS[0], config)
    settings = source_settings({**CHECKS[0].defaults, **eff.overrides})
    settings["gpm_window_s"] = 0.0  # GPM between rounds instead: no wait
    return _HeldNvml(ActivityLive(**settings))


class _HeldNvml:
    """NVML initialised once and held, so each read's own init and shutdown only count up and
    down, and a GPM sample taken in one round is still good in the next. Until the driver
    answers (a watcher started before it at boot), each round tries again, without GPM."""

    def __init__(self, reader: Any):
        self.reader = reader
        self.held = False

    def read(self) -> Any:
        if not self.held:
            try:
                import pynvml

                pynvml.nvmlInit()
                self.held = True
            except Exception:
                pass  # the read below says NVML is unavailable, as the health check would
        self.reader.gpm_between_reads = self.held
        return self.reader.read()

    def release(self) -> None:
        """Let go of NVML for a GPU reset: the GPM samples carried between rounds freed first
        (they belong to the session ending), then the held initialisation. The next read
        initialises it again."""
        if not self.held:
            return
        import pynvml

        try:
            self.reader._gpm_drop(pynvml, set())
        except Exception:
            pass  # a sample that cannot be freed goes with the session
        self.held = False
        pynvml.nvmlShutdown()
