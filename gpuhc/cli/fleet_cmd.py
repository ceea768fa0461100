"""`gpuhc fleet stats|risk|suspects|incidents|lemons|observed`: the fleet over weeks, from an admin's machine.

Read-only: these commands ask Slurm (sacctmgr, sacct, sinfo, scontrol show) and read gpuhc's
event logs; they never drain or resume anything. docs/repair.md explains the numbers.
"""

from __future__ import annotations

import json
import time

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.common import SourceArgs, load
from gpuhc.cli.params import Number
from gpuhc.cli import fleet_tables as T
from gpuhc.cli.tables import asked, table_options
from gpuhc.errors import GpuhcError, SlurmError
from gpuhc.fleet import lemons as lemon_standings
from gpuhc.fleet import observed as observed_acts
from gpuhc.fleet.gather import event_log_paths, find_suspects, gather_stats
from gpuhc.fleet.history import read_failures
from gpuhc.fleet.render import render_incidents, render_risk, render_stats, render_suspects, write_png
from gpuhc.fleet.risk import Risk, scaling_table
from gpuhc.fleet.stats import per_gpu_hour_rate
from gpuhc.fleet.switches import Failure, failures_from_nodes, group_by_switch, merge_failures, read_topology_conf
from gpuhc.slurm.report.build import ReportError, parse_duration
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.config.topology import parse_topology


def _config_option(fn):
    return click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml.")(fn)


def _event_log_options(fn):
    """--event-log (repeatable), --json and --config, as the commands that read event logs take them."""
    fn = _config_option(fn)
    fn = click.option("--json", "json_mode", is_flag=True)(fn)
    return click.option("--event-log", "event_logs", multiple=True, help="gpuhc event log (path or glob; "
                        "repeatable). Default: fleet.event_logs, then output.event_log.")(fn)


def _load(config_path: str | None):
    return load(SourceArgs(config_path=config_path))


def _seconds(text: str, what: str) -> float:
    try:
        value = parse_duration(text)
    except ReportError as e:
        raise click.BadParameter(str(e), param_hint=what) from None
    if value <= 0:
        raise click.BadParameter(f"{text!r} is not a positive duration", param_hint=what)
    return value


@click.group(context_settings=CONTEXT)
def fleet() -> None:
    """The fleet over weeks: failure statistics, job risk, suspect nodes, switch incidents."""


@fleet.command()
@click.option("--since", default="30d", show_default=True, help="Window: 30d, 12h, 1d12h.")
@click.option("--event-log", "event_logs", multiple=True, help="gpuhc event log (path or glob; repeatable). "
              "Default: fleet.event_logs, then output.event_log.")
@click.option("--no-slurm", is_flag=True, help="Event logs only: do not ask sacctmgr or sinfo.")
@click.option("--png", "png", type=click.Path(dir_okay=False), help="Also draw drains per day to this PNG.")
@click.option("--json", "json_mode", is_flag=True)
@_config_option
@table_options(T.STATS)
def stats(since: str, event_logs: tuple[str, ...], no_slurm: bool, png: str | None, json_mode: bool,
          config_path: str | None, fmt: str | None, parsable: bool, noheader: bool) -> None:
    """Drains, MTBF, MTTR (drain to resume), retired nodes and trend, per node, partition and cause.

    With -o, --parsable or --noheader: one table, every row (kind: fleet, partition, cause, node),
    times in hours."""
    config = _load(config_path)
    st = gather_stats(config, _seconds(since, "--since"), event_logs, not no_slurm)
    if png:
        write_png(st, png)
    if json_mode:
        click.echo(json.dumps(st.to_dict(), indent=2))
    elif asked(fmt, parsable, noheader):
        _table(T.STATS, [T.stats_row(r) for r in st.rows], (fmt, parsable, noheader), st.notes)
    else:
        render_stats(st)


