"""What the fleet commands read: Slurm's accounting and node list, and gpuhc's event logs.

The pure modules (history, stats, suspects, switches) take text and records; this one runs the
commands (argv lists, each with a timeout; any failure is a SlurmError naming the command) and
hands their output over. ``gpuhc sweep submit`` asks :func:`suspects_for_sweep` too.
"""

from __future__ import annotations

import time

from gpuhc.errors import GpuhcError, SlurmError


def run_slurm(argv: list[str], timeout_s: float) -> str:
    """Run a Slurm reader; any failure is a SlurmError naming the command."""
    import subprocess

    from gpuhc.slurm.command import subprocess_runner

    what = " ".join(argv[:3])
    try:
        rc, out, err = subprocess_runner(argv, timeout_s)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: no answer within {timeout_s:g}s") from None
    except OSError as e:
        raise SlurmError(f"{what}: cannot run {argv[0]}: {e.strerror or e}") from None
    if rc != 0:
        raise SlurmError(f"{what} failed (exit {rc}): {' '.join((err or out).split())[:300] or 'no message'}")
    return out


def _partitions(timeout_s: float, notes: list[str]) -> dict[str, tuple[str, ...]]:
    """{node: its partitions} from sinfo; empty (with a note) when sinfo does not answer."""
    try:
        out = run_slurm(["sinfo", "--noheader", "--Node", "--format", "%N|%R"], timeout_s)
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


def gather_stats(config, since_s: float, event_logs: tuple[str, ...], use_slurm: bool, now: float | None = None):
    from gpuhc.fleet.history import combine, parse_sacctmgr_events, read_event_logs, sacctmgr_argv
    from gpuhc.fleet.stats import compute

    fleet = config.section("fleet")
    timeout = float(fleet["sacct_timeout_s"])
    end = time.time() if now is None else now
    start = end - since_s
    notes: list[str] = []
    slurm, sources = [], []
    if use_slurm:
        try:
            slurm = parse_sacctmgr_events(run_slurm(sacctmgr_argv(start, end), timeout))
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
    parts = _partitions(timeout, notes) if use_slurm else {}
    stats = compute(combine(slurm, logged), parts, start, end)
    stats.notes = notes + stats.notes + [f"sources: {', '.join(sources)}"]
    return stats


def find_suspects(config, since_s: float, now: float | None = None):
    from gpuhc.fleet.suspects import Settings, judge, parse_sacct, sacct_argv

    fleet = config.section("fleet")
    end = time.time() if now is None else now
    jobs, bad = parse_sacct(run_slurm(sacct_argv(end - since_s, end), float(fleet["sacct_timeout_s"])))
    notes = [f"{bad} sacct line(s) did not parse and were skipped"] if bad else []
    return judge(jobs, Settings.from_section(fleet["suspects"])), notes




def suspects_for_sweep(config, log=None) -> list[str]:
    """Suspect nodes for ``gpuhc sweep submit`` to probe first; empty when turned off or when
    sacct does not answer (said through ``log``: a sweep must not fail for want of accounting)."""
    section = config.section("fleet")["suspects"]
    if not section["sweep_first"]:
        return []
    from gpuhc.fleet.suspects import suspects

    try:
        records, _ = find_suspects(config, float(section["since_days"]) * 86400.0)
    except SlurmError as e:
        if log:
            log(f"suspects not probed first: {e}")
        return []
    return suspects(records)
