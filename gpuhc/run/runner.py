"""Run one stage: select the checks, read the sources they need, judge, remember.

Time is the runner's main job. Slurm kills the health check at 60 s, and a wedged NVML call or
a stuck ``dmesg`` must not take the whole run with it. So every live source is read in its own
daemon thread (gpuhc/run/read.py; a replay's, in memory, at once), and every check waits for the
sources it needs only until its own timeout (within the stage budget). A check whose source did not answer in time is reported
by name as ``error: timed out``; the other checks still judge, and the run ends in budget.

The runner knows no check by name: how the sources are read comes from what the selected
checks declare (``Check.source_needs``, merged in gpuhc/run/plan.py), and a run that cannot
tell whose processes hold the GPUs leaves out the checks that declare they judge that
(``Check.judges_holders``). ``tests/run/test_runner_names_no_check.py`` holds it to that.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from gpuhc.checks.base import KERNEL_LOG, NVML, Check, CheckOutput, Context
from gpuhc.config.load import Config
from gpuhc.model.result import Result, Status
from gpuhc.model.snapshot import Snapshot
from gpuhc.run.hold import STATE_KEY as HELD_KEY, hold
from gpuhc.run.keep import mapping, save_state, scenario_step
from gpuhc.run.phases import mark
from gpuhc.run.plan import plan_sources, resolve, select_checks
from gpuhc.run.read import ALL, Reader, fill, recording_time, start_readers
from gpuhc.run.report import RunOptions, RunReport, one_line
from gpuhc.run.timings import Timings
from gpuhc.sources import SourceSpec, build_sources
from gpuhc.state.node import StateError, StateStore

# Time kept back from the budget for writing state and output after the last check.
RESERVE_S = 0.3


def hostname_of(opts: RunOptions) -> str:
    return opts.hostname or os.uname().nodename.split(".")[0]


def run_stage(opts: RunOptions) -> RunReport:
    mark("run")
    timings = Timings()
    t0 = time.monotonic()
    budget = opts.budget_s if opts.budget_s is not None else float(opts.config.section("budget_s")[opts.stage])
    deadline = t0 + max(0.1, budget - RESERVE_S)
    report = RunReport(node=hostname_of(opts), stage=opts.stage, started=time.time())
    if opts.config_problem is not None:
        report.config_error = opts.config_problem.to_dict()
        report.notes.append(opts.config_problem.sentence())
    checks = select_checks(opts.stage, opts.config, opts.only, opts.also)
    if not opts.occupancy:
        checks = [(c, eff) for c, eff in checks if not c.judges_holders]
    timings.mark("select")
    store = StateStore(opts.state_dir)
    try:
        prior, state_error = store.read(), None
    except StateError as e:
        # Locked by a stuck gpuhc, a lock file out of reach, an unsafe directory: judge the node
        # anyway (without memory), say so, and leave the state alone.
        prior, state_error = {}, e
    if store.problem:
        report.notes.append(store.problem)

    step = scenario_step(prior, opts.sources, report)
    prev_checks = mapping(prior.get("checks"))
    sources = build_sources(plan_sources(opts.sources, checks, opts.stage, prev_checks, opts.gpus, opts.job), step)
    readers = start_readers(sources, {n for c, _ in checks for n in (*c.needs, *c.optional)})
    timings.mark("start_sources")
    snapshot = Snapshot(hostname=report.node, time=opts.now if opts.now is not None else time.time())
    report.snapshot = snapshot

    # A recording is judged at the time of its last line, so it gives the same verdict next
    # year; that needs the log before any check runs. Wait no longer than the checks that read
    # it would: a hung recording (a FIFO, a stuck network file system) must not eat the whole
    # stage budget before any check runs. A log later than that still sets the time before a
    # check judges it (on a loaded box it came a moment after the wait gave up, and a recorded
    # Xid 79 was judged at today's date, out of its window: PASS).
    replay_clock = bool(sources.replay and opts.now is None and KERNEL_LOG in readers)
    if replay_clock:
        klog_wait = max((eff.timeout_s for c, eff in checks if KERNEL_LOG in (*c.needs, *c.optional)), default=0.0)
        readers[KERNEL_LOG].wait(min(deadline, t0 + klog_wait))
        replay_clock = not recording_time(snapshot, readers[KERNEL_LOG])

    profile = None
    baseline = _baseline(opts.config, report)
    new_state: dict[str, Any] = {}
    if prior.get("checks") is not None and not isinstance(prior["checks"], dict):
        report.notes.append("state section 'checks' was not a mapping; rebuilt from empty")
    for check, eff in checks:
        timeout = eff.timeout_s
        check_deadline = min(t0 + timeout, deadline)
        waited = time.perf_counter()
        missing = _wait_for(check, readers, check_deadline)
        if missing:
            timings.check(check.id, time.perf_counter() - waited, None, (*check.needs, *check.optional))
            waited = min(timeout, budget)
            report.results.append(
                Result(check.id, Status.ERROR, f"timed out after {waited:.1f}s reading {', '.join(missing)}")
            )
            report.timed_out.append(check.id)
            continue
        broken = [(n, readers[n].error) for n in check.needs if readers[n].error is not None]
        if broken:
            timings.check(check.id, time.perf_counter() - waited, None, (*check.needs, *check.optional))
            name, err = broken[0]
            report.results.append(Result(check.id, Status.ERROR, f"could not read {name}: {one_line(err)}"))
            continue
        late = [n for n in check.optional if not readers[n].wait(check_deadline)]
        if late:
            report.notes.append(f"{check.id}: judged without {', '.join(late)} (no answer within {timeout:.1f}s)")
        fill(snapshot, readers)
        if replay_clock:
            replay_clock = not recording_time(snapshot, readers[KERNEL_LOG])
        if profile is None:
            # Thresholds depend on the GPU model: choose once NVML answered (or gave up), so a
            # run of only kernel-log checks does not fall back to the generic profile.
            if NVML in readers:
                readers[NVML].wait(check_deadline)
                fill(snapshot, readers)
            profile = _profile(snapshot, opts.config)
            report.profile = profile.name if profile else None
        prev = prev_checks.get(check.id)
        ctx = Context(
            thresholds=eff.thresholds(check, profile),
            prev=prev if isinstance(prev, dict) else {},
            baseline=baseline,
            config=eff.config,
            gpus=opts.gpus,
            job=opts.job,
        )
        if prev is not None and not isinstance(prev, dict):
            report.notes.append(f"state of check {check.id} was not a mapping; rebuilt from empty")
        judging = time.perf_counter()
        broke: Exception | None = None
        try:
            out: CheckOutput | None = check.judge(snapshot, ctx)
        except Exception as e:  # a bug in a check must not look like a sick node
            out, broke = _judge_without_memory(check, snapshot, ctx, e, report), e
        timings.check(check.id, judging - waited, time.perf_counter() - judging, (*check.needs, *check.optional))
        if out is None:
            report.results.append(Result(check.id, Status.ERROR, f"internal error in check: {one_line(broke)}"))
            continue
        report.results.extend(out.results)
        if out.state is not None:
            new_state[check.id] = out.state

    mark("judged")
    timings.mark("checks")
    if opts.stage in ("epilog", "bootstrap") and not opts.only:
        report.results.extend(_run_active(opts, report, profile, baseline, deadline))

    if snapshot.nvml is not None and snapshot.nvml.notes:
        report.notes.extend(f"nvml: {n}" for n in snapshot.nvml.notes[:10])
    # What the findings buy once held over runs (gpuhc/catalog/evidence.py): after every check, active
    # ones too, so that one table decides for all
    report.results, held = hold(report.results, prior.get(HELD_KEY), snapshot.time, opts.config.section("evidence"))
    if state_error is None:
        save_state(store, new_state, step, opts.sources, report, held)
    else:
        report.notes.append(f"state not read nor saved: {one_line(state_error)}")
        report.results.append(Result("state", Status.ERROR, f"state not read nor saved: {one_line(state_error)}"))
    report.duration_s = time.monotonic() - t0
    mark("state")
    timings.mark("state")
    if opts.timings:
        timings.read_sources(readers)
        report.timings = timings.to_dict()
    return report


def read_snapshot(spec: SourceSpec, hostname: str, timeout_s: float = 30.0, step: int | None = None) -> Snapshot:
    """Read every source once (for `gpuhc snapshot` and `gpuhc baseline capture`)."""
    sources = build_sources(spec, step)
    readers = start_readers(sources, ALL)
    deadline = time.monotonic() + timeout_s
    late = [name for name, r in readers.items() if not r.wait(deadline)]
    if late:
        from gpuhc.errors import SourceError

        raise SourceError(f"timed out after {timeout_s:.0f}s reading {', '.join(late)}")
    for r in readers.values():
        if r.error is not None:
            from gpuhc.errors import SourceError

            raise SourceError(f"could not read {r.name}: {one_line(r.error)}")
    snap = Snapshot(hostname=hostname, time=time.time())
    fill(snap, readers)
    if sources.replay and snap.kernel and snap.kernel.last_time:
        snap.time = snap.kernel.last_time
    return snap


# ---------------------------------------------------------------------------- helpers


def _judge_without_memory(check: Check, snapshot: Snapshot, ctx: Context, error: Exception,
                          report: RunReport) -> CheckOutput | None:
    """Judge again with no memory when the check broke on its remembered state.

    A damaged slice of the state file (hand-edited, written by another version) would otherwise
    break the check on every run, for good: treat it as lost, as a corrupt state file is, and
    let the check start afresh. None when there was no memory to blame, or it breaks anyway."""
    if not ctx.prev:
        return None
    try:
        out = check.judge(snapshot, replace(ctx, prev={}))
    except Exception:
        return None
    if out.state is None:
        out.state = {}  # forget the damaged slice rather than keep it for the next run
    report.notes.append(f"state of check {check.id} was unusable ({one_line(error)}); rebuilt from empty")
    return out


def _wait_for(check: Check, readers: dict[str, Reader], deadline: float) -> list[str]:
    return [n for n in check.needs if not readers[n].wait(deadline)]


def _profile(snapshot: Snapshot, config: Config):
    from gpuhc.config.profiles import select_profile_for

    names = [g.name for g in snapshot.nvml.gpus] if snapshot.nvml else []
    return select_profile_for(names, config.section("node").get("profile"))


def _baseline(config: Config, report: RunReport) -> dict[str, Any] | None:
    """The configured baseline, read once per run (it is small, and an admin may re-capture it)."""
    path = config.section("node").get("baseline")
    if not path:
        return None
    from gpuhc.state.baseline import load

    try:
        return load(path)
    except Exception as e:
        # The checks fall back to the profile, but a baseline is what catches a node that lost a
        # GPU from the bus: without it gpuhc cannot fully judge, so say so loudly (an error
        # result, which never drains) rather than in a note.
        report.results.append(Result("baseline", Status.ERROR, f"baseline {path} unusable: {one_line(e)}"))
        return None


def _run_active(opts: RunOptions, report: RunReport, profile, baseline, deadline: float) -> list[Result]:
    remaining = deadline - time.monotonic()
    if remaining <= 1.0:
        return [Result("active", Status.ERROR, "no budget left for the active checks")]
    try:
        from gpuhc.active import run_active
        from gpuhc.active.context import ActiveContext
        from gpuhc.active.registry import CHECKS as ACTIVE
    except ImportError as e:
        return [Result("active", Status.ERROR, f"active checks unavailable: {one_line(e)}")]
    resolved = {c.id: resolve(c, opts.config) for c in ACTIVE}
    gpus = opts.gpus
    job = opts.job
    if job is not None and (job.slices or job.shared):
        # A MIG slice or a shard/MPS share is not a GPU to load: its parent runs other jobs.
        gpus = [g for g in gpus or [] if g not in job.slices and g not in job.shared]
        report.notes.append("active checks not run on GPUs the job shares with others (MIG slices, shard/mps)")
        if not gpus:
            return []
    ctx = ActiveContext(
        profile_name=profile.name if profile else "generic",
        config=opts.config.section("active"),
        gpus=gpus,
        budget_s=remaining,
        progress=opts.progress,
        checks={cid: {**eff.config, "thresholds": eff.overrides} for cid, eff in resolved.items()},
        baseline=baseline,
        busy_is_finding=opts.occupancy and _holders_judged(opts.config),
    )
    try:
        return run_active(opts.stage, ctx)
    except Exception as e:
        return [Result("active", Status.ERROR, f"internal error in active checks: {one_line(e)}")]


def _holders_judged(config: Config) -> bool:
    """Whether the config has a check on that judges who holds the GPUs (``Check.judges_holders``):
    then a GPU the active checks find busy is a finding that drains, not only an error."""
    from gpuhc.checks import passive_checks

    return any(bool(config.check_settings(c.id)["enabled"]) for c in passive_checks() if c.judges_holders)
