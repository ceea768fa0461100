"""One escaper for every human-facing output (issue 18, item 5): node names, reasons, users and
partitions come from Slurm, typed by others. Whatever they hold, drain-report's table, plain
text, ``-o``, ``--parsable`` and CSV, and the fleet tables print no raw control character (one
node stays one line, nothing drives the terminal), and ``--json`` keeps the exact text."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhc.cli.report_render import render_csv, render_plain, render_rich
from gpuhc.text.logtext import json_text
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.report.build import build_report
from gpuhc.slurm.report.fields import FIELDS, render_fields

NASTY = ["\x1b[2J", "\x1b]0;owned\x07", "\x9b31m", "\r", "\n", "\x00", "\x7f", "\u2028", "\u202e", "\xfc", "\ufffd",
         "[bold]x[/]", "|", ",", '"']
odd_text = st.lists(st.sampled_from(NASTY) | st.text(max_size=6), min_size=1, max_size=8).map("".join)


def raw_control(text: str) -> list[str]:
    """Characters that act on a terminal or break a line, the line's own newline aside."""
    return sorted({repr(ch) for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f
                   or ch in "\u2028\u2029\u202e"})


def nodes_of(names: list[str], reasons: list[str]) -> list[Node]:
    return [Node(name, "IDLE", frozenset({"DRAIN"}), reason, "ro\x1bot", 1.7e9, ("gpu\x07",), "IDLE+DRAIN")
            for name, reason in zip(dict.fromkeys(names), reasons * len(names))]


@settings(max_examples=150, deadline=None)
@given(st.lists(odd_text, min_size=1, max_size=6), st.lists(odd_text, min_size=1, max_size=3))
def test_every_drain_report_form_prints_no_raw_control_character(names, reasons):
    nodes = nodes_of(names, reasons)
    report = build_report(nodes, 1.8e9)
    forms = {
        "plain": render_plain(report, "src\x1b]0;x\x07"),
        "plain -h": render_plain(report, "src", header=False),
        "csv": render_csv(report),
        "-o": render_fields(report, tuple(FIELDS), None),
        "--parsable": render_fields(report, tuple(FIELDS), "|", header=False),
    }
    buf = io.StringIO()
    render_rich(report, "src\x1b[2J", True, buf, width=160)
    forms["table"] = buf.getvalue()
    for form, out in forms.items():
        assert raw_control(out) == [], form
    # one line per node in the per-node forms (CSV quotes, but never needs a raw line break)
    assert len(forms["--parsable"].split("\n")) == len(nodes) + 1
    assert len(forms["csv"].split("\n")) == len(nodes) + 2
    # JSON: exact data back, and nothing raw on the terminal either
    doc = json_text(report.to_dict(), indent=2)
    assert raw_control(doc) == []
    back = {rec["node"]: rec["reason"] for rec in json.loads(doc)["nodes"]}
    assert back == {n.name: n.reason for n in nodes}


def test_escapes_are_visible_not_dropped():
    (n,) = nodes_of(["n\x1b[31m1"], ["cr\rlf\nosc\x1b]0;t\x07"])
    out = render_fields(build_report([n], 1.8e9), ("node", "reason", "user", "partitions"), "|", header=False)
    assert out == "n\\x1b[31m1|cr\\x0dlf\\x0aosc\\x1b]0;t\\x07|ro\\x1bot|gpu\\x07\n"


@settings(max_examples=60, deadline=None)
@given(st.lists(odd_text, min_size=1, max_size=5))
def test_fleet_tables_print_no_raw_control_character(names):
    from gpuhc.fleet.history import parse_sacctmgr_events
    from gpuhc.fleet.render import render_incidents, render_stats, render_suspects
    from gpuhc.fleet.stats import compute
    from gpuhc.fleet.suspects import NodeRecord
    from gpuhc.fleet.switches import Failure, Incident

    # sacctmgr's answer, node names and reasons as others typed them (one record per line)
    text = "".join(f"{name.replace(chr(10), ' ').replace(chr(13), ' ')}|2026-01-0{i % 9 + 1}T00:00:00|"
                   f"2026-01-0{i % 9 + 1}T05:00:00|DRAIN|odd \x1b]0;x\x07 {i}|root\n" for i, name in enumerate(names))
    stats = compute(parse_sacctmgr_events(text), {}, 1.767e9, 1.768e9)
    outs = []
    for render, args in ((render_stats, (stats,)),
                         (render_suspects, ([NodeRecord(n, "gpu\x1b", 10, 5, {"FAILED\x07": 5}, ["1\x1b"], 0.001,
                                                        suspect=True) for n in names], True)),
                         (render_incidents, ([Incident("leaf\x1b]0;x\x07", "xid", [Failure(n, "xid", 1.7e9, "d\x1b")
                                                                                   for n in names])],
                                             [Failure(n, "xid\r", 1.7e9, "evidence\n\x1b[2J") for n in names]))):
        buf = io.StringIO()
        render(*args, stream=buf)
        outs.append(buf.getvalue())
    for out in outs:
        assert raw_control(out) == [], out[:500]


@settings(max_examples=100, deadline=None)
@given(st.lists(odd_text, min_size=1, max_size=5), st.lists(odd_text, min_size=1, max_size=3), st.sampled_from(["|", ",", ";;"]))
def test_parsable_fields_never_shift_whatever_a_reason_holds(names, reasons, delimiter):
    """Issue 29: a ``|`` inside a reason (or a node or user name) shifted drain-report
    --parsable's fields; the delimiter inside a value is written \\xNN."""
    report = build_report(nodes_of(names, reasons), 1.8e9)
    out = render_fields(report, tuple(FIELDS), delimiter, header=True)
    for line in out.splitlines():
        assert len(line.split(delimiter)) == len(FIELDS), line
    (n,) = nodes_of(["n1"], ["admin: swap PSU | ticket 4711"])
    assert "admin: swap PSU \\x7c ticket 4711" in render_fields(build_report([n], 1.8e9), ("node", "reason"), "|")
