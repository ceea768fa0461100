"""Options shared by every command that reads a node, live or replayed."""

from __future__ import annotations

import functools
import os
from datetime import datetime

import click

from gpuhc.config import Config, load_config
from gpuhc.limits import MAX_GPUS, MAX_WAIT_S
from gpuhc.runner import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.state import default_state_dir

DEMO_SCENARIO = "demo-8xh100.yaml"

MAX_GPU_INDEX = MAX_GPUS - 1  # stated in --help, like every bound (gpuhc.limits)


class Seconds(click.ParamType):
    """A finite number of seconds in [lo, hi]: click's FloatRange lets NaN through (it compares
    false with both ends), and a NaN timeout waits forever or prints "timed out after nans"."""

    name = "seconds"

    def __init__(self, lo: float = 0.1, hi: float = MAX_WAIT_S):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not self.lo <= seconds <= self.hi:  # False for NaN
            self.fail(f"{value!r} is not between {self.lo:g} and {self.hi:g} seconds", param, ctx)
        return seconds


def source_options(fn):
    """--config, --state-dir, the replay options, --now and --json."""
    opts = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml)."),
        click.option("--state-dir", type=click.Path(file_okay=False), help="State directory (default $GPUHC_STATE_DIR or config state_dir)."),
        click.option("--nvml-scenario", type=click.Path(exists=True, dir_okay=False), help="Replay NVML (and any kernel_log/ib sections) from a scenario YAML."),
        click.option("--step", type=click.IntRange(min=0), help="Scenario time step (default: advance one step per run)."),
        click.option("--kernel-log", help="Read the kernel log from FILE (or force 'kmsg' / 'dmesg')."),
        click.option("--sysfs-root", type=click.Path(file_okay=False), help="Directory standing in for / when reading sysfs."),
        click.option("--now", help="Judge as if it were this time (epoch seconds or ISO 8601)."),
        click.option("--node", "hostname", help="Node name (default $SLURMD_NODENAME, then the host name)."),
        click.option("--json", "json_mode", is_flag=True, help="Print the JSON report instead of a table."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


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


def load(kw: dict) -> Config:
    return load_config(kw.get("config_path"), node_name(kw.get("hostname")))


def source_spec(kw: dict, config: Config) -> SourceSpec:
    """Command line beats config; config `sources` lets a replay run under Slurm (tests)."""
    src = config.section("sources")
    kernel_log = _replay_path(kw, config, "kernel_log", "--kernel-log")
    sysfs_root = _replay_path(kw, config, "sysfs_root", "--sysfs-root")
    return SourceSpec(
        nvml_scenario=_replay_path(kw, config, "nvml_scenario", "--nvml-scenario"),
        step=kw.get("step"),
        kernel_log=kernel_log,
        sysfs_root=sysfs_root,
        clock_samples=src.get("clock_samples", 3),
        clock_sample_interval_s=src.get("clock_sample_interval_s", 0.02),
    )


def _replay_path(kw: dict, config: Config, key: str, option: str) -> str | None:
    """A recorded scenario, kernel log or sysfs tree, checked before anything runs.

    A mistyped path must not read as "this node has no Xids / no InfiniBand": a sysfs root that
    does not exist lists no ports, which the checks would call healthy (n/a)."""
    path = kw.get(key)
    given_by = option
    if not path:
        path = config.section("sources").get(key)
        given_by = f"sources.{key}"
    if not path or (key == "kernel_log" and path in ("kmsg", "dmesg")):
        return path
    want_dir = key == "sysfs_root"
    problem = None
    if not os.path.exists(path):
        problem = "no such directory" if want_dir else "no such file"
    elif want_dir and not os.path.isdir(path):
        problem = "not a directory"
    elif not want_dir and os.path.isdir(path):
        problem = "is a directory, not a log file"
    if problem is None:
        return path
    from gpuhc.errors import ConfigError, GpuhcError

    if kw.get(key):  # (a GpuhcError, which the Slurm entry points know how to fail open on)
        raise GpuhcError(f"{option}: {path}: {problem}")
    from gpuhc.yamlpos import line_of

    raise ConfigError(f"{path}: {problem}", config.path, line_of(config.lines, ("sources", key)), given_by)


def replay_of(kw: dict) -> str | None:
    """What a run replays from the command line ("a.yaml, kernel log k.log"), or None when it
    reads this node. (A replay the config's ``sources`` names is this node as configured: a
    test cluster's fake node, which publishes like a real one.)"""
    parts = []
    if kw.get("nvml_scenario"):
        parts.append(os.path.basename(kw["nvml_scenario"]))
    if kw.get("kernel_log") and kw["kernel_log"] not in ("kmsg", "dmesg"):
        parts.append(f"kernel log {os.path.basename(kw['kernel_log'])}")
    if kw.get("sysfs_root"):
        parts.append(f"sysfs {kw['sysfs_root']}")
    return ", ".join(parts) or None


def recorded_host(kw: dict) -> str | None:
    """--node, else the host a replayed scenario was recorded on, else None (this node)."""
    if kw.get("hostname") or not kw.get("nvml_scenario"):
        return kw.get("hostname")
    from gpuhc.sources.scenario import load_scenario

    return load_scenario(kw["nvml_scenario"], kw.get("step")).hostname


def prepare_replay(kw: dict):
    """For a replay: name it after the recorded host (unless --node) and give it a fresh
    temporary state directory (unless --state-dir), so one replay never remembers another's
    Xid nor touches the live node's memory. Returns (what is replayed or None, the temporary
    directory to clean up or None)."""
    replay = replay_of(kw)
    if not replay:
        return None, None
    kw["hostname"] = recorded_host(kw)
    if kw.get("state_dir"):
        return replay, None
    import tempfile

    scratch = tempfile.TemporaryDirectory(prefix="gpuhc-replay-")
    kw["state_dir"] = scratch.name
    return replay, scratch


def run_options_from(kw: dict, stage: str, gpus: list[int] | None = None, config: Config | None = None) -> RunOptions:
    config = config or load(kw)
    return RunOptions(
        stage=stage,
        config=config,
        sources=source_spec(kw, config),
        state_dir=kw.get("state_dir") or default_state_dir(config.data.get("state_dir")),
        gpus=gpus,
        now=parse_now(kw.get("now")),
        hostname=node_name(kw.get("hostname")),
    )


def parse_gpu_list(text: str | None) -> list[int] | None:
    """'0,1,3' or '0-3' -> [0, 1, 3] (each index at most MAX_GPU_INDEX); None/'' -> None (all GPUs)."""
    if not text:
        return None
    out: set[int] = set()  # (a set: "0-1023" a thousand times over is still 1024 GPUs)
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.strip().isdigit() or (hi and not hi.strip().isdigit()) or part.endswith("-"):
            raise click.BadParameter(f"{part!r} is not a GPU index or range (e.g. 0,1 or 0-3)", param_hint="--gpus")
        first, last = int(lo), int(hi) if hi else int(lo)
        if last < first:
            raise click.BadParameter(f"{part!r}: range ends before it starts", param_hint="--gpus")
        if last > MAX_GPU_INDEX:
            raise click.BadParameter(f"{part!r}: GPU indices go up to {MAX_GPU_INDEX}", param_hint="--gpus")
        out.update(range(first, last + 1))
    if not out:
        raise click.BadParameter(f"{text!r} names no GPU", param_hint="--gpus")
    return sorted(out)


def write_output(path: str, text: str, what: str = "output file") -> None:
    """Write ``text`` to ``path`` whole or not at all, never through a link (gpuhc.fsutil)."""
    from gpuhc.errors import GpuhcError
    from gpuhc.fsutil import write_atomic

    try:
        write_atomic(path, text.encode("utf-8"), 0o644, what)
    except OSError as e:
        raise GpuhcError(f"cannot write {path}: {e.strerror or e}") from None


def passthrough(fn):
    """Keep kwargs as one dict for run_options_from."""

    @functools.wraps(fn)
    def wrapper(**kw):
        return fn(kw)

    return wrapper
