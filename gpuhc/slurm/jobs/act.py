"""After the health check: publish this node's view of each running job, and act on a hang.

The jobs check (gpuhc/checks/jobs.py) only judges; this is its Slurm side (docs/checks.md, "jobs"):

- **Record.** A job this node sees hung or slowed (a called warning) gets this node's view in
  its AdminComment (gpuhc/slurm/jobs/record.py), fires the ``job_finding`` hook, and is logged
  (the run's event log line already carries the check's result with culprit and since). A node
  whose GPUs of a job are all idle adds its view only to a job some node has already recorded
  as hung: that idle node is the likely culprit (so an all-idle job costs one
  ``scontrol show job`` per run). A view that went back to normal is removed.
- **Ask Slurm only with something to say.** What was written is remembered in the state, so a
  job hung for an hour costs one ``scontrol show job`` and one update, not one per run.
- **Never a drain here.** The opt-in drain is the check's own failure (repeat culprit), decided
  and sent by the health check's normal flow through the actuator.
- **Opt-in requeue** (``checks.jobs.thresholds.requeue_after_s`` > 0): a job hung that long,
  with a culprit node named, is requeued with that node excluded (gpuhc/slurm/jobs/control.py);
  once per job, fires ``job_requeue``.

**Only a job Slurm says runs here** (docs/security.md, "Acting safely"): each job is read as
Slurm describes it (gpuhc/slurm/jobs/control.py) and left alone, said once, unless it is RUNNING
with this node in its node list; a job found only through a process's environment (which its
owner can set to any job id) is never written or requeued. **And only for the job's user**: the
owners of the job's processes on this node's GPUs (the kernel's real uids, read by the activity
source) must be the job's user as Slurm reports it (``user_id``, or squeue's ``%U`` on 22.05);
root's processes in a job are slurmstepd's and neither claim nor refute it (gpuhc/checks/jobs.py,
``job_user``). A job whose processes another user owns, or several users, or nobody known, is
neither written nor requeued; said once in the log and remembered, so it costs no Slurm call
in later runs. A job Slurm confirms (running here, for its processes' owner) is marked so in the
jobs check's culprit memory: only such jobs count towards the repeat-culprit drain.
Job ids are normalised (``0000778`` is 778). **Concurrent writers** (every node of a job, in the same second): read, merge this
node's view, write, read back; when the view did not survive (another node wrote over it), again,
up to :data:`WRITE_TRIES` times. What is remembered as published is what Slurm kept.

Every Slurm failure is a log line; nothing here changes the run's verdict or exit code.
"""

from __future__ import annotations

import time
from typing import Any

from gpuhc.errors import SlurmError
from gpuhc.slurm.jobs import record as rec

MAX_READS = 16  # jobs asked about per run: a node holds a handful of jobs, never more reads than that
STATE_KEY = "jobs_slurm"
WRITE_TRIES = 4  # read-merge-write-read back rounds per job and run
SETTLE_S = (0.3, 0.8)  # the second read-back's wait: longer than another node's read, merge and write


def views_of(report: Any, node: str) -> tuple[dict[str, rec.NodeView | None], set[str]]:
    """From the run's jobs results: {job: the view to publish, or None}, and the jobs whose GPUs
    here are all idle (published only next to another node's hang)."""
    want: dict[str, rec.NodeView | None] = {}
    idle: set[str] = set()
    for r in report.results:
        v = r.value if r.check == "jobs" and isinstance(r.value, dict) else None
        if v is None or not isinstance(v.get("job"), str) or not v["job"].isdigit() or len(v["job"]) > 12:
            continue
        if v.get("via") and "cgroup" not in v["via"]:
            continue  # found only through its environment: the user's word, never acted on
        job, sig = str(int(v["job"])), v.get("signature")
        called = getattr(r.status, "value", r.status) == "warn"
        if called and sig in ("hang", "straggler"):
            want[job] = rec.NodeView(node, sig, int(v.get("since") or 0), tuple(v.get("culprits") or ()))
        elif sig == "idle":
            idle.add(job)
        else:
            want[job] = None
    return want, idle


