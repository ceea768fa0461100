"""occupancy: does anything still hold the GPUs a job is about to get, or has just left?

A job's leftover process (a hung rank, a daemonised data loader, an orphan that escaped the
job's cgroup) keeps its memory and often its SMs, so the next job on that GPU runs out of
memory or at half speed, and nothing in the hardware counters says why. The rules
(docs/checks.md, "occupancy"):

- Prolog: the job's GPUs hold no compute process and at most ``max_used_mib`` of memory.
- Epilog: the same, after the reader waited up to ``epilog_wait_s`` for the job's processes to
  exit (a rank that is still flushing a checkpoint is not a stray yet).
- Memory in use with no process left is the same finding: a context the driver never freed,
  or a process NVML cannot see from here (another PID namespace). Where NVML gives the figure
  without the driver's reserve (an idle GPU reads 0 MiB), more than ``leaked_mib`` is enough;
  beside a listed process, or in the older figure that holds the reserve, ``max_used_mib``.
- A graphics-only process (a display server) is not a finding by itself; its memory counts.
- A process ``allowed_processes`` names (exact name AND owner uid; default DCGM's
  ``nv-hostengine`` as root) is a monitor, not a stray: neither it nor its memory is a finding,
  and the epilog does not wait for it. Its name alone never allows it (docs/security.md).

- MIG: a job on a slice is judged on that slice alone: only processes in its GPU instance
  (and compute instance, where Slurm gave one) count, and the memory in use is the instance's.
  A process on a sibling slice is another job's.
- Shared GPUs (gres.conf lends the GPU as ``shard`` or ``mps``, docs/checks.md "occupancy"):
  other jobs' processes are expected there, so the prolog judges nothing of who holds such a
  GPU; the epilog still waits for the GPU to be free of compute processes only when the GPU is
  not shared. The report says so.

Every failure drains (``drain + reboot``: killing the process may not free a wedged context)
with a reason naming the GPU, the pids, their names and the GiB held. The health check runs
this check only on a node gpuhc holds out of service for it (gpuhc/slurm/policy/drain.py ``rejudge``):
on a node in service a process on a GPU is a running job.
"""

from __future__ import annotations

from gpuhc.checks.base import PROCS, Check, CheckOutput, Context, ReadContext, SourceNeeds, na, result
from gpuhc.model.occupancy import GpuOccupancy, GpuProcess
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "occupancy"
_NAMED = 3  # processes named in one message; the rest are counted (a reason holds 255 bytes)
_COMM_MAX = 15  # the kernel keeps 15 bytes of a process's name (TASK_COMM_LEN less its NUL)


def wait_for_stage(stage: str, thresholds: dict, timeout_s: float) -> tuple[float, float]:
    """(seconds, MiB): how long the reader may wait for the job's processes to exit and the
    memory they leave to drop to ``leaked_mib`` (the next prolog's bound). Only the epilog waits,
    and never so long that the check itself times out."""
    mib = float(thresholds.get("leaked_mib", 15))  # what a GPU with no process left may hold (v2 figure)
    if stage != "epilog":
        return 0.0, mib
    wait = float(thresholds.get("epilog_wait_s") or 0.0)
    return max(0.0, min(wait, timeout_s - 1.0)), mib


def allowed_rules(thresholds: dict) -> tuple[tuple[str, int], ...]:
    """``allowed_processes`` as (name, owner uid) pairs (malformed entries are _validate's to
    report, and allow nothing)."""
    rules = thresholds.get("allowed_processes") or []
    return tuple(sorted({(e["name"], e["uid"]) for e in rules if not _rule_error(e)})) if isinstance(rules, list) else ()


def _source_needs(r: ReadContext) -> SourceNeeds:
    wait, mib = wait_for_stage(r.stage, r.thresholds, r.timeout_s)
    return SourceNeeds(occupancy_wait_s=wait, occupancy_settle_mib=mib, occupancy_allowed=allowed_rules(r.thresholds))


def describe(p: GpuProcess) -> str:
    name = "no longer in /proc" if p.gone else (p.name or "name unknown")
    if "graphics" in p.kinds:
        name += f", {p.kinds}"
    size = "" if p.used_mib is None else f", {p.used_mib / 1024:.1f} GiB"
    return f"pid {p.pid} ({name}{size})"


