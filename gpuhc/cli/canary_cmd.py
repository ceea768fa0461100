"""``gpuhc canary``: the known-answer silent-data-corruption canary (docs/canary.md).

On a node: ``run`` (in a canary job, or the epilog's slice with ``--if-due``). On the admin
host, from cron or a systemd timer as a Slurm operator: ``submit --apply``; ``status`` any time.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.params import Number, Seconds
from gpuhc.cli.tables import Table, table_options
from gpuhc.errors import EXIT_INTERNAL, EXIT_UNHEALTHY, GpuhcError


def _config_options(fn):
    fn = click.option("--state-dir", type=click.Path(file_okay=False), help="State directory (default $GPUHC_STATE_DIR or config state_dir).")(fn)
    fn = click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).")(fn)
    return fn


def _context(config_path, state_dir):
    from gpuhc.config.load import load_config
    from gpuhc.state.node import default_state_dir

    config = load_config(config_path)
    return config, config.section("canary"), state_dir or default_state_dir(config.data.get("state_dir"))


@click.group(context_settings=CONTEXT)
def canary() -> None:
    """Known-answer GPU canary against silent data corruption.

    Cron on the admin host, as a Slurm operator:  gpuhc canary submit --apply
    """


def _cases(text: str | None, default: list[str]) -> list[str]:
    from gpuhc.canary.cases import parse

    names = [c.strip() for c in (text.split(",") if text else default) if c.strip()]
    try:
        for n in names:
            parse(n)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--cases") from None
    if not names:
        raise click.BadParameter("names no case", param_hint="--cases")
    return names


def _inject(text: str | None) -> dict | None:
    """``gpu0:bf16-exact-2048:WORD:BIT[:sticky]``."""
    if not text:
        return None
    parts = text.split(":")
    if len(parts) not in (4, 5) or not parts[2].isdigit() or not parts[3].isdigit() or int(parts[3]) > 31 or (
            len(parts) == 5 and parts[4] != "sticky"):
        raise click.BadParameter(f"{text!r}: want GPU:CASE:WORD:BIT[:sticky], e.g. gpu0:bf16-exact-2048:12345:7",
                                 param_hint="--inject")
    return {"subject": parts[0], "case": parts[1], "word": int(parts[2]), "bit": int(parts[3]),
            "sticky": len(parts) == 5}


def _known(path: str | None) -> dict:
    from gpuhc.files.untrusted import UntrustedInputError, load_json, read_bounded

    if not path:
        return {}
    try:
        doc = load_json(read_bounded(path, 16 << 20, "canary known answers"), path, max_depth=8)
    except FileNotFoundError:
        click.echo(f"gpuhc canary run: no known answers yet at {path}: judged by exact cases and siblings only", err=True)
        return {}
    except (UntrustedInputError, OSError) as e:
        raise GpuhcError(f"cannot read the known answers: {e}") from None
    if not isinstance(doc, dict):
        raise GpuhcError(f"{path}: not a canary known-answer file")
    return doc


@canary.command("run", context_settings=CONTEXT)
@_config_options
@click.option("--cases", help="Comma-separated cases (default: canary.cases, or canary.epilog.cases with --epilog).")
@click.option("--repeats", type=click.IntRange(1, 100000), help="Iterations per case (default canary.repeats).")
@click.option("--seed", type=click.IntRange(0), help="Input seed (default canary.seed).")
@click.option("--max-seconds", type=Seconds(1.0, 3600.0), help="Limit of the whole run (default canary.max_seconds).")
@click.option("--memtest-fraction", type=Number(0.0, 0.95), help="Share of free HBM the pattern pass covers, 0 for none (default canary.memtest_fraction).")
@click.option("--memtest-max-gib", type=Number(0.0, 1024.0), help="The pattern pass's limit per GPU (default canary.memtest_max_gib).")
@click.option("--gpus", help="GPU indices (NVML order), e.g. 0,1 or 0-3 (default: every GPU).")
@click.option("--known", "known_path", type=click.Path(dir_okay=False), help="The fleet's known answers (written by `canary submit`).")
@click.option("--results-dir", type=click.Path(file_okay=False), help="Leave the result file here (the admin side collects it).")
@click.option("--epilog", is_flag=True, help="The epilog's slice: canary.epilog's cases and limit.")
@click.option("--if-due", is_flag=True, help="Run only when this node's last canary is older than canary.period_h.")
@click.option("--inject", metavar="GPU:CASE:WORD:BIT[:sticky]", help="TEST ONLY: flip one bit of one output (the "
              "verification harness); such a run is marked and never drains.")
@click.option("--json", "json_mode", is_flag=True)
def run_cmd(config_path, state_dir, cases, repeats, seed, max_seconds, memtest_fraction, memtest_max_gib, gpus, known_path,
            results_dir, epilog, if_due, inject, json_mode) -> None:
    """Run the canary on this node's GPUs. Exit 0 pass or warn, 1 a GPU failed, 3 not run."""
    from gpuhc.canary import node
    from gpuhc.canary.schedule import Cadence
    from gpuhc.cli.common import parse_gpu_list

    config, section, state = _context(config_path, state_dir)
    cadence = Cadence.from_section(section)
    ep = section["epilog"]
    results_dir = results_dir or section.get("results_dir")  # the epilog slice's result goes there too
    if if_due and not node.due(state, cadence, results_dir):
        _say({"skipped": "not due", "results": []}, json_mode, "canary not due on this node")
        return
    params = {"cases": _cases(cases, ep["cases"] if epilog else section["cases"]),
              "repeats": repeats or int(section["repeats"]), "seed": section["seed"] if seed is None else seed,
              "known": _known(known_path), "inject": _inject(inject)}
    frac = section["memtest_fraction"] if memtest_fraction is None else memtest_fraction
    gib = section["memtest_max_gib"] if memtest_max_gib is None else memtest_max_gib
    if frac > 0 and gib > 0:
        params["memtest"] = {"fraction": frac, "max_gib": gib, "seed": params["seed"]}
    limit = max_seconds or float(ep["max_seconds"] if epilog else section["max_seconds"])
    r = node.run(params, limit, parse_gpu_list(gpus))
    doc = r.record()
    if results_dir:
        try:
            doc["file"] = node.write_result(r, results_dir)
        except (OSError, GpuhcError) as e:  # root squashed there, or a place root must not write (docs/canary.md)
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            click.echo(f"gpuhc canary run: cannot leave the result in {results_dir}: {why}", err=True)
    if r.error is None and not params["inject"]:
        note = node.write_last(state, r, cadence)
        if note and not doc.get("file"):  # a run that left a result file has that as its stamp
            click.echo(f"gpuhc canary run: {note}", err=True)
    if json_mode:
        click.echo(json.dumps(doc, sort_keys=True, default=str))
    else:
        for x in r.results:
            click.echo(f"{x.status.value.upper():5} {x.check} {x.message}")
    statuses = {x.status.value for x in r.results}
    if epilog and "fail" in statuses and not params["inject"] and _drained_here(config, r.node, doc):
        sys.exit(0)  # gpuhc's RETIRED reason is the node's; a failing epilog would add Slurm's own
    sys.exit(EXIT_UNHEALTHY if "fail" in statuses else EXIT_INTERNAL if "error" in statuses else 0)


