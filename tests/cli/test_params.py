"""Numbers from the command line and the config are finite and bounded: NaN, inf and overflow
are a usage error (exit 2) naming the option or key, never an internal error (exit 3), a wait
that never ends or a verdict judged against NaN (issue 18, docs/security.md: numbers)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from gpuhc.cli import cli as main
from gpuhc.cli.params import Number, Seconds
from gpuhc.config.load import load_config
from gpuhc.errors import ConfigError


def _walk(cmd: click.Command, path: str = "gpuhc"):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):  # the top group loads its commands lazily
            yield from _walk(cmd.get_command(ctx, name), f"{path} {name}")


def test_no_option_takes_a_float_that_could_be_nan():
    """click's FLOAT and FloatRange take "nan" and "inf"; every float option uses Number."""
    loose, seen = [], 0
    for path, cmd in _walk(main):
        seen += 1
        for p in cmd.params:
            if isinstance(p.type, (click.types.FloatParamType, click.FloatRange)):
                loose.append(f"{path} {p.opts[0]}")
    assert seen > 20, "the walk did not reach the commands"
    assert not loose, f"float options that accept NaN/inf: {loose}"


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e999", "x"])
def test_number_refuses_what_is_not_a_finite_number(text):
    with pytest.raises(click.BadParameter):
        Number(0).convert(text, None, None)


@pytest.mark.parametrize("kind,text,ok", [
    (Number(0, lo_open=True), "0", False), (Number(0, lo_open=True), "1e-9", True),
    (Number(0, 1), "1", True), (Number(0, 1), "1.0000001", False), (Number(hi=5), "-3", True),
    (Seconds(1.0, 600.0), "600", True), (Seconds(1.0, 600.0), "0.5", False),
])
def test_number_bounds(kind, text, ok):
    if ok:
        assert kind.convert(text, None, None) == float(text)
    else:
        with pytest.raises(click.BadParameter, match="is not"):
            kind.convert(text, None, None)


@pytest.mark.parametrize("argv", [
    ["fleet", "risk", "--gpus", "8", "--hours", "nan", "--rate", "0.1"],
    ["fleet", "risk", "--gpus", "8", "--hours", "inf", "--rate", "0.1"],
    ["fleet", "risk", "--gpus", "8", "--hours", "1", "--rate", "nan"],
    ["fleet", "stats", "--since", "99999999999999999999d", "--no-slurm"],
    ["drain-report", "--from-file", "/dev/null", "--older-than", "99999999999999999999d"],
    ["sweep", "simulate", "--noise", "nan"],
])
def test_the_issues_numbers_are_usage_errors(argv):
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "internal error" not in res.output


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_config_numbers_must_be_finite(value, tmp_path):
    path = tmp_path / "gpuhc.yaml"
    path.write_text(f"slurm:\n  breaker:\n    max_drained_percent: {value}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert "max_drained_percent" in str(e.value) and "finite" in str(e.value)