def owners_of(report: Any) -> dict[str, list[int]]:
    """{job: the uids owning its processes on this node's GPUs} from the run's jobs results."""
    out: dict[str, list[int]] = {}
    for r in report.results:
        v = r.value if r.check == "jobs" and isinstance(r.value, dict) else None
        if v is None or not isinstance(v.get("job"), str) or not v["job"].isdigit() or len(v["job"]) > 12:
            continue
        uids = v.get("owners") if isinstance(v.get("owners"), list) else []
        out[str(int(v["job"]))] = sorted({u for u in uids if isinstance(u, int) and not isinstance(u, bool)})
    return out


def owners_token(uids: list[int]) -> str:
    return ",".join(map(str, uids)) or "-"


def refused_before(report: Any, mine: dict[str, Any]) -> set[str]:
    """The jobs refused in an earlier run for the same owners (see the module doc): nothing to
    ask Slurm about them again."""
    old = mine.get("refused") if isinstance(mine.get("refused"), dict) else {}
    return {j for j, uids in owners_of(report).items() if old.get(j) == owners_token(uids)}


def after_healthcheck(flow: Any, report: Any) -> None:
    """Never raises."""
    try:
        _run(flow, report)
    except Exception as e:  # a bug here must not look like a sick node
        flow.log(f"jobs: internal error publishing job findings: {type(e).__name__}: {e}", loud=True)


def _run(flow: Any, report: Any) -> None:
    from gpuhc.state.node import StateStore

    node = flow.node
    want, idle = views_of(report, node)
    if not want and not idle:
        return  # no job on the GPUs (or the check off): not even the state is read
    store = StateStore(flow.opts.state_dir)
    mine = store.read().get(STATE_KEY) or {}
    skip = refused_before(report, mine)
    published: dict[str, str] = dict(mine.get("published") or {})
    requeued: dict[str, float] = dict(mine.get("requeued") or {})
    owners = owners_of(report)
    refused = {j: owners_token(owners[j]) for j in skip}
    todo = [j for j, v in want.items() if (v.token() if v else None) != published.get(j) and (v or j in published)]
    todo += sorted(idle)  # one read each: only the record says whether another node sees a hang
    thresholds = flow.opts.config.check_settings("jobs").get("thresholds") or {}
    requeue_after = float(thresholds.get("requeue_after_s") or 0.0)
    if requeue_after > 0:  # a recorded hang is looked at again until it is old enough to requeue
        todo += [j for j, v in want.items() if v is not None and v.signature == "hang" and j not in requeued and j not in todo]
    if not todo:
        return
    from gpuhc.slurm.jobs.control import JobControl

    sl = flow.slurm
    ctl = JobControl.from_section(sl, deadline=flow.deadline,
                                  warn=lambda line: flow.log(f"jobs: {line}", loud=True))
    from gpuhc.checks.jobs import confirm_culprit, job_user

    confirmed: dict[str, int] = {}

    for job in todo[:MAX_READS]:
        view = want.get(job)
        uids = owners.get(job) or []
        who = owners_token(uids)
        if job in skip:
            continue  # these processes were refused before: said once, no Slurm call
        user = job_user(uids)
        try:
            info = None if user is None else ctl.show_job(job)
            if info is not None and not info.runs_on(node):
                flow.log(f"jobs: job {job}: Slurm does not show it running on {node} ({info.state or 'no state'}): "
                         "left alone", loud=True)
                published.pop(job, None)
                continue
            if info is None or info.uid != user:
                whose = f"uid {who}" if uids else "no owner known"
                flow.log(f"jobs: job {job}: its processes on {node}'s GPUs ({whose}) are not its user's"
                         + (f" (Slurm: uid {info.uid})" if info is not None else "")
                         + ": left alone, not written, not requeued", loud=True)
                refused[job] = who
                published.pop(job, None)
                continue
            confirmed[job] = user  # Slurm runs it here for the owner of its processes: it may count
            if view is None and job in idle and rec.combine([v for v in rec.parse(info.admin_comment)
                                                             if v.node != node]).verdict == "hung":
                said = rec.parse("gpuhc-jobs{" + published.get(job, "") + "}")
                view = rec.NodeView(node, "idle", said[0].since if said else int(flow.now()))
            info = _write(ctl, job, view, node, info)
        except SlurmError as e:
            flow.log(f"jobs: job {job}: not recorded: {e}", loud=True)
            continue
        if view is None:
            published.pop(job, None)
            continue
        finding = rec.combine(rec.parse(info.admin_comment))
        if requeue_after > 0 and job not in requeued and view.signature == "hang":
            _maybe_requeue(flow, ctl, job, info, finding, requeue_after, requeued)
        if published.get(job) == view.token():
            continue  # said before: no second log line or hook
        published[job] = view.token()
        flow.log(f"jobs: job {job} {finding.verdict or view.signature}: culprit "
                 f"{', '.join(finding.culprits) or 'not named yet'}, since {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(finding.since or view.since))}",
                 loud=True)
        _hook(flow, "job_finding", {"node": node, "job": job, "signature": view.signature, "culprits": list(view.culprits),
                                    "since": view.since, "verdict": finding.verdict, "job_culprits": finding.culprits})
    for job in [j for j in published if j not in want and j not in idle]:
        published.pop(job)  # the job ended: its record went with it
    with store.transaction() as doc:
        for job, uid in confirmed.items():  # the repeat-culprit count takes only jobs Slurm confirmed
            confirm_culprit((doc.get("checks") or {}).get("jobs"), job, uid)
        doc[STATE_KEY] = {"published": published, "refused": refused,
                          "requeued": {j: t for j, t in requeued.items() if flow.now() - t < 7 * 86400}}


