"""The `sweep` config section: its ranges agree with what `gpuhc sweep run` accepts, and the
checks the schema cannot express (thresholds, size order) run from one function that the config
loader can call (`gpuhc.sweep.settings.validate`), with file, line and key in every message."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from gpuhc.cli.sweep_cmd import run_cmd, sweep
from gpuhc.errors import ConfigError
from gpuhc.schema import Key
from gpuhc.sweep.settings import RUN_LIMITS, SCHEMA

# Config key path of each job-side setting, and the `sweep run` option it becomes.
WHERE = {
    "min_bytes": (("sizes", "min_bytes"), "min_bytes"), "max_bytes": (("sizes", "max_bytes"), "max_bytes"),
    "factor": (("sizes", "factor"), "factor"), "warmup": (("iters", "warmup"), "warmup"),
    "iters": (("iters", "iters"), "iters"), "latency_iters": (("iters", "latency_iters"), "latency_iters"),
    "latency_max_bytes": (("iters", "latency_max_bytes"), "latency_max_bytes"), "timeout_s": (("timeout_s",), "timeout_s"),
}


def schema_key(path: tuple[str, ...]) -> Key:
    node = SCHEMA
    for part in path:
        node = node[part]
    return node


@pytest.mark.parametrize("name", sorted(RUN_LIMITS))
def test_config_schema_and_sweep_run_accept_the_same_range(name):
    path, option = WHERE[name]
    key = schema_key(path)
    param = next(p for p in run_cmd.params if p.name == option)
    lo, hi = RUN_LIMITS[name]
    assert (key.min, key.max) == (lo, hi)
    assert isinstance(param.type, (click.IntRange, click.FloatRange))
    assert (param.type.min, param.type.max) == (lo, hi)


def test_latency_iters_above_the_limit_is_refused_by_both():
    """It used to be: the config took 100000, every probe job then died with a usage error."""
    lo, hi = RUN_LIMITS["latency_iters"]
    assert schema_key(("iters", "latency_iters")).check(hi + 1)
    res = CliRunner().invoke(sweep, ["run", "--out", "/nonexistent/x.json", "--latency-iters", str(hi + 1)])
    assert res.exit_code == 2 and "--latency-iters" in res.output
    assert schema_key(("iters", "latency_iters")).check(hi) is None
