"""``gpuhc drain-report``: every drained, draining, down or failed node on one screen.

Read only: the one thing it does to Slurm is ask ``scontrol --all --oneliner show node`` for
the node list (JSON only if that answer cannot be read), or it reads a saved dump in any
format with ``--from-file``. Grouping and ownership rules live in :mod:`gpuhc.slurm.report.build`; this module
holds the command's options and reads its input; :mod:`gpuhc.cli.report_render` draws the output.
"""

from __future__ import annotations

import json
import sys
import time

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.params import Seconds
from gpuhc.cli.report_render import TABLE_ROWS_PER_CAUSE, render_csv, render_plain, render_rich
from gpuhc.errors import GpuhcError, SlurmError
from gpuhc.text.logtext import escape, json_text
from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.slurm.read.nodes import Node, NodeParseError
from gpuhc.slurm.report.build import (
    OWNERS,
    STATE_FILTERS,
    Filters,
    ReportError,
    build_report,
    parse_duration,
    with_incidents,
)
from gpuhc.slurm.report.fields import FIELDS, parse_fields, render_fields


def _split_multi(values: tuple[str, ...], lower: bool = True) -> frozenset[str]:
    """Repeated options and comma lists both work: ``--state drain,down --state fail``."""
    items = (v.strip() for item in values for v in item.split(","))
    return frozenset((v.lower() if lower else v) for v in items if v)


def _parse_now(text: str | None) -> float:
    if text is None:  # the usual case: skip importing the shared CLI helpers (config, runner)
        return time.time()
    from gpuhc.cli.common import parse_now

    value = parse_now(text)
    return time.time() if value is None else value


@click.command("drain-report", context_settings=CONTEXT)
@click.option("--from-file", "from_file", metavar="FILE",
              help="Read a saved dump instead of asking Slurm ('-' = stdin): `scontrol show node [-o]`, "
                   "sinfo/scontrol --json, slurmrestd JSON, or sinfo tables (default, -N -l, -R, -O with a "
                   "node column), several in one file with their shell prompts.")
@click.option("--partition", "partitions", multiple=True, metavar="NAME", help="Only nodes in these partitions (repeat or comma list).")
@click.option("--state", "states", multiple=True, metavar="STATE",
              help=f"Only these states: {', '.join(STATE_FILTERS)} (repeat or comma list).")
@click.option("--owner", "owners", multiple=True, metavar="OWNER", help=f"Only reasons set by: {', '.join(OWNERS)}.")
@click.option("--older-than", metavar="AGE", help="Only nodes out for at least AGE (90s, 30m, 2h, 1d).")
@click.option("--newer-than", metavar="AGE", help="Only nodes out for at most AGE.")
@click.option("--json", "json_mode", is_flag=True, help="JSON: groups, partition counts and one record per node.")
@click.option("--csv", "csv_mode", is_flag=True, help="CSV: one line per node.")
@click.option("-o", "--format", "fields", metavar="FIELDS",
              help=f"One line per node with these fields, comma-separated: {', '.join(FIELDS)}.")
@click.option("--parsable", is_flag=True, help="One line per node, fields separated by --delimiter (like sacct -P).")
@click.option("--delimiter", default="|", show_default=True, help="Field separator for --parsable.")
@click.option("--noheader", is_flag=True, help="No header lines (sinfo's --noheader; -h is help, as in every gpuhc command).")
@click.option("--all-rows", is_flag=True, help=f"Terminal table: show every row, not {TABLE_ROWS_PER_CAUSE} per cause.")
@click.option("--now", help="Compute ages as if it were this time (epoch seconds or ISO 8601).")
@click.option("--timeout", "timeout_s", type=Seconds(1.0, 600.0), default=20.0, show_default=True,
              help="Seconds to wait for scontrol.")
