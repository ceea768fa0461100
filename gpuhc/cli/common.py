"""Options shared by every command that reads a node, live or replayed."""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Iterator

from gpuhc.cli.options import Opt, click_options
from gpuhc.config.load import Config, load_config
from gpuhc.text.limits import MAX_GPUS
from gpuhc.model.record import FrozenRecord
from gpuhc.run.report import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.state.node import default_state_dir

DEMO_SCENARIO = "demo-8xh100.yaml"

MAX_GPU_INDEX = MAX_GPUS - 1  # stated in --help, like every bound (gpuhc.text.limits)


@dataclass(frozen=True, eq=False, repr=False)
class SourceArgs(FrozenRecord):
    """The options every command that reads a node shares (:func:`source_options`), typed and
    frozen: a command that changes one (``--demo``, a replay's host) makes a new value."""

    config_path: str | None = None
    state_dir: str | None = None
    nvml_scenario: str | None = None
    step: int | None = None
    kernel_log: str | None = None
    sysfs_root: str | None = None
    now: str | None = None  # as typed: parsed by run_options_from, where a prolog fails open
    hostname: str | None = None
    json_mode: bool = False


# click-free declarations (gpuhc/cli/options.py): the health check's own runs parse them without click
SOURCE_OPTIONS = (
    Opt(["--config"], "config_path", "path", "gpuhc.yaml (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).",
        dir_okay=False),
    Opt(["--state-dir"], "state_dir", "path", "State directory (default $GPUHC_STATE_DIR or config state_dir).",
        file_okay=False),
    Opt(["--nvml-scenario"], "nvml_scenario", "path",
        "Replay NVML (and any kernel_log/ib sections) from a scenario YAML.", exists=True, dir_okay=False),
    Opt(["--step"], "step", "int", "Scenario time step (default: advance one step per run).", min=0),
    Opt(["--kernel-log"], "kernel_log", "str", "Read the kernel log from FILE (or force 'kmsg' / 'dmesg')."),
    Opt(["--sysfs-root"], "sysfs_root", "path", "Directory standing in for / when reading sysfs.", file_okay=False),
    Opt(["--now"], "now", "str", "Judge as if it were this time (epoch seconds or ISO 8601)."),
    Opt(["--node"], "hostname", "str", "Node name (default $SLURMD_NODENAME, then the host name)."),
    Opt(["--json"], "json_mode", "flag", "Print the JSON report instead of a table."),
)
_SOURCE_FIELDS = tuple(f.name for f in fields(SourceArgs))


def source_options(fn):
    """--config, --state-dir, the replay options, --now, --node and --json, handed to the
    command as one ``src: SourceArgs`` next to its own parameters."""

    @functools.wraps(fn)
    def command(**kw):
        src = SourceArgs(**{name: kw.pop(name) for name in _SOURCE_FIELDS})
        return fn(src=src, **kw)

    command.__click_params__ = list(getattr(fn, "__click_params__", ()))  # not shared with fn
    return click_options(SOURCE_OPTIONS)(command)


def source_args(params: dict) -> tuple[SourceArgs, dict]:
    """(the source options of ``params``, the rest): a fast-parsed command line's split."""
    rest = dict(params)
    return SourceArgs(**{name: rest.pop(name) for name in _SOURCE_FIELDS}), rest


def node_name(explicit: str | None = None) -> str:
    """Slurm's name for this node: never guessed beyond SLURMD_NODENAME and the host name."""
    return explicit or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def parse_now(text: str | None) -> float | None:
    """--now as epoch seconds. Errors are GpuhcErrors: run_options_from serves the Slurm entry
    points too, and a prolog fails open on those."""
    from gpuhc.errors import GpuhcError

    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            value = datetime.fromisoformat(text).timestamp()
        except (ValueError, OverflowError, OSError):
            raise GpuhcError(f"--now: {text!r} is neither epoch seconds nor ISO 8601") from None
    # NaN compares false with every window edge: an Xid would never count, the node look healthy.
    # The upper bound (year 5138) keeps datetime conversions of "now" from overflowing.
    if not 0 <= value < 1e11:
        raise GpuhcError(f"--now: {text!r} is not a time (want epoch seconds >= 0)")
    return value


