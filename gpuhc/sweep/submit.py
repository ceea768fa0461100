"""``gpuhc sweep submit``: plan groups among idle nodes and submit one probe job per group.

Made for cron: it returns in seconds, and it is idempotent. While the current sweep still has
jobs queued or running (asked of ``squeue``: our job ids, or any job whose name carries the
configured prefix, so a second admin host or a lost state directory cannot double up either),
or still waits for ``gpuhc sweep analyze``, it submits nothing and says why.

Each job is ``sbatch --parsable --exclusive --nodelist=<group> --time ...`` (plus account, qos
and priority from the config) with the job script on stdin; the script is the built-in template
below or ``sweep.job.template`` (a :class:`string.Template` with ``$launch``, ``$sweep_id``,
``$group_id``, ``$nodes``, ``$purpose``, ``$results_dir``; ``$$`` for a literal ``$``).
The job runs as the submitting user (a Slurm operator account, not root, is the intended one)
and only writes its results; draining is left to the privileged ``analyze --apply``.
"""

from __future__ import annotations

import os
import secrets
import shlex
import string
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpuhc.errors import ConfigError, SlurmError
from gpuhc.sweep.campaign import new_record
from gpuhc.sweep.plan import Group, overdue, plan_probe
from gpuhc.sweep.slurmcli import SlurmCli, in_service
from gpuhc.sweep.store import SweepStore
from gpuhc.config.topology import parse_topology

SBATCH_PARALLEL = 4  # concurrent sbatch calls: fast for hundreds of groups, gentle on slurmctld

DEFAULT_TEMPLATE = """#!/bin/bash
# gpuhc fabric probe: sweep $sweep_id, group $group_id ($purpose) on $nodes.
# Written by `gpuhc sweep submit`. Runs unprivileged and only writes its results
# under $results_dir/$sweep_id/; `gpuhc sweep analyze` judges them.
$launch
"""


