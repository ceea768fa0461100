"""``gpuhc jobs``: running jobs that look hung or slowed, with the culprit node and GPU and since when.

Read only. It asks ``scontrol show job -o`` once (or reads a saved dump with ``--from-file``: the
JSON of ``scontrol --json show job`` / ``squeue --json``, or the text of ``scontrol show job -o``,
gpuhc/slurm/jobs/dump.py) and combines the nodes' views each job's AdminComment holds
(gpuhc/slurm/jobs/record.py; the health check writes them, docs/checks.md "jobs"). A record from
a text dump is listed as unverified: the job's own name or paths can print ``AdminComment=``.
Every text Slurm hands back is escaped before it is printed (gpuhc/text/logtext.py): job names and
comments are the users' and operators' words.
"""

from __future__ import annotations

import json
import time

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.params import Seconds
from gpuhc.cli.tables import Table, table_options
from gpuhc.text.logtext import escape

JOBS = Table({"job": 8, "verdict": 7, "culprits": 12, "since": 19, "age": 5, "nodes": 12, "reported": 12, "user": 8,
              "name": 0}, default=("job", "verdict", "culprits", "since", "age", "nodes", "user", "name"))


def rows(jobs: list[dict[str, str]], now: float, everything: bool = False) -> list[dict]:
    from gpuhc.slurm.jobs import record as rec

    out = []
    for j in jobs:
        finding = rec.combine(rec.parse(j.get("AdminComment", "")))
        if not finding.verdict and not everything:
            continue
        out.append({
            "job": j.get("JobId", "?"), "verdict": finding.verdict or "-", "culprits": finding.culprits,
            "since": finding.since, "age_s": None if finding.since is None else max(0, int(now - finding.since)),
            "nodes": j.get("NodeList", ""), "reported": finding.nodes,
            "user": j.get("UserId", "").split("(", 1)[0], "name": j.get("JobName", ""),
            "verified": j.get("verified", True), **({"why": j["why"]} if j.get("why") else {}),
        })
    return out


def _cell(row: dict, field: str) -> str:
    if field == "verdict" and not row["verified"] and row["verdict"] != "-":
        return f"{row['verdict']} (unverified)"
    if field == "culprits":
        return ",".join(row["culprits"]) or ("not named yet" if row["verdict"] == "hung" else "-")
    if field == "since":
        return "-" if row["since"] is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(row["since"]))
    if field == "age":
        a = row["age_s"]
        return "-" if a is None else (f"{a}s" if a < 120 else f"{a // 60}m" if a < 7200 else f"{a // 3600}h")
    return str(row[field])


@click.command("jobs", context_settings=CONTEXT)
@click.option("--from-file", metavar="FILE", help="Read a saved dump instead of asking Slurm: `scontrol --json show job` or "
              "`squeue --json` (verified), or `scontrol show job -o` text (its records are listed as unverified).")
@click.option("--json", "json_mode", is_flag=True, help="JSON: one record per job.")
@table_options(JOBS)
@click.option("--all", "everything", is_flag=True, help="Every running job, also those with nothing found.")
@click.option("--scontrol", metavar="PATH", help="The scontrol to run (default: slurm.scontrol of the config).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="gpuhc.yaml, for slurm.scontrol (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml, if present).")
@click.option("--timeout", type=Seconds(0.5, 600.0), default=30.0, show_default=True, help="Seconds Slurm gets to answer.")
def jobs(from_file, json_mode, fmt, parsable, noheader, everything, scontrol, config_path, timeout) -> None:
    """Running jobs that look hung or slowed: the culprit node and GPU, and since when.

    Exit 0 with or without findings; 2 for bad usage; 3 when Slurm did not answer.
    """
    from gpuhc.errors import EXIT_INTERNAL, EXIT_USAGE, ConfigError, GpuhcError

    try:
        listed = _read(from_file, scontrol, config_path, timeout)
    except GpuhcError as e:
        click.echo(f"gpuhc jobs: {escape(str(e))}", err=True)
        raise SystemExit(EXIT_USAGE if from_file or isinstance(e, ConfigError) else EXIT_INTERNAL) from None
    found = rows(listed, time.time(), everything)
    if json_mode:
        click.echo(json.dumps({"jobs": found}, indent=1))
        return
    for line in JOBS.lines([{f: escape(_cell(r, f), 200) for f in JOBS.columns} for r in found], fmt, parsable, noheader):
        click.echo(line)
    if not found and not (noheader or parsable):
        click.echo("no running job looks hung or slowed")
    unverified = sum(1 for r in found if not r["verified"] and r["verdict"] != "-")
    if unverified and not (noheader or parsable):
        from gpuhc.slurm.jobs.dump import TEXT_SOURCE

        click.echo(f"{unverified} record(s) unverified: read from {TEXT_SOURCE}; shown, never acted on (save "
                   "`scontrol --json show job` or `squeue --json` for verified records)")


def _read(from_file: str | None, scontrol: str | None, config_path: str | None, timeout: float) -> list[dict[str, str]]:
    from gpuhc.slurm.jobs.control import JobControl

    if from_file:
        from gpuhc.errors import ConfigError
        from gpuhc.slurm.jobs.dump import read_dump
        from gpuhc.files.untrusted import UntrustedInputError, read_bounded

        try:
            text = read_bounded(from_file, 64 << 20, "job dump").decode("utf-8", "replace")
        except (UntrustedInputError, OSError) as e:
            raise ConfigError(f"{from_file}: {getattr(e, 'strerror', None) or e}") from None
        return read_dump(text, from_file)
    from gpuhc.config.load import load_config

    section = dict(load_config(config_path).section("slurm"))
    if scontrol:
        section["scontrol"] = scontrol
    return JobControl.from_section(section, timeout_s=timeout).running_jobs()