def _drained_here(config: Any, node_name: str, doc: dict) -> bool:
    """The epilog's slice found confirmed corruption: drain this node RETIRED now, through the
    actuator (observe mode, the breaker and the audit log see it), as the admin side would at its
    next step; a job must not start on the GPU meanwhile. True when the drain is done, observed,
    or held back by the circuit breaker (a failing epilog would drain past it; the result file
    waits for the admin side); False when Slurm could not be asked or did not show the drain:
    the slice exits 1 and Slurm's own "Epilog error" drain takes the node out."""
    from gpuhc.canary.drain import drain_node

    failed = sorted(s for s, g in (doc.get("gpus") or {}).items() if g.get("status") == "fail")
    if not failed:
        return False
    lines: list[str] = []
    entry = {"gpu": failed[0], "finding": doc["gpus"][failed[0]].get("message")}
    got = drain_node(node_name, entry, config, None, time.time(), lines)
    for line in lines:
        click.echo(f"gpuhc canary run: {line}", err=True)
    return got["act"] in ("drain", "keep", "observed", "blocked")


def _say(doc: dict, json_mode: bool, text: str) -> None:
    click.echo(json.dumps(doc, sort_keys=True, default=str) if json_mode else text)


@canary.command("submit", context_settings=CONTEXT)
@_config_options
@click.option("--apply", is_flag=True, help="Drain nodes of GPUs with confirmed corruption (needs a Slurm operator).")
@click.option("--dry-run", is_flag=True, help="Collect and plan, print the sbatch lines; submit nothing.")
@click.option("--json", "json_mode", is_flag=True)
def submit_cmd(config_path, state_dir, apply, dry_run, json_mode) -> None:
    """Collect results, drain confirmed corruption (--apply), submit canary jobs to due idle nodes.

    Exit 1 when a GPU is failed or overdue, 3 when sbatch refused a job."""
    from gpuhc.canary.submit import submit
    from gpuhc.sweep.slurmcli import SlurmCli

    config, section, state = _context(config_path, state_dir)
    out = submit(section, state, SlurmCli.from_config(config), time.time(), apply=apply, config=config, dry_run=dry_run)
    if json_mode:
        click.echo(json.dumps(out, sort_keys=True, default=str))
    else:
        from gpuhc.text.logtext import escape

        for line in out["lines"] + out["errors"]:  # text from the nodes' result files: one printable line each
            click.echo(escape(line))
        for s in out["submitted"]:
            click.echo(f"{s['node']}: submitted job {s['job_id']}" if s["job_id"] else f"{s['node']}: would run "
                       + " ".join(s["argv"]))
        for r in out["overdue"]:
            click.echo(f"{r['node']} {r['gpu'] or '(no GPU reported)'}: canary OVERDUE")
    sys.exit(EXIT_INTERNAL if out["errors"] else EXIT_UNHEALTHY if out["overdue"] or out["applied"] else 0)


