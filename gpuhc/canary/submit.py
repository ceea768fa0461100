"""``gpuhc canary submit [--apply]``: the admin host's cron step. Collect the nodes' result
files, elect the known answers, drain GPUs with confirmed corruption, and submit a short
low-priority canary job to every idle node whose GPUs are due.

Made like the sweep's submit (gpuhc/sweep/submit.py): the same Slurm commands
(:class:`gpuhc.sweep.slurmcli.SlurmCli`), returns in seconds, idempotent: a node with a canary
job queued or running (asked of squeue, our user's jobs only) gets no second one. Each job is
``sbatch --parsable --nodelist=<node> --nodes=1 --exclusive --time ... --nice=N`` plus the
configured partition, QOS and account, so Slurm's preemption (slurm.conf ``PreemptType``; see
docs/canary.md) ends it for any real job. A preempted canary leaves no result and is simply
due again. Drains (``--apply``) pass the actuator like every act of gpuhc: breaker, observe
mode and audit log included.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

from gpuhc.canary import fleet
from gpuhc.errors import ConfigError, SlurmError
from gpuhc.sweep.slurmcli import in_service

MAX_RESULT_BYTES = 8 << 20  # one node's result file; larger is not ours
MARGIN_S = 120.0  # --time beyond the run's own limit: Python start, CuPy import, writing the file
SCRIPT = """#!/bin/bash
# gpuhc canary on $node. Written by `gpuhc canary submit`; runs unprivileged at low priority and
# only writes its result under the results directory; `gpuhc canary submit` judges it.
$run
"""


def results_dir(section: dict, state_dir: str) -> str:
    return section.get("results_dir") or os.path.join(state_dir, "canary", "results")


def collect(doc: dict, rdir: str, settings: dict, now: float) -> list[str]:
    """Every new result file under ``<rdir>/<node>/`` into the fleet state. The results directory
    is the job account's: each node's directory is opened once without following a link and its
    files are read by name under that fd, bounded, regular files only; a file is read once (its
    name remembered) and must name its own node."""
    from gpuhc.files.untrusted import UntrustedInputError, open_directory

    seen = doc.setdefault("seen", {})
    lines: list[str] = []
    present = set()
    try:
        nodes = sorted(os.listdir(rdir))
    except FileNotFoundError:
        return []
    for node in nodes:
        try:
            fd = open_directory(os.path.join(rdir, node), "canary results directory")
        except (UntrustedInputError, OSError) as e:
            if os.path.isdir(os.path.join(rdir, node)) or os.path.islink(os.path.join(rdir, node)):
                lines.append(f"skipped {node}/: {e}")
            continue
        try:
            lines += _collect_node(doc, rdir, node, fd, present, settings, now, seen)
        finally:
            os.close(fd)
    for rel in [r for r in seen if r not in present]:
        del seen[rel]  # the file is gone (cleaned up): forget its name too
    return lines


def _collect_node(doc, rdir, node, fd, present, settings, now, seen) -> list[str]:
    from gpuhc.files.untrusted import UntrustedInputError, load_json, read_bounded

    lines = []
    for name in sorted(n for n in os.listdir(fd) if n.endswith(".json")):
        rel = f"{node}/{name}"
        present.add(rel)
        if rel in seen:
            continue
        seen[rel] = now
        path = os.path.join(rdir, rel)
        try:
            rec = load_json(read_bounded(name, MAX_RESULT_BYTES, "canary result", dir_fd=fd, shown=path), path,
                            max_depth=32)
            if not isinstance(rec, dict) or rec.get("node") != node:
                raise UntrustedInputError(f"{path}: not a canary result of node {node}")
            problem = fleet.record_problem(rec)
            if problem:
                raise UntrustedInputError(f"{path}: not a canary result: {problem}")
        except (UntrustedInputError, OSError) as e:
            lines.append(f"skipped {rel}: {e}")
            continue
        lines += fleet.ingest(doc, rec, settings, now)
    return lines


def known_file(rdir: str) -> str:
    return os.path.join(rdir, "known.json")


def publish_known(doc: dict, rdir: str) -> None:
    """The known answers where the jobs read them (``--known``), written whole."""
    from gpuhc.files.fsutil import make_dirs, write_atomic

    make_dirs(rdir, 0o755, what="canary results directory")
    write_atomic(known_file(rdir), json.dumps(doc.get("known") or {}, sort_keys=True).encode(), mode=0o644,
                 what="canary known answers")


def sbatch_argv(section: dict, node: str, partition: str | None, rdir: str) -> list[str]:
    job = section["job"]
    minutes = max(1, int((float(section["max_seconds"]) + MARGIN_S + 59) // 60))
    argv = ["sbatch", "--parsable", f"--job-name={job['name_prefix']}-{node}", f"--nodelist={node}", "--nodes=1",
            "--exclusive", f"--time={minutes}", f"--nice={job['nice']}", f"--output={rdir}/{node}/slurm-%j.out",
            "--no-requeue"]
    if job.get("gpus_per_node"):
        argv.append(f"--gres=gpu:{job['gpus_per_node']}")
    part = job.get("partition") or partition
    if part:
        argv.append(f"--partition={part}")
    for key in ("account", "qos"):
        if job.get(key):
            argv.append(f"--{key}={job[key]}")
    return argv + list(job.get("extra_args") or [])


def job_script(section: dict, node: str, rdir: str) -> str:
    try:
        command = shlex.split(section["job"]["command"])
    except ValueError as e:
        raise ConfigError(f"cannot split: {e}", key="canary.job.command") from None
    run = command + ["canary", "run", "--results-dir", rdir, "--known", known_file(rdir),
                     "--max-seconds", f"{float(section['max_seconds']):g}", "--repeats", str(section["repeats"]),
                     "--seed", str(section["seed"]), "--cases", ",".join(section["cases"]),
                     "--memtest-fraction", f"{float(section['memtest_fraction']):g}",
                     "--memtest-max-gib", f"{float(section['memtest_max_gib']):g}"]
    return SCRIPT.replace("$node", node).replace("$run", shlex.join(run))


def plan(doc: dict, states: dict[str, str], busy: set[str], settings: dict, now: float) -> list[str]:
    """Idle in-service nodes with no canary job whose GPUs are due, most overdue first."""
    nodes = doc.setdefault("nodes", {})
    for n, st in states.items():
        if in_service(st):
            nodes.setdefault(n, {}).setdefault("first_seen", now)
    due = [(fleet.node_due(doc, n, settings, now), n) for n, st in states.items()
           if st == "idle" and n not in busy]
    return [n for when, n in sorted(due) if when <= now]


def submit(section: dict, state_dir: str, cli: Any, now: float, apply: bool = False, config: Any = None,
           scontrol: Any = None, dry_run: bool = False) -> dict[str, Any]:
    """One cron step; ``dry_run`` works on a copy of the state and writes, drains and submits nothing."""
    rdir = results_dir(section, state_dir)
    out: dict[str, Any] = {"lines": [], "submitted": [], "applied": [], "errors": []}
    store = fleet.store(state_dir)
    if dry_run:
        _step(section, store.read(), cli, rdir, now, False, config, scontrol, True, out)
        return out
    with store.transaction() as doc:
        _step(section, doc, cli, rdir, now, apply, config, scontrol, False, out)
    return out


def _step(section, doc, cli, rdir, now, apply, config, scontrol, dry_run, out) -> None:
    from gpuhc.errors import GpuhcError

    out["lines"] += collect(doc, rdir, section, now)
    out["lines"] += fleet.elect(doc, section, now)
    if apply:
        from gpuhc.canary.drain import apply_pending

        out["applied"] = apply_pending(doc, config, scontrol, now, out["lines"])
    try:  # a failure here must not lose what was collected and drained above
        if not dry_run:
            publish_known(doc, rdir)
        _submit_due(section, doc, cli, rdir, now, dry_run, out)
    except (SlurmError, GpuhcError, OSError) as e:
        out["errors"].append(f"no canary jobs submitted: {e}")
    out["overdue"] = [r for r in fleet.rows(doc, section, now) if r["overdue"]]


def _submit_due(section: dict, doc: dict, cli: Any, rdir: str, now: float, dry_run: bool, out: dict) -> None:
    from gpuhc.files.fsutil import make_dirs

    prefix = section["job"]["name_prefix"]
    active = cli.active_jobs(prefix, [j for j in (doc.get("jobs") or {})])
    mine = doc.setdefault("jobs", {})
    for jid in [j for j in mine if j not in active]:
        del mine[jid]  # ended (done, preempted, cancelled): its node is judged by its result
    busy = {mine[j] for j in mine}
    states, part_of = cli.node_states(list(section.get("partitions") or []))
    room = int(section["job"]["max_jobs"]) - len(active)
    for node in plan(doc, states, busy, section, now)[:max(0, room)]:
        argv = sbatch_argv(section, node, part_of.get(node), rdir)
        if dry_run:
            out["submitted"].append({"node": node, "job_id": None, "argv": argv})
            continue
        try:
            make_dirs(os.path.join(rdir, node), 0o755, what="canary results directory")  # sbatch --output's
            jid = cli.sbatch(argv, job_script(section, node, rdir))
        except (SlurmError, OSError) as e:
            out["errors"].append(f"{node}: {e}")
            continue
        mine[jid] = node
        out["submitted"].append({"node": node, "job_id": jid})