@fleet.command()
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs the job runs on.")
@click.option("--hours", type=Number(0, lo_open=True), required=True, help="How long it runs.")
@click.option("--rate", type=Number(0, 1), help="Failure probability per GPU-hour.")
@click.option("--from-history", is_flag=True, help="Measure the rate with `fleet stats` over --since.")
@click.option("--since", default="30d", show_default=True, help="History window for --from-history.")
@click.option("--checkpoint-min", type=Number(0, lo_open=True), help="Checkpoint interval (minutes).")
@click.option("--restart-min", type=Number(0), default=0.0, show_default=True,
              help="Time to restart after a failure (minutes), lost on every GPU.")
@click.option("--checkpoint-cost-min", type=Number(0, lo_open=True),
              help="Time one checkpoint takes (minutes): also print Young's best interval.")
@click.option("--json", "json_mode", is_flag=True)
@_config_option
@table_options(T.RISK)
def risk(gpus: int, hours: float, rate: float | None, from_history: bool, since: str, checkpoint_min: float | None,
         restart_min: float, checkpoint_cost_min: float | None, json_mode: bool, config_path: str | None,
         fmt: str | None, parsable: bool, noheader: bool) -> None:
    """Chance that a job of N GPUs for H hours is interrupted: 1-(1-p)^(N*H); lost GPU-hours.

    With -o, --parsable or --noheader: one row per job size (a quarter to 4 times this job's)."""
    if (rate is None) == (not from_history):
        raise click.UsageError("give exactly one of --rate R and --from-history")
    if rate is not None:
        rate, source = float(rate), "given"
    else:
        config = _load(config_path)
        st = gather_stats(config, _seconds(since, "--since"), (), True)
        gpn = int(config.section("fleet")["gpus_per_node"])
        try:
            rate = per_gpu_hour_rate(st, gpn)
        except ValueError as e:
            raise GpuhcError(f"--from-history: {e}") from None
        f = st.of("fleet")[0]
        source = f"history: {f.drains} drains in {f.node_hours_up:.0f} node-hours in service, {gpn} GPUs/node"
    r = Risk(gpus, hours, rate, source, checkpoint_min, restart_min, checkpoint_cost_min)
    scaling = scaling_table(rate, r.gpus, r.hours)
    if json_mode:
        click.echo(json.dumps({**r.to_dict(), "scaling": [{"gpus": n, "interruption_probability": p}
                                                           for n, p in scaling]}, indent=2))
    elif asked(fmt, parsable, noheader):
        _table(T.RISK, T.risk_rows(r, scaling), (fmt, parsable, noheader))
    else:
        render_risk(r, scaling)


@fleet.command()
@click.option("--since", help="Window of jobs (default fleet.suspects.since_days).")
@click.option("--all", "show_all", is_flag=True, help="List every node, not only suspects.")
@click.option("--json", "json_mode", is_flag=True)
@_config_option
@table_options(T.SUSPECTS)
def suspects(since: str | None, show_all: bool, json_mode: bool, config_path: str | None, fmt: str | None,
             parsable: bool, noheader: bool) -> None:
    """Nodes whose jobs end NODE_FAIL/FAILED/TIMEOUT significantly more often than their
    partition's (one-sided Fisher exact test, Bonferroni over the partition). Exit 1 when any."""
    config = _load(config_path)
    section = config.section("fleet")["suspects"]
    window = _seconds(since, "--since") if since else float(section["since_days"]) * 86400.0
    records, notes = find_suspects(config, window)
    if json_mode:
        click.echo(json.dumps({"since_s": window, "notes": notes,
                               "nodes": [r.to_dict() for r in records if r.suspect or show_all]}, indent=2))
    elif asked(fmt, parsable, noheader):
        _table(T.SUSPECTS, [T.suspect_row(r) for r in records if r.suspect or show_all], (fmt, parsable, noheader),
               notes)
    else:
        render_suspects(records, show_all)
        for n in notes:
            click.echo(f"note: {n}")
    raise SystemExit(1 if any(r.suspect for r in records) else 0)