def _judge_gpu(gpu: GpuOccupancy, max_used: float, waited: str, rules: tuple[tuple[str, int], ...],
               leaked: float = 15.0) -> Result:
    s = gpu.subject
    if gpu.error:
        return result(ID, Status.ERROR, f"{s}: {gpu.error}", s)
    monitors = [p for p in gpu.processes if p.allowed(rules)]
    others = [p for p in gpu.processes if not p.allowed(rules)]
    compute = [p for p in others if "compute" in p.kinds]
    used = gpu.memory_used_mib
    held = "" if used is None else f"; {used / 1024:.1f} GiB in use"
    if used is not None and monitors:
        used = gpu.unallowed_used_mib(rules)  # an allowed monitor's own memory is not the finding
    if compute:
        named = ", ".join(describe(p) for p in compute[:_NAMED])
        more = f" and {len(compute) - _NAMED} more" if len(compute) > _NAMED else ""
        what = "process" if len(compute) == 1 else "processes"
        return result(ID, Status.FAIL, f"{s} holds {len(compute)} compute {what}{waited}: {named}{more}{held}",
                      s, value=[p.pid for p in compute], threshold=0, action=Action.DRAIN_REBOOT)
    if gpu.mig:
        used = None  # the instances' memory (docs/checks.md): processes are what is judged
    if used is not None and not gpu.processes and gpu.memory_reserved_mib is not None and used > leaked:
        # No process left at all, and the figure leaves the driver's reserve out (an idle GPU
        # reads 0 MiB): whatever is held is a context nobody owns any more.
        return result(ID, Status.FAIL, f"{s} has {used:.0f} MiB in use with no process left (a context the driver "
                      f"never freed, or a process in another PID namespace){waited}", s,
                      value=used, threshold=leaked, action=Action.DRAIN_REBOOT)
    if used is not None and used > max_used:
        named = ", ".join(describe(p) for p in others[:_NAMED])
        who = f" by {named}" if named else " with no process listed (leaked context, or a process in another PID namespace)"
        return result(ID, Status.FAIL, f"{s} has {used / 1024:.1f} GiB in use{who}{waited}", s,
                      value=used, threshold=max_used, action=Action.DRAIN_REBOOT)
    allowed = f", allowed: {', '.join(describe(p) for p in monitors[:_NAMED])}" if monitors else ""
    if used is None and not others:
        why = "MIG on: memory not judged" if gpu.mig else "memory use not reported"
        return result(ID, Status.PASS, f"{s} no process ({why}){allowed}", s)
    extra = (f", {len(others)} graphics process(es)" if others else "") + allowed
    return result(ID, Status.PASS, f"{s} free ({used or 0:.0f} MiB in use{extra})", s, value=used, threshold=max_used)


def _slice(gpu: GpuOccupancy, want: list[tuple[int, int | None]]) -> GpuOccupancy | Result:
    """The job's MIG slices of ``gpu`` as one GPU to judge: their processes and memory only."""
    mine = [inst for inst in gpu.instances if any(inst.gi == gi and ci in (None, inst.ci) for gi, ci in want)]
    names = ",".join(f"gi{gi}" + ("" if ci is None else f"/ci{ci}") for gi, ci in want)
    if not mine and not gpu.error:
        return result(ID, Status.ERROR, f"{gpu.subject} MIG {names}: not among the GPU's MIG devices now "
                      "(gpu-count judges the layout)", gpu.subject)
    procs = [p for p in gpu.processes if p.gi is not None
             and any(p.gi == gi and ci in (None, p.ci) for gi, ci in want)]
    by_gi = {inst.gi: inst for inst in mine}  # compute instances of one GPU instance share its memory
    used = [i.memory_used_mib for i in by_gi.values()]
    return GpuOccupancy(index=gpu.index, uuid=gpu.uuid, processes=procs, error=gpu.error, mig=False,
                        memory_used_mib=None if None in used or not used else sum(used))


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    occ = snapshot.occupancy
    if occ is None:
        return CheckOutput([na(ID, "GPU processes not read (a recording without an occupancy section)")])
    if not occ.available:
        return CheckOutput([na(ID, f"NVML unavailable: {occ.error or 'no reason given'}")])
    gpus = [g for g in occ.gpus if ctx.gpus is None or g.index in ctx.gpus]
    if not gpus:
        return CheckOutput([na(ID, "no GPU to check")])
    waited = f" after waiting {occ.waited_s:.0f} s" if occ.waited_s >= 0.5 else ""
    max_used = float(ctx.t("max_used_mib", 1024))
    leaked = float(ctx.t("leaked_mib", 15))
    rules = allowed_rules({"allowed_processes": ctx.t("allowed_processes", [])})
    job = ctx.job
    out = []
    for g in gpus:
        if job is not None and g.index in job.shared:
            out.append(result(ID, Status.PASS, f"{g.subject} is shared (gres.conf lends it as shard/mps): "
                              "other jobs' processes are expected, not judged", g.subject))
            continue
        want = job.slices.get(g.index) if job is not None else None
        if not want:
            out.append(_judge_gpu(g, max_used, waited, rules, leaked))
            continue
        for gi, ci in want:  # each slice on its own: the reason names the one that is held
            picked = _slice(g, [(gi, ci)])
            if isinstance(picked, Result):
                out.append(picked)
                continue
            r = _judge_gpu(picked, max_used, waited, rules, leaked)
            label = f"gi{gi}" + ("" if ci is None else f"/ci{ci}")
            out.append(Result(r.check, r.status, r.message.replace(g.subject, f"{g.subject} MIG {label}", 1),
                              r.subject, r.value, r.threshold, r.action))
    return CheckOutput(out)


