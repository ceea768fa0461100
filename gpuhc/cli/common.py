"""Options shared by every command that reads a node, live or replayed."""

from __future__ import annotations

import functools
import os
from datetime import datetime

import click

from gpuhc.config import Config, load_config
from gpuhc.runner import RunOptions
from gpuhc.sources import SourceSpec
from gpuhc.state import default_state_dir

DEMO_SCENARIO = "demo-8xh100.yaml"


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
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither epoch seconds nor ISO 8601", param_hint="--now") from None


def demo_scenario_path() -> str:
    from importlib import resources

    return str(resources.files("gpuhc") / "data" / "scenarios" / DEMO_SCENARIO)


def load(kw: dict) -> Config:
    return load_config(kw.get("config_path"), node_name(kw.get("hostname")))


def source_spec(kw: dict, config: Config) -> SourceSpec:
    """Command line beats config; config `sources` lets a replay run under Slurm (tests)."""
    src = config.section("sources")
    return SourceSpec(
        nvml_scenario=kw.get("nvml_scenario") or src.get("nvml_scenario"),
        step=kw.get("step"),
        kernel_log=kw.get("kernel_log") or src.get("kernel_log"),
        sysfs_root=kw.get("sysfs_root") or src.get("sysfs_root"),
        clock_samples=src.get("clock_samples", 3),
        clock_sample_interval_s=src.get("clock_sample_interval_s", 0.02),
    )


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
    """'0,1,3' or '0-3' -> [0, 1, 3]; None/'' -> None (all GPUs)."""
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


def passthrough(fn):
    """Keep kwargs as one dict for run_options_from."""

    @functools.wraps(fn)
    def wrapper(**kw):
        return fn(kw)

    return wrapper