def demo_scenario_path() -> str:
    from importlib import resources

    return str(resources.files("gpuhc") / "data" / "scenarios" / DEMO_SCENARIO)


def load(src: SourceArgs) -> Config:
    return load_config(src.config_path, node_name(src.hostname))


def source_spec(src: SourceArgs, config: Config) -> SourceSpec:
    """Command line beats config; config `sources` lets a replay run under Slurm (tests)."""
    section = config.section("sources")
    return SourceSpec(
        nvml_scenario=_replay_path(src.nvml_scenario, config, "nvml_scenario", "--nvml-scenario"),
        test_scenario=_replay_path(None, config, "test_scenario", "") if not src.nvml_scenario else None,
        step=src.step,
        kernel_log=_replay_path(src.kernel_log, config, "kernel_log", "--kernel-log"),
        sysfs_root=_replay_path(src.sysfs_root, config, "sysfs_root", "--sysfs-root"),
        clock_samples=section.get("clock_samples", 3),
        clock_sample_interval_s=section.get("clock_sample_interval_s", 0.02),
    )


def source_problem(key: str, path: str | None) -> str | None:
    """Why a recorded scenario, kernel log or sysfs tree at ``path`` cannot serve as
    ``sources.<key>``, or None: the one test a run and `gpuhc config validate` both apply (a
    dangling link is "no such file" to both)."""
    if not path or (key == "kernel_log" and path in ("kmsg", "dmesg")):
        return None
    want_dir = key == "sysfs_root"
    if not os.path.exists(path):
        return "no such directory" if want_dir else "no such file"
    if want_dir and not os.path.isdir(path):
        return "not a directory"
    if not want_dir and os.path.isdir(path):
        return "is a directory, not a log file"
    return None


def _replay_path(given: str | None, config: Config, key: str, option: str) -> str | None:
    """A recorded scenario, kernel log or sysfs tree (``given`` on the command line, else the
    config's ``sources.<key>``), checked before anything runs.

    A mistyped path must not read as "this node has no Xids / no InfiniBand": a sysfs root that
    does not exist lists no ports, which the checks would call healthy (n/a)."""
    path = given or config.section("sources").get(key)
    problem = source_problem(key, path)
    if problem is None:
        return path
    from gpuhc.errors import ConfigError, GpuhcError

    if given:  # (a GpuhcError, which the Slurm entry points know how to fail open on)
        raise GpuhcError(f"{option}: {path}: {problem}")
    from gpuhc.text.yamlpos import line_of

    where: tuple = ()
    if config.hostname:  # the hosts: entry that set it, the last matching one, as the merge applied them
        from gpuhc.config.hosts import host_matches

        for i, (pattern, settings) in enumerate(config.overrides):
            if (settings.get("sources") or {}).get(key) and host_matches(config.hostname, pattern):
                where = ("hosts", i)
    dotted = ".".join(str(p) for p in (*where, "sources", key))
    raise ConfigError(f"{path}: {problem}", config.path, line_of(config.lines, (*where, "sources", key)), dotted)


def replay_of(src: SourceArgs) -> str | None:
    """What a run replays from the command line ("a.yaml, kernel log k.log"), or None when it
    reads this node. (A replay the config's ``sources`` names is this node as configured: a
    test cluster's fake node, which publishes like a real one.)"""
    parts = []
    if src.nvml_scenario:
        parts.append(os.path.basename(src.nvml_scenario))
    if src.kernel_log and src.kernel_log not in ("kmsg", "dmesg"):
        parts.append(f"kernel log {os.path.basename(src.kernel_log)}")
    if src.sysfs_root:
        parts.append(f"sysfs {src.sysfs_root}")
    return ", ".join(parts) or None