def _rule_error(e) -> str | None:
    if not isinstance(e, dict) or set(e) != {"name", "uid"}:
        return f"want a mapping with name and uid, got {e!r}"
    name, uid = e["name"], e["uid"]
    if not isinstance(name, str) or not 0 < len(name.encode()) <= _COMM_MAX or not name.isprintable():
        return f"name: want the exact name /proc/<pid>/comm shows (1-{_COMM_MAX} printable bytes), got {name!r}"
    if not isinstance(uid, int) or isinstance(uid, bool) or uid < 0:
        return f"uid: want the owner's numeric uid (0: root), got {uid!r}"
    return None


def _validate(t: dict) -> list[str]:
    problems = []
    for key in ("max_used_mib", "leaked_mib", "epilog_wait_s"):
        v = t.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            problems.append(f"{key}: must be a number >= 0, got {v!r}")
    rules = t.get("allowed_processes")
    if not isinstance(rules, list):
        problems.append(f"allowed_processes: want a list of {{name, uid}}, got {rules!r}")
    else:
        problems.extend(f"allowed_processes.{i}: {why}" for i, e in enumerate(rules) if (why := _rule_error(e)))
    return problems


CHECKS = [
    Check(
        id=ID,
        needs=(PROCS,),
        judge=judge,
        stages=("prolog", "epilog", "bootstrap"),
        timeout_s=25.0,  # room for the epilog's wait, within the epilog's 30 s budget (gpuhc/config/load.py)
        defaults={
            # Memory on a GPU where no process is left, in the figure without the driver's reserve
            # (NVML's v2 query; an idle H100 reads 0 MiB): GCM's prolog default, 15 MiB, is a
            # leaked context's floor by far (docs/checks.md, "occupancy").
            "leaked_mib": 15,
            # Memory beside a listed process (a display server), or in the v1 figure that holds
            # the driver's reserve (a few hundred MiB): a graphics process this big is a finding.
            "max_used_mib": 1024,
            # epilog: how long the job's processes get to exit and the driver to free their
            # contexts. Only a GPU still held waits (a free one answers at once); freeing a large
            # context can take tens of seconds after Slurm ended the job (docs/checks.md).
            "epilog_wait_s": 20.0,
            # GPU processes that are no stray: a monitor holding a context on every GPU. Each by
            # its exact name AND its owner's uid (the kernel's, not the process's choice:
            # docs/security.md); DCGM's host engine runs as root. Numeric, so no user lookup
            # (NSS, LDAP) can hang the prolog.
            "allowed_processes": [{"name": "nv-hostengine", "uid": 0}],
        },
        doc="no leftover process or memory on the GPUs a job gets (prolog) or left (epilog)",
        validate=_validate,
        source_needs=_source_needs,
        judges_holders=True,  # a run that cannot tell whose processes they are leaves it out
    )
]