def new_sweep_id(now: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + "-" + secrets.token_hex(2)


def launch_argv(section: dict, run: dict, sweep_id: str, group: Group, results_dir: str,
                pass_fault: bool = False) -> list[str]:
    """The launcher line inside the job: one rank per GPU running ``gpuhc sweep run``.

    ``mpiexec`` spells "ranks per node" differently per MPI: Hydra (MPICH, Intel MPI, MVAPICH)
    takes ``-ppn R``; Open MPI ``--map-by ppr:R:node`` (and forwards only the environment
    variables named with ``-x``, hence ``pass_fault``: the test-only fault hook's variable)."""
    launcher = section["launcher"]
    ranks = group.ranks_per_node
    if launcher["kind"] == "srun":
        head = ["srun", f"--mpi={launcher['mpi']}", f"--ntasks-per-node={ranks}", "--kill-on-bad-exit=1"]
    elif launcher.get("flavor", "hydra") == "openmpi":
        head = ["mpiexec", "-n", str(ranks * len(group.nodes)), "--map-by", f"ppr:{ranks}:node"]
        if pass_fault:
            head += ["-x", FAULT_ENV]
    else:
        head = ["mpiexec", "-n", str(ranks * len(group.nodes)), "-ppn", str(ranks)]
    try:
        command = shlex.split(section["job"]["command"])
    except ValueError as e:
        raise ConfigError(f"cannot split: {e}", key="sweep.job.command") from None
    args = ["sweep", "run", "--no-table", "--backend", run["backend"], "--sweep-id", sweep_id, "--group-id", group.id,
            "--nodes", ",".join(group.nodes), "--results-dir", results_dir,
            "--min-bytes", str(run["min_bytes"]), "--max-bytes", str(run["max_bytes"]), "--factor", str(run["factor"]),
            "--warmup", str(run["warmup"]), "--iters", str(run["iters"]), "--latency-iters", str(run["latency_iters"]),
            "--latency-max-bytes", str(run["latency_max_bytes"]), "--timeout-s", str(run["timeout_s"])]
    return head + list(launcher["args"]) + command + args


def gpus_per_node(section: dict, backend: str, group: Group) -> int:
    """GPUs to request per node. ``--exclusive`` alone gives the job the nodes but, where cgroups
    constrain devices, no GPU: the ranks would see none. By default the nccl backend asks for
    one GPU per rank; the mpi backend needs none."""
    configured = section["job"].get("gpus_per_node")
    if configured is not None:
        return int(configured)
    return group.ranks_per_node if backend == "nccl" else 0


def sbatch_argv(section: dict, sweep_id: str, group: Group, results_dir: str, partition: str | None,
                backend: str | None = None) -> list[str]:
    job = section["job"]
    argv = ["sbatch", "--parsable", f"--job-name={job['name_prefix']}-{sweep_id}-{group.id}",
            f"--nodelist={','.join(group.nodes)}", f"--nodes={len(group.nodes)}",
            f"--ntasks-per-node={group.ranks_per_node}", "--exclusive", f"--time={job['time']}",
            f"--output={results_dir}/{sweep_id}/{group.id}.out"]
    if job.get("deadline_h"):
        # A job pinned to nodes that became busy would pend until they free up, holding the
        # sweep; Slurm removes it at the deadline instead, and its group is judged `error`.
        argv.append(f"--deadline=now+{max(1, round(job['deadline_h'] * 60))}minutes")
    gpus = gpus_per_node(section, backend or section["backend"], group)
    if gpus:
        # --gres rather than --gpus-per-node: also understood by select/cons_res. srun's steps
        # get all of the job's GRES by default, so the launcher line needs no GPU option.
        argv.append(f"--gres=gpu:{gpus}")
    part = job.get("partition") or partition
    if part:
        argv.append(f"--partition={part}")
    for key in ("account", "qos", "priority"):
        if job.get(key) is not None:
            argv.append(f"--{key}={job[key]}")
    return argv + list(job.get("extra_args") or [])


FAULT_ENV = "GPUHC_SWEEP_FAULT"


def launch_lines(section: dict, launch: list[str], test_fault: str | None = None) -> str:
    """What ``$launch`` stands for in the job script: the fault hook's variable handled, then the
    launcher line.

    sbatch hands the submitting environment to the job, so a ``GPUHC_SWEEP_FAULT`` left in the
    cron environment would reach production ranks and make healthy nodes look bad. The script
    therefore unsets it, whatever sbatch's ``--export`` mode, and sets it only when a test asks
    for it explicitly (``submit --test-fault``)."""
    if not test_fault:
        return f"unset {FAULT_ENV}\n" + shlex.join(launch)
    return f"export {FAULT_ENV}={shlex.quote(test_fault)}  # TEST ONLY: fault hook, see docs/sweep.md\n" + shlex.join(launch)


def job_script(section: dict, launch: list[str], sweep_id: str, group: Group, results_dir: str,
               test_fault: str | None = None) -> str:
    path = section["job"].get("template")
    text = DEFAULT_TEMPLATE
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read the job template {path}: {e.strerror}", key="sweep.job.template") from None
    try:
        return string.Template(text).substitute(
            launch=launch_lines(section, launch, test_fault), sweep_id=sweep_id, group_id=group.id, nodes=",".join(group.nodes),
            purpose=group.purpose, results_dir=results_dir)
    except (KeyError, ValueError) as e:
        raise ConfigError(f"bad placeholder {e} in {path or 'the built-in template'}", key="sweep.job.template") from None


def submit_groups(section: dict, record: dict, groups: list[Group], store: SweepStore, cli: SlurmCli,
                  part_of: dict[str, str]) -> list[str]:
    """sbatch each group (a few at a time); fills job_id or submit_error; returns message lines."""
    results_dir = store.results_dir
    store.prepare_results(record["id"])

    def one(g: Group) -> None:
        launch = launch_argv(section, record["run"], record["id"], g, results_dir, bool(record.get("test_fault")))
        script = job_script(section, launch, record["id"], g, results_dir, record.get("test_fault"))
        try:
            argv = sbatch_argv(section, record["id"], g, results_dir, part_of.get(g.nodes[0]), record["backend"])
            g.job_id = cli.sbatch(argv, script)
        except SlurmError as e:
            g.submit_error = str(e)

    with ThreadPoolExecutor(max_workers=SBATCH_PARALLEL) as pool:
        list(pool.map(one, groups))
    lines = [f"submitted {sum(1 for g in groups if g.job_id)} of {len(groups)} jobs for sweep {record['id']} "
             f"round {groups[0].round if groups else 0}"]
    lines += [f"  {g.id} ({','.join(g.nodes)}): {g.submit_error}" for g in groups if g.submit_error]
    return lines


def planned_size_notes(section: dict, groups: list[Group]) -> list[str]:
    """Say up front when a threshold's size is not on the configured ladder: the class is then
    judged at the nearest size measured (gpuhc.sweep.judge.on_ladder)."""
    from gpuhc.sweep.judge import on_ladder, size_notes
    from gpuhc.sweep.settings import thresholds_for
    from gpuhc.sweep.stats import size_ladder

    sizes = section["sizes"]
    ladder = size_ladder(sizes["min_bytes"], sizes["max_bytes"], sizes["factor"])
    kinds = {(g.shape, g.span) for g in groups}
    blocks = [on_ladder(thresholds_for(section.get("thresholds") or {}, section["backend"], shape, span), ladder)
              for shape, span in sorted(kinds)]
    return size_notes(blocks)


def busy_reason(section: dict, store: SweepStore, index: dict, cli: SlurmCli) -> tuple[str | None, dict | None]:
    """Why a new sweep must not start now (or None), and the current record when the reason
    is that its finished jobs wait for ``analyze``."""
    current = index.get("current")
    record = store.load_sweep(current) if current else None
    ids = [g["job_id"] for g in (record["rounds"][-1]["groups"] if record else []) if g.get("job_id")]
    active = cli.active_jobs(section["job"]["name_prefix"], ids)
    if active:
        return f"{len(active)} sweep job(s) still queued or running ({', '.join(sorted(active)[:5])}): not starting another", None
    if record and record.get("state") != "done":
        return f"sweep {current} has finished jobs waiting for `gpuhc sweep analyze`", record
    return None, None


def note_stall(index: dict, record: dict | None, now: float) -> dict[str, Any]:
    """A sweep whose finished jobs still wait for ``analyze`` at a second ``submit`` is stuck:
    cron runs ``analyze`` first, so only a failing (or missing) ``analyze`` leaves it there.
    The first sighting may be a job that ended between the two commands; the second is said
    loudly (the CLI exits non-zero), or the probes would stop with nobody told."""
    if record is None:
        return {}
    key = f"{record['id']} round {record['rounds'][-1].get('round', len(record['rounds']) - 1)}"
    seen = index.get("stalled")
    if not isinstance(seen, dict) or seen.get("at") != key:
        index["stalled"] = {"at": key, "since": now}
        return {}
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(seen.get("since") or now))
    return {"stalled": True, "stalled_since": seen.get("since"),
            "warnings": [f"sweep {key} has been waiting for `gpuhc sweep analyze` since {since}: analyze is failing "
                         "or not running, and no new sweep starts until it succeeds (run `gpuhc sweep analyze` "
                         "by hand to see why)"]}


