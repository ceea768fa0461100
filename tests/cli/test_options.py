"""The hot commands' options, declared once (gpuhc/cli/options.py): the small parser of the
node's own runs and click agree on every command line the small one accepts, and it hands
every other one to click (which then says what is wrong in its own words)."""

from __future__ import annotations

import itertools

import click
import pytest

from gpuhc.cli.check_run import OPTIONS as CHECK
from gpuhc.cli.common import SOURCE_OPTIONS
from gpuhc.cli.options import click_options, fast_parse
from tests.helpers.paths import REPO

SCENARIO = str(REPO / "examples" / "scenarios" / "healthy-8xh100.yaml")
DECLS = (*CHECK, *SOURCE_OPTIONS)


def click_parse(argv: list[str]) -> dict | None:
    """What click gives the command for ``argv``, or None where it refuses it."""
    got = {}

    @click.command()
    @click_options(DECLS)
    def cmd(**kw):
        got.update(kw)

    try:
        cmd.main(list(argv), standalone_mode=False)
    except click.ClickException:
        return None
    return got


ACCEPTED = [
    [],
    ["--stage", "prolog"],
    ["--stage=epilog", "--json"],
    ["--nvml-scenario", SCENARIO, "--step", "3", "--now", "1700000000", "--node", "gpu001"],
    ["--only", "xid", "--only=ecc", "-v", "--timings", "--publish", "--gpus", "0-3"],
    ["--config", "/nonexistent/gpuhc.yaml", "--state-dir", "/nonexistent/state", "--kernel-log", "kmsg"],
    ["--demo", "--step=0", "--sysfs-root", str(REPO)],
]


@pytest.mark.parametrize("argv", ACCEPTED, ids=lambda a: " ".join(a)[:40] or "none")
def test_both_parsers_read_a_plain_command_line_alike(argv):
    fast = fast_parse(DECLS, argv)
    assert fast is not None, argv
    assert fast == click_parse(argv)


@pytest.mark.parametrize("argv", [
    ["-h"], ["--help"], ["--stage", "bogus"], ["--step", "-1"], ["--step", "x"], ["--nvml-scenario", "/nonexistent"],
    ["--nvml-scenario", str(REPO)], ["--config", str(REPO)], ["--state-dir", SCENARIO], ["--json=1"], ["--stag", "x"],
    ["--stage"], ["--node", "--json"], ["-vh"], ["--"], ["positional"], ["--stage", "passive", "--stage", "prolog"],
])
def test_anything_unusual_goes_to_click(argv):
    assert fast_parse(DECLS, argv) is None


def test_every_pair_of_options_agrees_or_goes_to_click():
    # Each declared option with a typical value, two at a time in both orders: the small parser
    # either reads the line as click does or leaves it to click.
    values = {"stage": "prolog", "gpu_list": "0,1", "only": "xid", "config_path": "/nonexistent/x.yaml",
              "state_dir": "/nonexistent/st", "nvml_scenario": SCENARIO, "step": "2", "kernel_log": "kmsg",
              "sysfs_root": str(REPO), "now": "0", "hostname": "n1"}
    tokens = [[o.flags[-1]] if o.kind == "flag" else [o.flags[-1], values[o.dest]] for o in DECLS]
    for a, b in itertools.permutations(tokens, 2):
        argv = a + b
        fast = fast_parse(DECLS, argv)
        assert fast is not None and fast == click_parse(argv), argv
