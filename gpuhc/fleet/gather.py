"""What the fleet commands read: Slurm's accounting and node list, and gpuhc's event logs.

The pure modules (history, stats, suspects, switches) take text and records; this one runs the
commands and hands their output over. Every command goes through the one Slurm command wrapper
(:class:`gpuhc.slurm.act.command.SlurmCommand`): the program configured in ``slurm.<program>``, argv
only, killed at ``fleet.sacct_timeout_s``, any failure a SlurmError naming the command.
``gpuhc sweep submit`` asks :func:`suspects_for_sweep` too.
"""

from __future__ import annotations

import time

from gpuhc.errors import GpuhcError, SlurmError
from gpuhc.fleet.history import combine, parse_sacctmgr_events, read_event_logs, sacctmgr_argv
from gpuhc.fleet.stats import compute
from gpuhc.fleet.suspects import Settings, judge, parse_sacct, sacct_argv, suspects
from gpuhc.slurm.act.command import SlurmCommand


def slurm_command(config) -> SlurmCommand:
    """The fleet commands' way to Slurm: the configured programs, each call killed at
    ``fleet.sacct_timeout_s`` (accounting queries over weeks are slow; docs/repair.md)."""
    return SlurmCommand.from_section(config.section("slurm"),
                                     timeout_s=float(config.section("fleet")["sacct_timeout_s"]))


def _partitions(cmd: SlurmCommand, notes: list[str]) -> dict[str, tuple[str, ...]]:
    """{node: its partitions} from sinfo; empty (with a note) when sinfo does not answer."""
    try:
        out = cmd.call(["sinfo", "--noheader", "--Node", "--format", "%N|%R"])
    except SlurmError as e:
        notes.append(f"node list unavailable ({e}): only nodes in the history are counted, so MTBF runs short")
        return {}
    parts: dict[str, tuple[str, ...]] = {}
    skipped = 0
    for line in out.split("\n"):  # records end at \n alone (docs/slurm.md, "Reading Slurm's output")
        node, _, part = line.strip().partition("|")
        if node and part:
            parts[node] = tuple(dict.fromkeys((*parts.get(node, ()), part)))
        elif line.strip():
            skipped += 1
    if skipped:
        notes.append(f"{skipped} sinfo line(s) of the node list did not read and were skipped")
    return parts


def event_log_paths(config, given=()) -> list[str]:
    """The event logs to read: given on the command line, else fleet.event_logs, else this
    node's own output.event_log."""
    own = config.section("output").get("event_log")
    return list(given) or list(config.section("fleet")["event_logs"]) or ([own] if own else [])


def gather_stats(config, since_s: float, event_logs: tuple[str, ...], use_slurm: bool, now: float | None = None,
                 cmd: SlurmCommand | None = None):
    cmd = cmd or slurm_command(config)
    end = time.time() if now is None else now
    start = end - since_s
    notes: list[str] = []
    slurm, sources = [], []
    if use_slurm:
        try:
            slurm = parse_sacctmgr_events(cmd.call(sacctmgr_argv(start, end)))
            sources.append("sacctmgr show event")
        except SlurmError as e:
            notes.append(f"Slurm's node events unavailable ({e}): is slurmdbd configured?")
    paths = event_log_paths(config, event_logs)
    logged = read_event_logs(paths, notes) if paths else []
    if paths:
        sources.append(f"{len(paths)} event log(s)")
    if not sources:
        raise GpuhcError("no history to read: Slurm's accounting did not answer and no event log is configured "
                         "(fleet.event_logs, output.event_log, or --event-log)" + (f"; {notes[0]}" if notes else ""))
    parts = _partitions(cmd, notes) if use_slurm else {}
    stats = compute(combine(slurm, logged), parts, start, end)
    stats.notes = notes + stats.notes + [f"sources: {', '.join(sources)}"]
    return stats


def find_suspects(config, since_s: float, now: float | None = None, cmd: SlurmCommand | None = None):
    cmd = cmd or slurm_command(config)
    end = time.time() if now is None else now
    jobs, bad = parse_sacct(cmd.call(sacct_argv(end - since_s, end)))
    notes = [f"{bad} sacct line(s) did not parse and were skipped"] if bad else []
    return judge(jobs, Settings.from_section(config.section("fleet")["suspects"])), notes


def suspects_for_sweep(config, log=None) -> list[str]:
    """Suspect nodes for ``gpuhc sweep submit`` to probe first; empty when turned off or when
    sacct does not answer (said through ``log``: a sweep must not fail for want of accounting)."""
    section = config.section("fleet")["suspects"]
    if not section["sweep_first"]:
        return []
    try:
        records, _ = find_suspects(config, float(section["since_days"]) * 86400.0)
    except SlurmError as e:
        if log:
            log(f"suspects not probed first: {e}")
        return []
    return suspects(records)