def submit_sweep(section: dict, store: SweepStore, dry_run: bool = False, cli: SlurmCli | None = None,
                 now: float | None = None, test_fault: str | None = None,
                 environ: dict[str, str] | None = None, suspects: list[str] | None = None) -> dict[str, Any]:
    """Start a sweep. ``test_fault``: TEST ONLY, the ``GPUHC_SWEEP_FAULT`` value every job of
    this sweep (follow-up rounds included) gets; otherwise the jobs never see that variable.
    ``suspects``: nodes to probe first (``gpuhc fleet suspects``), even if probed recently."""
    environ = os.environ if environ is None else environ
    cli = cli or SlurmCli()
    now = time.time() if now is None else now
    with store.locked() as index:
        why, waiting = busy_reason(section, store, index, cli)
        if why:
            return {"submitted": False, "reason": why, "lines": [why], **note_stall(index, waiting, now)}
        index.pop("stalled", None)
        states, part_of = cli.node_states(section["partitions"])
        idle = [n for n, st in states.items() if st == "idle"]
        leaf_of = parse_topology(cli.topology())
        nodes_mem = index.get("nodes", {})
        last = {n: e["last_probed"] for n, e in nodes_mem.items() if isinstance(e, dict) and "last_probed" in e}
        period_s = section["period_h"] * 3600.0
        plan = plan_probe(idle, last, now, section["group_size"], section["ranks_per_node"], period_s,
                          section["max_nodes"], leaf_of, section["cross_switch_fraction"], suspects or ())
        planned = {n for g in plan.groups for n in g.nodes}
        # Overdue: in service but busy (or left over) whenever a sweep came. Drained and down
        # nodes are not probed and not overdue: they are listed apart.
        due = overdue(sorted(set(part_of)), last, now, period_s)
        late = [n for n in due if n not in planned and in_service(states.get(n, ""))]
        out_of_service = [n for n in due if not in_service(states.get(n, ""))]
        out: dict[str, Any] = {"idle": len(idle), "waiting": plan.waiting, "left_over": plan.left_over,
                               "overdue": late, "out_of_service": out_of_service, "topology": bool(leaf_of),
                               "suspects_first": [n for n in suspects or () if n in planned]}
        if not plan.groups:
            msg = f"nothing to probe: {len(idle)} idle node(s), {len(plan.waiting)} probed within {section['period_h']:g} h"
            return {**out, "submitted": False, "reason": msg, "lines": [msg]}
        sweep_id = new_sweep_id(now)
        record = new_record(sweep_id, plan.groups, section, now)
        if test_fault:
            record["test_fault"] = test_fault
        out["notes"] = planned_size_notes(section, plan.groups)
        if environ.get(FAULT_ENV) and not test_fault:
            out["notes"].append(f"{FAULT_ENV} is set here but not passed to the jobs (their scripts unset it); "
                                "it is a test-only hook: `submit --test-fault SPEC` passes it on purpose")
        if cli is not None and cli.observe:
            # Observe mode sends no sbatch (docs/repair.md, "Observe mode"): the plan is said and
            # nothing is remembered, so no sweep waits for jobs that never ran and each run plans
            # anew; not a failure either (no cron mail every 30 minutes).
            said = [f"observe mode (slurm.mode: observe): would submit {len(plan.groups)} probe job(s) for sweep "
                    f"{sweep_id}: " + "; ".join(f"{g.id} ({','.join(g.nodes)})" for g in plan.groups[:10])
                    + (" ..." if len(plan.groups) > 10 else "")]
            return {**out, "submitted": False, "observed": True, "sweep_id": sweep_id,
                    "groups": [g.to_dict() for g in plan.groups], "lines": said + out["notes"]}
        if dry_run:
            lines = []
            for g in plan.groups:
                argv = sbatch_argv(section, sweep_id, g, store.results_dir, part_of.get(g.nodes[0]), record["backend"])
                launch = launch_argv(section, record["run"], sweep_id, g, store.results_dir, bool(test_fault))
                lines.append(shlex.join(argv) + "  # " + shlex.join(launch))
            return {**out, "submitted": False, "dry_run": True, "sweep_id": sweep_id,
                    "groups": [g.to_dict() for g in plan.groups], "lines": lines + out["notes"]}
        lines = submit_groups(section, record, plan.groups, store, cli, part_of) + out["notes"]
        record["rounds"][0]["groups"] = [g.to_dict() for g in plan.groups]
        record["rounds"][0]["submitted_at"] = now
        store.save_sweep(record)
        index["current"] = sweep_id
        for g in plan.groups:
            if g.job_id:
                for n in g.nodes:
                    nodes_mem.setdefault(n, {})["last_planned"] = now
        index["nodes"] = nodes_mem
        if late:
            lines.append(f"{len(late)} node(s) in service not probed within {section['period_h']:g} h (busy or left "
                         "over whenever a sweep came): " + ", ".join(late[:10]) + (" ..." if len(late) > 10 else ""))
        if out_of_service:
            lines.append(f"{len(out_of_service)} node(s) out of service (drained, down, ...) not probed within "
                         f"{section['period_h']:g} h: probed once back in service")
        return {**out, "submitted": True, "sweep_id": sweep_id, "groups": [g.to_dict() for g in plan.groups],
                "lines": lines}