@click.option("--topology", "topology_file", metavar="FILE",
              help="Slurm's switches, to group failures under a suspect switch: topology.conf or saved "
                   "`scontrol show topology` output (default fleet.switch.topology_file; live: `scontrol show topology`).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="gpuhc.yaml, for slurm.scontrol and fleet.switch (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml, "
                   "if present).")
@click.option("--observed", is_flag=True, help="Instead: what observe mode (slurm.mode: observe) would have drained, "
              "resumed or retired in the last 7 days, from the event logs (as `gpuhc fleet observed`).")
def drain_report(from_file, partitions, states, owners, older_than, newer_than, json_mode, csv_mode, fields, parsable,
                 delimiter, noheader, all_rows, now, timeout_s, topology_file, config_path, observed):
    """Show every drained, draining, down or failed node, grouped by cause.

    Owner: `gpuhc` for reasons starting with "gpuhc:", `slurm` for reasons Slurm writes itself
    (Not responding, Prolog error, Kill task failed, ...), `admin` for everything else.
    Nodes gpuhc drained for one check under one leaf switch, at least fleet.switch.min_nodes of
    them within fleet.switch.window_s, are shown first as one suspect-switch incident.
    Exit code 0 whatever the nodes' health; 2 for bad options or a file with no node listing
    in it; 3 when Slurm does not answer. Parts of a file that are not node listings are skipped
    with a warning on stderr (and in --json).
    """
    if sum(map(bool, (json_mode, csv_mode, fields or parsable))) > 1:
        raise click.UsageError("choose one of --json, --csv and -o/--parsable")
    if observed:  # docs/repair.md "Observe mode"
        from gpuhc.cli.fleet_cmd import show_observed
        from gpuhc.config.load import load_config

        # -o names `fleet observed`'s columns here (its table, not the drained nodes')
        show_observed(load_config(config_path), 7 * 86400.0, (), json_mode, (fields, parsable, noheader))
        return
    try:
        chosen = parse_fields(fields) if fields or parsable else None
    except ReportError as e:
        raise click.UsageError(str(e)) from None
    try:
        filters = Filters(
            # partition names are case-sensitive in Slurm: keep them as typed
            partitions=_split_multi(partitions, lower=False),
            states=_split_multi(states),
            owners=_split_multi(owners),
            older_than_s=parse_duration(older_than) if older_than else None,
            newer_than_s=parse_duration(newer_than) if newer_than else None,
        )
    except ReportError as e:
        raise click.UsageError(str(e)) from None
    when = _parse_now(now)
    warnings: list[str] = []
    formats: list[str] = []
    sc = None
    config = None
    if from_file:
        nodes, source, warnings, formats = read_from_file(from_file)
        if topology_file:
            from gpuhc.config.load import load_config

            config = load_config(config_path)
    else:
        from gpuhc.config.load import load_config
        from gpuhc.slurm.act.scontrol import Scontrol

        config = load_config(config_path)
        sc = Scontrol.from_section(config.section("slurm"), timeout_s=timeout_s)
        nodes, source = read_live(timeout_s, sc, warnings)
    report = build_report(nodes, when, filters)
    if config is not None:
        leaf_of = read_topology(topology_file or config.section("fleet")["switch"]["topology_file"], sc, warnings)
        if leaf_of:
            from gpuhc.fleet.switches import failures_from_nodes, group_by_switch

            sw = config.section("fleet")["switch"]
            found, _ = group_by_switch(failures_from_nodes(e.node for e in report.entries), leaf_of,
                                       int(sw["min_nodes"]), float(sw["window_s"]))
            report = with_incidents(report, found)
    warnings += unknown_partitions(nodes, filters.partitions)
    for line in warnings:
        click.echo(f"gpuhc drain-report: warning: {escape(line)}", err=True)
    out = sys.stdout  # (click.get_text_stream is deprecated from Click 8.5 on)
    if json_mode:
        doc = {"source": source, "formats": formats, "warnings": warnings, **report.to_dict()}
        out.write(json_text(doc, indent=2) + "\n")  # exact text, every control character a JSON escape
    elif csv_mode:
        out.write(render_csv(report, header=not noheader))
    elif chosen is not None:
        out.write(render_fields(report, chosen, delimiter if parsable else None, header=not noheader))
    elif out.isatty() and not noheader:
        render_rich(report, source, all_rows, out)
    else:
        out.write(render_plain(report, source, header=not noheader))


# ---------------------------------------------------------------------------- input


MAX_DUMP_BYTES = 512 * 1024 * 1024  # a 10,000-node JSON dump is ~30 MB


def read_from_file(path: str) -> tuple[list[Node], str, list[str], list[str]]:
    """Every node in a saved listing (any format, any mix), where it came from, what was
    skipped, and the formats read. The file may come from anyone (a ticket, a user's paste):
    it is read without following a link, up to a stated size, and never blocks on a FIFO."""
    from gpuhc.slurm.read.dumps import read_dump
    from gpuhc.files.untrusted import UntrustedInputError, read_bounded

    where = "stdin" if path == "-" else path
    try:
        if path == "-":
            stdin = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin
            data = stdin.read(MAX_DUMP_BYTES + 1)
            if len(data) > MAX_DUMP_BYTES:
                raise GpuhcError(f"stdin: larger than the {MAX_DUMP_BYTES >> 20} MiB limit")
        else:
            data = read_bounded(path, MAX_DUMP_BYTES, what="node listing")
    except UntrustedInputError as e:
        hint = " (a pipe can come on stdin: --from-file -)" if "symbolic link" in str(e) else ""
        raise GpuhcError(f"{e}{hint}") from None
    except OSError as e:
        raise GpuhcError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        dump = read_dump(data)
    except NodeParseError as e:
        raise NodeParseError(f"{where}: {e}") from None
    return dump.nodes, where, dump.warnings, list(dict.fromkeys(dump.formats))


MAX_TOPOLOGY_BYTES = 16 * 1024 * 1024


def read_topology(path: str | None, scontrol, warnings: list[str]) -> dict[str, str]:
    """{node: leaf switch} from ``path`` (topology.conf or saved ``scontrol show topology``
    output: one parser reads both), else from live Slurm. A file named on the command line
    that cannot be read is the admin's error; a live Slurm with no topology, or one that
    does not answer, only costs the grouping: a warning, and the report goes on."""
    from gpuhc.fleet.switches import parse_topology_conf

    if path:
        from gpuhc.files.untrusted import UntrustedInputError, read_bounded

        try:
            data = read_bounded(path, MAX_TOPOLOGY_BYTES, what="topology file")
        except UntrustedInputError as e:
            raise GpuhcError(f"--topology: {e}") from None
        except OSError as e:
            raise GpuhcError(f"--topology: cannot read {path}: {e.strerror or e}") from None
        leaf_of = parse_topology_conf(data.decode("utf-8", "replace"))
        if not leaf_of:
            warnings.append(f"{path}: no leaf switch with Nodes= in it: failures are not grouped by switch")
        return leaf_of
    if scontrol is None:  # a saved dump with no --topology: the live cluster's switches are not its own
        return {}
    try:
        return parse_topology_conf(scontrol.show_topology())
    except SlurmError as e:
        warnings.append(f"failures are not grouped by switch: {e}")
        return {}


def unknown_partitions(nodes: list[Node], wanted: frozenset[str]) -> list[str]:
    """A --partition that no node is in is most likely a typo: say so rather than show nothing."""
    known = {p for n in nodes for p in n.partitions}
    missing = sorted(wanted - known)
    if not missing:
        return []
    return [f"no node is in partition {', '.join(missing)} (partitions here: {', '.join(sorted(known)) or 'none'})"]


def read_live(timeout_s: float, scontrol=None, warnings: list[str] | None = None) -> tuple[list[Node], str]:
    """Ask Slurm for every node: the one-line text first, JSON only when that is unreadable.

    Why text and not JSON: every Slurm release prints it (22.05 has no ``scontrol --json``),
    it carries everything a report needs, and on 10,000 nodes it is a quarter of the bytes
    and parses about three times faster than the JSON, which spells out every field of every
    node. JSON stays the fallback for an answer the text parser cannot read (a future layout).
    A failing or silent scontrol is not retried in the other format: slurmctld said no, or is
    not answering, and asking again would only double the admin's wait. A node record that does
    not read is left out and said in ``warnings``: the report still lists every other node.
    """
    from gpuhc.slurm.act.scontrol import Scontrol

    sc = scontrol or Scontrol(timeout_s=timeout_s)
    out = sc.show_all_raw("oneliner")
    try:
        return parse_nodes(out, None if warnings is None else warnings.append), "scontrol --oneliner show node"
    except NodeParseError as e:
        text_error = str(e)
    try:
        out = sc.show_all_raw("json")
    except SlurmError as e:
        from gpuhc.slurm.read.releases import json_hint

        raise SlurmError(f"scontrol --oneliner show node: unreadable answer: {text_error} "
                         f"(and the --json try failed: {e}{json_hint(str(e))})") from None
    try:
        return parse_nodes(out), "scontrol --json show node"
    except NodeParseError as e:
        raise SlurmError(f"scontrol --oneliner show node: unreadable answer: {text_error} "
                         f"(and --json: {e})") from None