@fleet.command()
@click.option("--window", help="Failures at most this far apart (default fleet.switch.window_s).")
@click.option("--min-nodes", type=click.IntRange(min=2), help="K: nodes under one switch (default fleet.switch.min_nodes).")
@click.option("--topology", "topology_file", type=click.Path(dir_okay=False),
              help="topology.conf to read (default fleet.switch.topology_file, else `scontrol show topology`).")
@click.option("--event-log", "event_logs", multiple=True, help="Also count failures from these gpuhc event logs "
              "(drains the circuit breaker withheld included). Default: fleet.event_logs, then output.event_log.")
@click.option("--since", default="1d", show_default=True, help="How far back the event logs are read.")
@click.option("--json", "json_mode", is_flag=True)
@_config_option
@table_options(T.INCIDENTS)
def incidents(window: str | None, min_nodes: int | None, topology_file: str | None, event_logs: tuple[str, ...],
              since: str, json_mode: bool, config_path: str | None, fmt: str | None, parsable: bool,
              noheader: bool) -> None:
    """Node failures grouped into suspect-switch incidents where several under one leaf switch
    failed the same check together: nodes gpuhc holds, and failures in the event logs. Exit 1
    when there is an incident."""
    config = _load(config_path)
    sw = config.section("fleet")["switch"]
    sc = Scontrol.from_section(config.section("slurm"))
    path = topology_file or sw["topology_file"]
    leaf_of = read_topology_conf(path) if path else parse_topology(sc.show_topology())
    window_s = _seconds(window, "--window") if window else float(sw["window_s"])
    k = min_nodes or int(sw["min_nodes"])
    failures = failures_from_nodes(sc.show_nodes())
    notes: list[str] = []
    paths = event_log_paths(config, event_logs)
    if paths:
        start = time.time() - _seconds(since, "--since")
        failures = merge_failures(failures, [Failure(*f) for f in read_failures(paths, start, notes)])
    found, rest = group_by_switch(failures, leaf_of, k, window_s)
    if json_mode:
        click.echo(json.dumps({"incidents": [i.to_dict() for i in found], "topology_nodes": len(leaf_of), "notes": notes,
                               "other_failures": [{"node": f.node, "check": f.check, "time": f.time,
                                                   "detail": f.detail} for f in rest]}, indent=2))
    elif asked(fmt, parsable, noheader):
        _table(T.INCIDENTS, T.incident_rows(found, rest), (fmt, parsable, noheader), notes)
    else:
        if not leaf_of:
            click.echo("note: no topology (no topology.conf given and Slurm reports none): nothing can be grouped")
        render_incidents(found, rest)
        for n in notes:
            click.echo(f"note: {n}")
    raise SystemExit(1 if found else 0)


@fleet.command()
@click.option("--event-log", "event_logs", multiple=True, help="gpuhc event log (path or glob; repeatable). "
              "Default: fleet.event_logs, then output.event_log.")
@click.option("--all", "show_all", is_flag=True, help="Every node and GPU drained in the window, not only "
              "lemons and near-lemons.")
@click.option("--topology", "topology_file", type=click.Path(dir_okay=False),
              help="topology.conf to read (default fleet.switch.topology_file, else `scontrol show topology`): "
              "drains that were one switch incident count for the switch, not the nodes.")
