"""Fuzzing `drain-report --from-file` input (issue 8): any shuffle of real listing lines, prompts,
junk and random JSON is either read (every block it recognises, the rest warned about) or
refused with NodeParseError; the report and every output format then render. Never another
exception, so never exit 3."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhc.cli.report_render import render_csv, render_plain, render_rich
from gpuhc.slurm.read.dumps import read_dump
from gpuhc.slurm.read.nodes import NodeParseError
from gpuhc.slurm.report.build import build_report
from gpuhc.slurm.report.fields import FIELDS, render_fields
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"
REAL_LINES = sorted({line for p in FIX.rglob("*") if p.is_file() and p.suffix in (".txt", ".json")
                     for line in p.read_bytes().decode("utf-8", "replace").split("\n")})
PROMPTS = ["[root@head ~]# sinfo -R", "$ scontrol show node", "user@login:~$ sinfo -N -l", "# sinfo", "sinfo -O"]
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
json_values = st.recursive(scalars, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=10), ch,
                                                                                           max_size=4), max_leaves=20)
node_like = st.fixed_dictionaries({"name": st.text(max_size=8), "state": json_values, "reason": json_values,
                                   "reason_changed_at": json_values, "partitions": json_values})
lines = st.one_of(st.sampled_from(REAL_LINES), st.sampled_from(PROMPTS), st.text(max_size=60),
                  st.sampled_from(REAL_LINES).map(lambda s: s[: len(s) // 2]))


def render_all(nodes) -> None:
    report = build_report(nodes, 1.8e9)
    json.dumps(report.to_dict(), allow_nan=False)
    render_plain(report, "fuzz")
    render_plain(report, "fuzz", header=False)
    render_csv(report)
    render_fields(report, tuple(FIELDS), "|")
    render_fields(report, tuple(FIELDS), None)
    render_rich(report, "fuzz", True, io.StringIO(), width=100)


def read_or_refuse(data: bytes) -> None:
    try:
        dump = read_dump(data)
    except NodeParseError as e:
        assert str(e).startswith(("no Slurm node listing found", "Slurm node JSON", "Slurm reported errors"))
        return
    assert dump.formats and all(n.name for n in dump.nodes)  # an empty JSON list is an empty cluster
    render_all(dump.nodes)


@settings(max_examples=300, deadline=None)
@given(st.lists(lines, max_size=30))
def test_any_mix_of_listing_lines_is_read_or_refused(chosen):
    read_or_refuse("\n".join(chosen).encode())


@settings(max_examples=200, deadline=None)
@given(st.one_of(json_values, st.lists(node_like, max_size=4), st.fixed_dictionaries({"nodes": st.lists(node_like, max_size=4)}),
                 st.fixed_dictionaries({"sinfo": st.lists(st.dictionaries(st.sampled_from(["nodes", "node", "reason", "partition"]),
                                                                          json_values), max_size=3)})))
def test_any_json_is_read_or_refused(doc):
    read_or_refuse(json.dumps(doc).encode())


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 300_000), st.sampled_from(["[", "{\"nodes\":"]))
def test_deep_json_is_refused_not_a_recursion_error(depth, opener):
    text = "[" * depth + "]" * depth if opener == "[" else '{"nodes":' * depth + "[]" + "}" * depth
    read_or_refuse(text.encode())


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_read_or_refused(data):
    read_or_refuse(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(lines, max_size=20), st.sampled_from([[], ["--json"], ["--csv"], ["--parsable", "--noheader"], ["-o", "node,doubt"]]))
def test_the_command_ends_in_a_report_or_a_usage_error_never_an_internal_one(chosen, args):
    from click.testing import CliRunner

    from gpuhc.cli import cli
    from gpuhc.errors import GpuhcError

    r = CliRunner().invoke(cli, ["drain-report", "--from-file", "-", "--now", "2026-11-26T07:00:00", *args],
                           input="\n".join(chosen).encode())
    # run_cli maps GpuhcError to exit 2; anything else escaping would be exit 3
    if r.exception is None:
        assert r.exit_code == 0  # whatever the nodes' health
    else:
        assert isinstance(r.exception, GpuhcError), repr(r.exception)


def test_hostlists_cannot_expand_a_small_file_into_millions_of_nodes():
    rows = "".join(f"down{i % 10}   root      2026-11-26T06:11:11 n{i}x[1-99999]\n" for i in range(3))
    dump = read_dump(("REASON               USER      TIMESTAMP           NODELIST\n" + rows).encode())
    assert len(dump.nodes) <= 200_000 and "more than 200,000 node names" in dump.warnings[-1]
    groups = [{"nodes": {"nodes": [f"g{i}x[1-99999]"]}, "node": {"state": ["DOWN"]}} for i in range(3)]
    try:
        read_dump(json.dumps({"sinfo": groups}).encode())
    except NodeParseError as e:
        assert "more than 200,000 node names" in str(e)
    else:
        raise AssertionError("a listing of 300,000 nodes was read")