def recorded_host(src: SourceArgs) -> str | None:
    """--node, else the host a replayed scenario was recorded on, else None (this node)."""
    if src.hostname or not src.nvml_scenario:
        return src.hostname
    from gpuhc.sources.scenario import load_scenario

    return load_scenario(src.nvml_scenario, src.step).hostname


@contextmanager
def replay_scope(src: SourceArgs) -> Iterator[tuple[SourceArgs, str | None]]:
    """``(src, what is replayed)`` for the block. A replay is named after the recorded host
    (unless --node) and judged with a fresh temporary state directory (unless --state-dir),
    removed when the block ends, so one replay never remembers another's Xid nor touches the
    live node's memory. A live run gets ``(src, None)`` unchanged."""
    replay = replay_of(src)
    if not replay:
        yield src, None
        return
    src = replace(src, hostname=recorded_host(src))
    if src.state_dir:
        yield src, replay
        return
    from gpuhc.files.fsutil import scratch_dir

    with scratch_dir("gpuhc-replay-") as scratch:
        yield replace(src, state_dir=scratch), replay


def run_options_from(src: SourceArgs, stage: str, gpus: list[int] | None = None,
                     config: Config | None = None) -> RunOptions:
    config = config or load(src)
    sources = source_spec(src, config)
    if not (sources.nvml_scenario or sources.test_scenario):
        # This node's own GPUs: Slurm's count for it comes first (docs/slurm.md, "Expected GPUs").
        from gpuhc.slurm.read.slurmconf import with_slurm_gpus

        config = with_slurm_gpus(config, node_name(src.hostname))
    return RunOptions(
        stage=stage,
        config=config,
        sources=sources,
        state_dir=src.state_dir or default_state_dir(config.data.get("state_dir")),
        gpus=gpus,
        now=parse_now(src.now),
        hostname=node_name(src.hostname),
    )


def bad_parameter(message: str, option: str) -> Exception:
    """click's usage error for ``option`` (exit 2), click imported only on this error path."""
    import click

    return click.BadParameter(message, param_hint=option)


def parse_gpu_list(text: str | None) -> list[int] | None:
    """'0,1,3' or '0-3' -> [0, 1, 3] (each index at most MAX_GPU_INDEX); None/'' -> None (all GPUs).
    ASCII digits only: str.isdigit() and int() also take other scripts' digits ('\u0663' is 3)."""
    if not text:
        return None
    out: set[int] = set()  # (a set: "0-1023" a thousand times over is still 1024 GPUs)
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not part.isascii() or not lo.strip().isdigit() or (hi and not hi.strip().isdigit()) or part.endswith("-"):
            raise bad_parameter(f"{part!r} is not a GPU index or range (ASCII digits, e.g. 0,1 or 0-3)", "--gpus")
        first, last = int(lo), int(hi) if hi else int(lo)
        if last < first:
            raise bad_parameter(f"{part!r}: range ends before it starts", "--gpus")
        if last > MAX_GPU_INDEX:
            raise bad_parameter(f"{part!r}: GPU indices go up to {MAX_GPU_INDEX}", "--gpus")
        out.update(range(first, last + 1))
    if not out:
        raise bad_parameter(f"{text!r} names no GPU", "--gpus")
    return sorted(out)


def write_output(path: str, text: str, what: str = "output file") -> None:
    """Write ``text`` to ``path`` whole or not at all, never through a link (gpuhc.files.fsutil)."""
    from gpuhc.errors import GpuhcError
    from gpuhc.files.fsutil import write_atomic

    try:
        write_atomic(path, text.encode("utf-8"), 0o644, what)
    except OSError as e:
        raise GpuhcError(f"cannot write {path}: {e.strerror or e}") from None