@click.option("--json", "json_mode", is_flag=True)
@_config_option
@table_options(T.LEMONS)
def lemons(event_logs: tuple[str, ...], show_all: bool, topology_file: str | None, json_mode: bool,
           config_path: str | None, fmt: str | None, parsable: bool, noheader: bool) -> None:
    """Lemons: nodes, and GPUs by serial wherever they sat, drained slurm.lemon.faults times within
    slurm.lemon.window_days (near-lemons: one short), with their drains; drains of a switch
    incident count for the switch, which is named. Exit 1 when any lemon."""
    config = _load(config_path)
    paths = event_log_paths(config, event_logs)
    if not paths:
        raise GpuhcError("no event log to read: set fleet.event_logs or output.event_log, or pass --event-log")
    path = topology_file or config.section("fleet")["switch"]["topology_file"]
    topo_note = []
    try:
        leaf_of = read_topology_conf(path) if path else parse_topology(
            Scontrol.from_section(config.section("slurm")).show_topology())
    except SlurmError as e:  # no Slurm here: the lemons are still listed, the switches not told apart
        leaf_of, topo_note = {}, [f"no topology ({e}): drains of a switch incident count for their nodes"]
    rows, settings, notes, found = lemon_standings.gather(config, paths, show_all=show_all, leaf_of=leaf_of)
    notes = topo_note + notes
    if json_mode:
        click.echo(json.dumps({"faults": settings.faults, "window_s": settings.window_s, "notes": notes,
                               "standings": [r.to_dict() for r in rows],
                               "switch_incidents": [i.to_dict() for i in found]}, indent=2))
    elif asked(fmt, parsable, noheader):
        _table(T.LEMONS, [T.lemon_row(r) for r in rows], (fmt, parsable, noheader), notes)
    else:
        for line in lemon_standings.table(rows, settings, found) + [f"note: {n}" for n in notes]:
            click.echo(line)
    raise SystemExit(1 if any(r.lemon for r in rows) else 0)


@fleet.command()
@click.option("--since", default="7d", show_default=True, help="Window: 7d, 12h, 1d12h.")
@_event_log_options
@table_options(T.OBSERVED)
def observed(since: str, event_logs: tuple[str, ...], json_mode: bool, config_path: str | None, fmt: str | None,
             parsable: bool, noheader: bool) -> None:
    """What observe mode (slurm.mode: observe) would have drained, resumed, retired or rebooted:
    per node and act, the runs that decided it, first and last, and the reason."""
    show_observed(_load(config_path), _seconds(since, "--since"), event_logs, json_mode, (fmt, parsable, noheader))


def show_observed(config, since_s: float, event_logs, json_mode: bool, table=(None, False, False)) -> None:
    """`fleet observed` and `drain-report --observed`; ``table``: -o, --parsable, --noheader."""
    rows, notes = observed_acts.gather(config, since_s, event_logs)
    lines = observed_acts.table(rows)
    if asked(*table):
        lines = T.OBSERVED.lines([r.to_dict() for r in rows], *table)
    _emit({"since_s": since_s, "notes": notes, "nodes": [r.to_dict() for r in rows]},
          lines + ([] if table[1] else [f"note: {n}" for n in notes]), json_mode)


def _table(table, rows: list[dict], opts: tuple, notes=()) -> None:
    """The -o table (gpuhc/cli/tables.py), then the notes, except with --parsable: its lines are
    data only."""
    fmt, parsable, noheader = opts
    for line in table.lines(rows, fmt, parsable, noheader) + ([] if parsable else [f"note: {n}" for n in notes]):
        click.echo(line)


def _emit(doc: dict, lines: list[str], json_mode: bool) -> None:
    if json_mode:
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in lines:
            click.echo(line)


@fleet.command("config-errors")
@click.option("--since", default="1d", show_default=True, help="Window of runs read: 1d, 12h.")
@_event_log_options
@table_options(T.CONFIG_ERRORS)
def config_errors(since: str, event_logs: tuple[str, ...], json_mode: bool, config_path: str | None,
                  fmt: str | None, parsable: bool, noheader: bool) -> None:
    """Nodes whose latest run could not load the config in place and judged on the last good
    copy or the built-in defaults: the error, since when. Exit 1 when any."""
    from gpuhc.fleet import config_errors as spells

    rows, notes = spells.gather(_load(config_path), _seconds(since, "--since"), event_logs)
    lines = spells.table(rows)
    if asked(fmt, parsable, noheader):
        lines = T.CONFIG_ERRORS.lines([r.to_dict() for r in rows], fmt, parsable, noheader)
    _emit({"notes": notes, "nodes": [r.to_dict() for r in rows]},
          lines + ([] if parsable else [f"note: {n}" for n in notes]), json_mode)
    raise SystemExit(1 if rows else 0)