STATUS = Table({"node": 12, "gpu": 6, "status": 7, "last_run": 19, "age": 6, "cadence": 7, "due": 8, "overdue": 7,
               "uuid": 40, "finding": 0}, default=("node", "gpu", "status", "age", "cadence", "due", "overdue", "finding"))


@canary.command("status", context_settings=CONTEXT)
@_config_options
@table_options(STATUS)
@click.option("--overdue", "only_overdue", is_flag=True, help="Only GPUs whose canary is overdue.")
@click.option("--prometheus", "prom", type=click.Path(dir_okay=False), help="Also write these as a node_exporter textfile.")
@click.option("--json", "json_mode", is_flag=True)
def status_cmd(config_path, state_dir, fmt, noheader, parsable, only_overdue, prom, json_mode) -> None:
    """Every GPU's last canary and standing; exit 1 when one is overdue or failed."""
    from gpuhc.canary import fleet, status

    config, section, state = _context(config_path, state_dir)
    now = time.time()
    rows = fleet.rows(fleet.store(state).read(), section, now)
    if prom:
        from gpuhc.export.prometheus import write_metrics

        write_metrics(prom, status.samples(rows), status.HELP)
    shown = [r for r in rows if r["overdue"]] if only_overdue else rows
    if json_mode:
        click.echo(json.dumps({"gpus": shown, "now": now}, sort_keys=True))
    else:
        for line in STATUS.lines([status.cells(r, now) for r in shown], fmt, parsable, noheader):
            click.echo(line)
    sys.exit(EXIT_UNHEALTHY if any(r["overdue"] or r["status"] == "failed" for r in rows) else 0)


@canary.command("forget", context_settings=CONTEXT)
@_config_options
@click.argument("gpu_id", metavar="NODE/GPU")
def forget_cmd(config_path, state_dir, gpu_id) -> None:
    """Clear a GPU's canary history after its part was replaced (a new UUID does this by itself).
    The node stays drained until an admin resumes it."""
    from gpuhc.canary import fleet

    _config, _section, state = _context(config_path, state_dir)
    with fleet.store(state).transaction() as doc:
        if doc.get("gpus", {}).pop(gpu_id, None) is None:
            raise click.BadParameter(f"{gpu_id!r}: no such GPU in the canary state", param_hint="NODE/GPU")
        for votes in (doc.get("votes") or {}).values():
            for by_gpu in votes.values():
                by_gpu.pop(gpu_id, None)
    click.echo(f"{gpu_id}: forgotten")
