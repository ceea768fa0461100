"""The `sweep` config section: its ranges agree with what `gpuhc sweep run` accepts, and the
checks the schema cannot express (thresholds, size order) run from one function that the config
loader can call (`gpuhc.sweep.settings.validate`), with file, line and key in every message."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from gpuhc.cli.params import Number
from gpuhc.cli.sweep_cmd import run_cmd, sweep
from gpuhc.errors import ConfigError
from gpuhc.text.schema import Key
from gpuhc.sweep.settings import RUN_LIMITS, SCHEMA
from tests.helpers.paths import REPO

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
    if isinstance(param.type, click.IntRange):
        assert (param.type.min, param.type.max) == (lo, hi)
    else:
        assert isinstance(param.type, Number) and (param.type.lo, param.type.hi) == (lo, hi)


def test_latency_iters_above_the_limit_is_refused_by_both():
    """It used to be: the config took 100000, every probe job then died with a usage error."""
    lo, hi = RUN_LIMITS["latency_iters"]
    assert schema_key(("iters", "latency_iters")).check(hi + 1)
    res = CliRunner().invoke(sweep, ["run", "--out", "/nonexistent/x.json", "--latency-iters", str(hi + 1)])
    assert res.exit_code == 2 and "--latency-iters" in res.output
    assert schema_key(("iters", "latency_iters")).check(hi) is None


BAD_YAML = """\
state_dir: /var/lib/gpuhc
sweep:
  group_size: 2
  thresholds:
    nccl:
      "2x8":
        large_busbw_gbs: fast
hosts:
  - match: "gpu[001-004]"
    sweep:
      sizes:
        min_bytes: 4096
        max_bytes: 1024
"""


def test_validate_names_file_line_and_key_for_the_config_loader(tmp_path):
    """What `gpuhc config validate` must refuse: `load_config` calls
    `gpuhc.sweep.settings.validate(raw_section, file, lines, path)` for the top-level section
    and for every `hosts` entry (the call is the lead's, in gpuhc/config/load.py)."""
    from gpuhc.sweep.settings import validate
    from gpuhc.text.yamlpos import load_with_lines

    raw, lines = load_with_lines(BAD_YAML, "/etc/gpuhc/gpuhc.yaml")
    with pytest.raises(ConfigError) as e:
        validate(raw["sweep"], "/etc/gpuhc/gpuhc.yaml", lines)
    assert str(e.value).startswith("/etc/gpuhc/gpuhc.yaml:7: sweep.thresholds.nccl.2x8.large_busbw_gbs: ")
    host = raw["hosts"][0]["sweep"]
    with pytest.raises(ConfigError) as e:
        validate(host, "/etc/gpuhc/gpuhc.yaml", lines, ("hosts", 0, "sweep"))
    assert str(e.value) == ("/etc/gpuhc/gpuhc.yaml:12: hosts.0.sweep.sizes.min_bytes: "
                            "min_bytes 4096 is above max_bytes 1024")


@pytest.mark.parametrize("section, key", [
    ({"thresholds": {"nccl": {"default": {"small_p95_us": float("nan")}}}}, "sweep.thresholds.nccl.default.small_p95_us"),
    ({"thresholds": {"mpi": {"2x1": {"small_bytes": 1.5}}}}, "sweep.thresholds.mpi.2x1.small_bytes"),
    ({"sizes": {"min_bytes": 4 << 30}}, "sweep.sizes.min_bytes"),  # above the default max of 2 GiB
    ({"job": {"command": "gpuhc 'unclosed"}}, "sweep.job.command"),
    ({"job": {"command": "  "}}, "sweep.job.command"),
    ({"job": {"time": "15 minutes"}}, "sweep.job.time"),
    ({"job": {"time": "03:00:00", "deadline_h": 2.0}}, "sweep.job.deadline_h"),  # every job would be removed
    ("sweep", "sweep"),
])
def test_validate_refuses_what_the_schema_cannot_see(section, key):
    from gpuhc.sweep.settings import validate

    with pytest.raises(ConfigError) as e:
        validate(section)
    assert str(e.value).startswith(key + ": ")


def test_validate_accepts_defaults_partial_sections_and_the_shipped_example():

    from gpuhc.text.schema import defaults
    from gpuhc.sweep.settings import validate
    from gpuhc.text.yamlpos import load_with_lines

    validate(defaults(SCHEMA))
    validate({})
    validate(None)
    validate({"sizes": {"max_bytes": 1 << 20}, "thresholds": {"mpi": {"default": {"fleet_min_groups": 2}}}})
    path = REPO / "examples" / "sweep" / "gpuhc-sweep.yaml"
    raw, lines = load_with_lines(path.read_text(), str(path))
    validate(raw["sweep"], str(path), lines)
