"""The options every node-reading command shares arrive as one typed ``SourceArgs`` (issue 10),
and replays get their own host name and scratch state."""

from __future__ import annotations

import os

import click
import pytest
from click.testing import CliRunner

from gpuhc.cli.common import SourceArgs, parse_gpu_list, replay_of, replay_scope, run_options_from, source_options
from tests.helpers.paths import REPO

ROOT = REPO
XID79 = str(ROOT / "examples" / "scenarios" / "xid79-fallen-off-bus.yaml")  # recorded on gpu001
ARGV = ["--nvml-scenario", XID79, "--step", "2", "--kernel-log", "dmesg", "--now", "1700000000",
        "--node", "n7", "--json", "--state-dir", "/nonexistent-state"]


def invoke(command: click.Command, argv: list[str]):
    out = CliRunner().invoke(command, argv)
    assert out.exit_code == 0, (out.output, out.exception)


def test_source_options_hand_one_typed_value_beside_the_commands_own():
    seen = []

    @click.command()
    @click.option("--force", is_flag=True)
    @source_options
    def cmd(src: SourceArgs, force: bool) -> None:
        seen.append((src, force))

    invoke(cmd, [*ARGV, "--force"])
    invoke(cmd, [])
    assert seen == [
        (SourceArgs(state_dir="/nonexistent-state", nvml_scenario=XID79, step=2, kernel_log="dmesg",
                    now="1700000000", hostname="n7", json_mode=True), True),
        (SourceArgs(), False),
    ]


def test_run_options_from_the_typed_value(tmp_path, monkeypatch):
    """What healthcheck, prolog, epilog and quarantine retest/release hand the runner."""
    monkeypatch.delenv("GPUHC_CONFIG", raising=False)
    seen = []

    @click.command()
    @click.option("--reboot", is_flag=True)
    @source_options
    def cmd(src: SourceArgs, reboot: bool) -> None:
        seen.append((run_options_from(src, "passive"), reboot))

    argv = [a if a != "/nonexistent-state" else str(tmp_path) for a in ARGV]
    invoke(cmd, [*argv, "--reboot"])
    ((opts, reboot),) = seen
    assert reboot and opts.sources.nvml_scenario == XID79 and opts.sources.step == 2
    assert (opts.sources.kernel_log, opts.state_dir, opts.now, opts.hostname) == (
        "dmesg", str(tmp_path), 1700000000.0, "n7")


def test_a_live_run_is_left_as_it_is():
    src = SourceArgs(hostname="n7", kernel_log="kmsg")
    with replay_scope(src) as (scoped, replay):
        assert (scoped, replay) == (src, None)


def test_a_replay_is_named_after_the_recording_and_judged_in_a_scratch_state_removed_after():
    src = SourceArgs(nvml_scenario=XID79)
    with replay_scope(src) as (scoped, replay):
        scratch = scoped.state_dir
        assert (replay, scoped.hostname) == ("xid79-fallen-off-bus.yaml", "gpu001")
        assert os.path.isdir(scratch) and os.path.basename(scratch).startswith("gpuhc-replay-")
    assert not os.path.exists(scratch)
    assert src == SourceArgs(nvml_scenario=XID79)  # the caller's value is untouched


def test_a_replay_keeps_the_node_and_state_it_was_given(tmp_path):
    src = SourceArgs(nvml_scenario=XID79, hostname="n7", state_dir=str(tmp_path))
    with replay_scope(src) as (scoped, _):
        assert scoped == src
    assert tmp_path.is_dir()


def test_replay_of_names_every_recorded_part_and_nothing_live():
    assert replay_of(SourceArgs(nvml_scenario=XID79, kernel_log="/x/k.log", sysfs_root="/x/sys")) == (
        "xid79-fallen-off-bus.yaml, kernel log k.log, sysfs /x/sys")
    assert replay_of(SourceArgs(kernel_log="dmesg")) is None


# Other scripts' digits: str.isdigit() and int() take them ("\u0663" is 3, Arabic-Indic), and
# int() refuses some that isdigit() accepts ("\u00b2", superscript two).
NON_ASCII_DIGITS = ["\u0663", "\u0969", "\uff13", "\u00b2", "0-\u0663", "1,\u0663"]


@pytest.mark.parametrize("text", NON_ASCII_DIGITS)
def test_gpu_lists_take_ascii_digits_only(text):
    with pytest.raises(click.BadParameter, match="ASCII digits"):
        parse_gpu_list(text)
    assert parse_gpu_list(" 3, 0-1") == [0, 1, 3]
