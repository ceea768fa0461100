"""jobs: inside the running job, a collective hang with its culprit GPU, or a straggler.

The health check runs on busy nodes too (Slurm's ``HealthCheckNodeState=ANY``); this check looks
at what the GPUs that running jobs hold are doing (gpuhc/sources/job_activity.py) and classes
each job by its signature (gpuhc/checks/jobs_judge.py). The rules (docs/checks.md, "jobs"):

- A signature is called once it has lasted ``hang_min_s`` (``straggler_min_s``): from this
  run's samples alone when they span that long, else from the time an earlier run first saw it
  (the check's state keeps, per job, since when). A job that changes signature starts again.
- A hang or a straggler is a warning, never a drain: a hang can be the application (a rank
  writing a checkpoint alone looks the same). It names the culprit GPU; the health check's
  Slurm side writes it into the job's AdminComment, the event log and the hooks
  (gpuhc/slurm/jobs/act.py), and ``gpuhc jobs`` shows every node's view together.
- Opt-in (``drain_culprit_jobs`` > 0): a node whose GPU is the culprit of that many different
  jobs' hangs within ``culprit_memory_s`` fails, with a drain, in the runs that see one of those
  hangs go on: one job's hang may be its own doing, the same GPU stalling job after job is not.
  Counted per GPU, per job Slurm confirms and per user: the jobs of one user count
  once on a GPU, so no user alone can drain a node by hanging their own jobs. A job counts only
  when slurmstepd's cgroup names it, its processes have one owner (root's processes in it are
  slurmstepd's and neutral), and the Slurm side has confirmed that Slurm runs it here for that
  user (:func:`confirm_culprit`, called by gpuhc/slurm/jobs/act.py after its read of the job): a
  check judges without Slurm, so a hang counts from the run after the one that called it.
  (Once the hung job is gone the node judges healthy again, as after any finding gpuhc does not
  hold in its state: docs/slurm.md's hysteresis decides when it goes back.) Opt-in too (``drain_culprit_with_hardware``):
  a culprit GPU whose own counters show a hardware sign in the same run (lost, uncorrectable
  ECC, row remapping, a hardware clock slowdown, fabric not up) fails the node.
- A job whose GPUs are all idle (data loading, a checkpoint everyone writes) is never hung.
- A pause is not a hang: an idle GPU's rank busy on the host (gpuhc/checks/jobs_judge.py,
  ``host_busy``) is said and passes, until it has lasted ``pause_max_s``. ``since`` is carried
  from an earlier run only while nothing says the signature was broken in between: a run that
  saw the job otherwise starts it again, and so does a culprit process that used CPU time since
  the last run (a rank that trained between two checkpoints) or a change of processes; runs
  closer together than the sample window (the node watcher's) overlap, which is proof enough.
  A pause is carried only by such overlapping runs: a rank busy on the host uses CPU time
  either way, and checkpoints five minutes apart must not add up to a long pause.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks import jobs_judge as jj
from gpuhc.checks.base import ACTIVITY, NVML, Check, CheckOutput, Context, SourceNeeds, na, result
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "jobs"
_KEEP_CULPRITS = 100  # culprit findings remembered (a drain needs a handful)
_OVERLAP_SLACK_S = 5.0  # runs this much further apart than the window still overlap (the buffer keeps ~14 s)
_STUCK_CPU_SHARE = 0.05  # a stuck rank's process uses at most this share of a core (its background threads)
_CPU_NOISE_S = 1.0


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    act = snapshot.activity
    if act is None:
        return CheckOutput([na(ID, "job activity not read (a recording without an activity section)")])
    if not act.available:
        return CheckOutput([na(ID, f"NVML unavailable: {act.error or 'no reason given'}")], state=ctx.prev or None)
    t = {**jj.DEFAULTS, **ctx.thresholds}
    now = snapshot.time
    by_job: dict[str, list] = {}
    for g in act.gpus:
        for job in g.jobs:
            by_job.setdefault(job, []).append(g)
    prev_jobs = ctx.prev.get("jobs") if isinstance(ctx.prev.get("jobs"), dict) else {}
    culprits = _culprit_memory(ctx.prev, now, float(t["culprit_memory_s"]))
    jobs_state: dict[str, Any] = {}
    results: list[Result] = []
    for job in sorted(by_job, key=_job_order):
        gpus = sorted(by_job[job], key=lambda g: g.index)
        view = jj.job_view(job, gpus, t, act.job_nodes.get(job), act.job_names.get(job))
        mem = prev_jobs.get(job) if isinstance(prev_jobs.get(job), dict) else {}
        since = now - view.span_s
        if _continued(mem, view, gpus, now, t):
            since = min(since, float(mem["since"]))
        jobs_state[job] = {"signature": view.signature, "since": since, "culprits": view.culprits,
                           "gpus": [g.index for g in gpus], "via": sorted({g.via for g in gpus}), "seen": now,
                           "pids": sorted({p for g in gpus for p in g.pids}), "culprit_cpu_s": _culprit_cpu(view, gpus),
                           "owners": sorted({u for g in gpus for u in g.owners.get(job, ())})}
        lasted = now - since
        if view.signature == jj.PAUSE and lasted >= float(t["pause_max_s"]):
            view.signature = jj.HANG  # a pause this long while the peers wait: a hang all the same
            view.evidence = f"a pause of {lasted:.0f} s while its peers wait, past pause_max_s: {view.evidence}"
        results.append(_result(view, gpus, lasted, since, t))
        # Only a job slurmstepd's cgroup names counts towards a drain: an id from a process's
        # environment is its owner's word, and one user could invent several (docs/security.md).
        user = job_user(jobs_state[job]["owners"])
        if view.signature == jj.HANG and view.culprits and lasted >= float(t["hang_min_s"]) \
                and all(g.via == "cgroup" for g in gpus) and user is not None:
            was = culprits.get(job) or {}
            culprits[job] = {"time": now, "gpus": view.culprits, "user": user}
            if was.get(CONFIRMED) == user:
                culprits[job][CONFIRMED] = user  # Slurm's word stays while the user does
    state = {"jobs": jobs_state, "culprits": dict(sorted(culprits.items(), key=lambda kv: kv[1]["time"])[-_KEEP_CULPRITS:])}
    if not by_job:
        results.append(result(ID, Status.PASS, "no GPU held by a running job"
                              + (f" ({act.unmapped_pids} GPU processes outside any Slurm job)" if act.unmapped_pids else "")))
    # a counted hang seen going on in this run (by this run's jobs: a replayed recording's runs share one time)
    hung_here = any(job in by_job and c["time"] == now and _counted(c) for job, c in culprits.items())
    drain = _repeat_drain(culprits, int(t["drain_culprit_jobs"])) if hung_here else None
    if drain is not None:
        results.append(drain)
    if t["drain_culprit_with_hardware"]:
        results.extend(_hardware_drains(snapshot, results))
    return CheckOutput(results, state=state)


CONFIRMED = "confirmed"  # a culprit entry's key: the uid Slurm confirmed runs the job here


def confirm_culprit(state: Any, job: str, uid: int) -> None:
    """The Slurm side's word (gpuhc/slurm/jobs/act.py) on this check's saved state: Slurm runs
    ``job`` on this node for ``uid``. Only an entry of that same user is marked."""
    entry = state.get("culprits", {}).get(job) if isinstance(state, dict) and isinstance(state.get("culprits"), dict) else None
    if isinstance(entry, dict) and entry.get("user") == uid:
        entry[CONFIRMED] = uid


def _counted(c: dict[str, Any]) -> bool:
    user = c.get("user")
    return isinstance(user, int) and not isinstance(user, bool) and c.get(CONFIRMED) == user


def job_user(owners: list[int]) -> int | None:
    """The one user whose job this is, from its processes' owners: the one uid other than root's
    (root's processes in a job are slurmstepd's or root's own: they neither claim nor refute a
    job), root when root owns them all; None when nobody or several users own them."""
    users = {u for u in owners if u != 0}
    if len(users) > 1 or not owners:
        return None
    return users.pop() if users else 0


def _hardware_drains(snapshot: Snapshot, results: list[Result]) -> list[Result]:
    """Opt-in: a called hang whose culprit GPU here also shows a hardware sign fails the node."""
    gpus = {g.index: g for g in snapshot.nvml.gpus} if snapshot.nvml is not None else {}
    out = []
    for r in results:
        if r.status is not Status.WARN or not isinstance(r.value, dict) or r.value.get("signature") != jj.HANG:
            continue
        for name in r.value["culprits"]:
            g = gpus.get(int(name[3:]))
            signs = jj.hardware_signs(g) if g is not None else []
            if signs:
                out.append(result(ID, Status.FAIL, f"{name} stalled job {r.value['job']} and shows {', '.join(signs)}",
                                  name, value=signs, action=Action.DRAIN_REBOOT))
    return out


def _continued(mem: dict[str, Any], view: jj.JobView, gpus: list, now: float, t: dict[str, Any]) -> bool:
    """Did the previous run's signature go on without a break until now? The same signature
    and culprits, the same processes, and either runs close enough for their samples to
    overlap or culprit processes that used no CPU time in between (a stuck rank does not; a
    rank that trained between two checkpoints did)."""
    if mem.get("signature") != view.signature or not isinstance(mem.get("since"), (int, float)):
        return False
    if mem.get("culprits") != view.culprits or mem.get("pids", []) != sorted({p for g in gpus for p in g.pids}):
        return False
    seen = mem.get("seen")
    if not isinstance(seen, (int, float)) or now - seen <= float(t["window_s"]) + _OVERLAP_SLACK_S:
        return True  # an old state without "seen", or the samples of this run reach back to the last
    if view.signature == jj.PAUSE:
        return False  # a busy rank uses CPU time anyway: only overlapping runs (the watcher's) prove one long pause
    before, cpu = mem.get("culprit_cpu_s"), _culprit_cpu(view, gpus)
    if not isinstance(before, (int, float)) or cpu is None:
        return True  # nothing measured says otherwise
    return cpu - before <= _STUCK_CPU_SHARE * (now - seen) + _CPU_NOISE_S


def _culprit_cpu(view: jj.JobView, gpus: list) -> float | None:
    """The culprit GPUs' processes' CPU time so far (None when not measured)."""
    cpu = [g.host_cpu_total_s for g in gpus if g.index in view.culprits]
    return round(sum(cpu), 2) if cpu and all(c is not None for c in cpu) else None


def _job_order(job: str) -> tuple[int, str]:
    return (int(job), job) if job.isdigit() else (1 << 62, job)


def _result(view: jj.JobView, gpus: list, lasted: float, since: float, t: dict[str, Any]) -> Result:
    subject = f"job{view.job}"
    where = ",".join(f"gpu{g.index}" for g in gpus)
    value = {"job": view.job, "signature": view.signature, "culprits": [f"gpu{i}" for i in view.culprits],
             "since": round(since, 1), "lasted_s": round(lasted, 1), "gpus": {f"gpu{i}": c for i, c in view.classes.items()},
             "via": sorted({g.via for g in gpus}), "owners": sorted({u for g in gpus for u in g.owners.get(view.job, ())})}
    environ = " (job found through its environment only)" if "cgroup" not in value["via"] else ""
    if view.signature == jj.HANG:
        named = ", ".join(value["culprits"]) if view.culprits else f"none named (every GPU of the job on this node spins: {view.place})"
        if lasted >= float(t["hang_min_s"]):
            return result(ID, Status.WARN, f"job {view.job} looks hung for {lasted:.0f} s: GPUs spin in a collective with no "
                          f"memory traffic; culprit: {named}; {view.evidence}{environ}", subject, value=value,
                          threshold=t["hang_min_s"], action=Action.RESTART_APP)
        return result(ID, Status.PASS, f"job {view.job} ({where}): hang suspected for {lasted:.0f} s, called after "
                      f"{float(t['hang_min_s']):.0f} s", subject, value=value, threshold=t["hang_min_s"])
    if view.signature == jj.STRAGGLER:
        if lasted >= float(t["straggler_min_s"]):
            return result(ID, Status.WARN, f"job {view.job} slowed by a straggler for {lasted:.0f} s: {view.evidence}{environ}",
                          subject, value=value, threshold=t["straggler_wait_share"])
        return result(ID, Status.PASS, f"job {view.job} ({where}): straggler suspected for {lasted:.0f} s: {view.evidence}",
                      subject, value=value, threshold=t["straggler_min_s"])
    if view.signature == jj.PAUSE:
        return result(ID, Status.PASS, f"job {view.job} ({where}): a pause, not a hang, for {lasted:.0f} s: {view.evidence} "
                      f"while its peers wait (called a hang after {float(t['pause_max_s']):.0f} s)", subject, value=value,
                      threshold=t["pause_max_s"])
    words = {jj.ALL_IDLE: "all GPUs idle (not a hang)", jj.RUNNING: "running", jj.UNKNOWN: "too few samples to judge"}
    more = f"; {view.evidence}" if view.signature == jj.RUNNING and view.evidence else ""
    return result(ID, Status.PASS, f"job {view.job} ({where}): {words[view.signature]}{more}", subject, value=value)


def _culprit_memory(prev: dict[str, Any], now: float, keep_s: float) -> dict[str, Any]:
    old = prev.get("culprits") if isinstance(prev.get("culprits"), dict) else {}
    return {job: c for job, c in old.items()
            if isinstance(c, dict) and isinstance(c.get("time"), (int, float)) and now - c["time"] <= keep_s}


def _repeat_drain(culprits: dict[str, Any], needed: int) -> Result | None:
    """A GPU named culprit of hung jobs of ``needed`` different users, each job confirmed by
    Slurm (a job of an unknown user, as in a state an older release wrote, counts for none)."""
    if needed <= 0:
        return None
    users: dict[int, set[int]] = {}
    jobs: dict[int, list[str]] = {}
    for job, c in culprits.items():
        if not _counted(c):
            continue
        for g in c.get("gpus", []):
            if isinstance(g, int) and not isinstance(g, bool):
                users.setdefault(g, set()).add(c["user"])
                jobs.setdefault(g, []).append(job)
    hit = sorted(g for g, u in users.items() if len(u) >= needed)
    if not hit:
        return None
    named = sorted({j for g in hit for j in jobs[g]}, key=_job_order)
    most = max(len(users[g]) for g in hit)
    return result(ID, Status.FAIL, f"culprit of {len(named)} jobs' hangs of {most} users (gpu{',gpu'.join(map(str, hit))}; "
                  f"jobs {', '.join(named[-5:])})", "node", value=most, threshold=needed, action=Action.DRAIN_REBOOT)


def source_settings(thresholds: dict[str, Any]) -> dict[str, Any]:
    """What the activity reader needs from the check's thresholds (the runner passes them on)."""
    t = {**jj.DEFAULTS, **thresholds}
    return {"window_s": float(t["window_s"]), "gpm_window_s": float(t["gpm_window_s"]),
            "environ": bool(t["environ_fallback"]), "progress_window_s": float(t["progress_window_s"]),
            "idle_util_max": float(t["idle_util_max"]), "spin_util_min": float(t["spin_util_min"]),
            "spin_mem_util_max": float(t["spin_mem_util_max"])}


CHECKS = [
    Check(
        id=ID,
        needs=(ACTIVITY,),
        optional=(NVML,),  # the culprit GPU's own counters, for the opt-in hardware drain
        judge=judge,
        stages=("passive",),
        timeout_s=10.0,
        defaults=dict(jj.DEFAULTS),
        doc="a running job's GPUs: collective hang and its culprit GPU, straggler (never drains unless asked)",
        validate=jj.validate,
        source_needs=lambda r: SourceNeeds(activity=source_settings(r.thresholds)),
    )
]