def _write(ctl: Any, job: str, view: rec.NodeView | None, node: str, info: Any) -> Any:
    """Set this node's view in the job's AdminComment, safe against the job's other nodes doing
    the same: read, merge, write, read back; again while the view is not what Slurm kept. The
    job as read last (what Slurm kept); SlurmError when the view never stuck."""
    import random

    for attempt in range(WRITE_TRIES):
        new = rec.update(info.admin_comment, view, node)
        if new is None:
            return info  # Slurm already holds exactly this node's view (or none, as wanted)
        if attempt:
            time.sleep(random.uniform(0.05, 0.3) * attempt)  # writers that raced must not race again
            info = ctl.show_job(job)
            new = rec.update(info.admin_comment, view, node)
            if new is None:
                return info
        ctl.set_admin_comment(job, new)
        info = ctl.show_job(job)
        if rec.update(info.admin_comment, view, node) is None:
            # Kept, for now: a node that read before our write may still write after it, without
            # our view. Look once more after that writer's read-write time has passed.
            time.sleep(random.uniform(*SETTLE_S))
            info = ctl.show_job(job)
            if rec.update(info.admin_comment, view, node) is None:
                return info
    raise SlurmError(f"AdminComment of job {job}: this node's view was overwritten {WRITE_TRIES} times")


def _maybe_requeue(flow: Any, ctl: Any, job: str, info: Any, finding: rec.JobFinding, after_s: float,
                   requeued: dict[str, float]) -> None:
    nodes = rec.culprit_nodes(finding)
    if finding.verdict != "hung" or not nodes or finding.since is None or flow.now() - finding.since < after_s:
        return
    try:
        ctl.requeue_excluding(job, nodes, info.excluded)
    except SlurmError as e:
        flow.log(f"jobs: job {job}: requeue without {','.join(nodes)} failed: {e}", loud=True)
        return
    requeued[job] = flow.now()
    flow.log(f"jobs: job {job} hung since {finding.since}: requeued without {','.join(nodes)}", loud=True)
    _hook(flow, "job_requeue", {"node": flow.node, "job": job, "excluded": nodes, "culprits": finding.culprits})


def _hook(flow: Any, event: str, payload: dict[str, Any]) -> None:
    from gpuhc.export.hooks import fire

    fire(event, {"stage": "passive", **payload}, flow.opts.config, flow.log, flow.deadline)
