"""`scontrol show node` text (one-line and multi-line) into Node, and the Node model itself."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhc.errors import GpuhcError
from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.slurm.read.nodes import (
    Node,
    NodeParseError,
    node_fields,
    parse_record,
    parse_show_node,
    parse_show_node_oneline,
    parse_slurm_time,
    parse_state,
    split_reason,
)
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"


def local(ts: str) -> float:
    return time.mktime(time.strptime(ts, "%Y-%m-%dT%H:%M:%S"))


def by_name(nodes: list[Node]) -> dict[str, Node]:
    return {n.name: n for n in nodes}


@pytest.mark.parametrize(
    "raw, base, flags",
    [
        ("IDLE", "IDLE", set()),
        ("IDLE+DRAIN", "IDLE", {"DRAIN"}),
        ("MIXED+DRAIN", "MIXED", {"DRAIN"}),
        ("DOWN*", "DOWN", {"NOT_RESPONDING"}),
        ("DOWN*+DRAIN", "DOWN", {"NOT_RESPONDING", "DRAIN"}),
        ("IDLE+DRAIN+REBOOT_REQUESTED", "IDLE", {"DRAIN", "REBOOT_REQUESTED"}),
        ("DRAINED", "DRAINED", {"DRAIN"}),
        ("draining", "DRAINING", {"DRAIN"}),
        ("drain", "DRAINED", {"DRAIN"}),
        ("alloc", "ALLOCATED", set()),
        ("idle~", "IDLE", {"POWERED_DOWN"}),
        ("IDLE+MAINT", "IDLE", {"MAINTENANCE"}),
        ("FAILING", "FAILING", {"FAIL"}),
        ("", "UNKNOWN", set()),
    ],
)
def test_parse_state(raw, base, flags):
    assert parse_state(raw) == (base, frozenset(flags))


def test_node_properties():
    def node(raw: str) -> Node:
        state, flags = parse_state(raw)
        return Node("x", state, flags, None, None, None, raw_state=raw)

    assert node("IDLE+DRAIN").drained and not node("IDLE+DRAIN").draining
    assert node("MIXED+DRAIN").draining and node("ALLOCATED+DRAIN").draining
    assert node("DRAINING").draining and node("DRAINED").drained
    assert node("DOWN*").down and node("DOWN*").not_responding and node("DOWN*").unavailable
    assert node("IDLE+FAIL").failing and node("IDLE+FAIL").unavailable
    assert not node("MIXED").unavailable and not node("IDLE").drained and not node("IDLE").down


def test_split_reason_keeps_brackets_inside_text():
    text, user, when = split_reason("gpuhc: xid [a=b] c [root@2024-06-11T10:23:45]")
    assert (text, user, when) == ("gpuhc: xid [a=b] c", "root", local("2024-06-11T10:23:45"))
    assert split_reason("no user part") == ("no user part", None, None)
    assert split_reason("") == (None, None, None)
    # an unreadable time keeps text and user
    assert split_reason("x [bob@yesterday]") == ("x", "bob", None)


def test_parse_slurm_time():
    assert parse_slurm_time("2024-06-11T10:23:45") == local("2024-06-11T10:23:45")
    assert parse_slurm_time("Unknown") is None and parse_slurm_time("None") is None


def test_record_values_with_spaces_and_equals():
    rec = parse_record(
        "NodeName=x OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) RealMemory=5 "
        "CfgTRES=cpu=96,mem=2000M State=IDLE NewKey2030=v Reason=a State=b x=y [u@2024-06-11T10:23:45] Comment=c d"
    )
    assert rec["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"
    assert rec["CfgTRES"] == "cpu=96,mem=2000M"
    assert rec["NewKey2030"] == "v"  # an unknown key of a newer Slurm still ends the previous value
    assert rec["Reason"] == "a State=b x=y [u@2024-06-11T10:23:45]"
    assert rec["Comment"] == "c d"
    assert rec["State"] == "IDLE"


def test_oneline_fixture():
    nodes = parse_show_node_oneline((FIX / "show_node_oneline.txt").read_text())
    n = by_name(nodes)
    assert list(n) == [f"gpu00{i}" for i in range(1, 8)]
    assert not n["gpu001"].unavailable and n["gpu001"].reason is None
    assert n["gpu002"].drained and n["gpu002"].partitions == ("gpu", "debug")
    assert n["gpu002"].reason == "gpuhc: xid Xid 79 on gpu3 (0000:b3:00.0) [fallen off the bus] action=drain+ticket"
    assert (n["gpu002"].reason_user, n["gpu002"].reason_time) == ("root", local("2024-06-11T10:23:45"))
    # non-ASCII and a `State=` inside the reason; Comment/Extra after it are not part of it
    assert n["gpu003"].reason == "Carte réseau HS — ticket #4711 State=ask Jürgen"
    assert n["gpu003"].reason_user == "jürgen" and n["gpu003"].draining
    assert n["gpu003"].state == "MIXED" and n["gpu003"].raw_state == "MIXED+DRAIN"
    assert n["gpu004"].down and n["gpu004"].not_responding and n["gpu004"].reason == "Not responding"
    assert n["gpu005"].flags == {"DRAIN", "REBOOT_REQUESTED"}
    assert n["gpu006"].failing and n["gpu006"].reason_user == "admin"
    assert n["gpu007"].state == "DRAINED" and n["gpu007"].drained and n["gpu007"].reason == "Prolog error"


def test_multiline_blocks_with_preamble():
    nodes = parse_show_node((FIX / "show_node_blocks.txt").read_text())
    assert [n.name for n in nodes] == ["gpu101", "gpu102"]
    a, b = nodes
    assert a.drained and a.reason == "gpuhc: nvlink link 3 down on gpu5" and a.partitions == ("a100", "preempt")
    assert b.state == "ALLOCATED" and not b.unavailable and b.reason is None


def test_multiline_reason_continuation():
    text = (
        "NodeName=n1 State=IDLE+DRAIN Partitions=p\n"
        "   Reason=first line [root@2024-06-11T10:23:45]\n"
        "          second line\n"
    )
    (node,) = parse_show_node(text)
    assert node.reason == "first line second line" and node.drained
    assert (node.reason_user, node.reason_time) == ("root", local("2024-06-11T10:23:45"))


def test_shell_prompt_preamble_is_not_mistaken_for_json():
    (node,) = parse_nodes("[root@head ~]# scontrol show node\nNodeName=a State=IDLE\n")
    assert node.name == "a"
    assert [n.name for n in parse_nodes(' [ {"name": "a"} ]')] == ["a"] and parse_nodes("[]") == []


def test_parse_nodes_autodetects_text_and_oneline_equals_blocks():
    one = parse_nodes((FIX / "show_node_oneline.txt").read_text())
    assert one == parse_show_node_oneline((FIX / "show_node_oneline.txt").read_text())


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "not a Slurm node listing"),
        ("hello world\nthis is not slurm", "not a Slurm node listing"),
        ("NodeName= State=IDLE", "no NodeName"),
    ],
)
def test_garbage_gives_a_clear_error(text, needle):
    with pytest.raises(NodeParseError) as err:
        parse_nodes(text)
    assert needle in str(err.value)
    assert isinstance(err.value, GpuhcError)


def test_oneline_rejects_text_before_the_first_record():
    with pytest.raises(NodeParseError, match="line 1: expected a line starting with NodeName="):
        parse_show_node_oneline("State=IDLE NodeName=b\nNodeName=a State=IDLE\n")


def test_oneline_line_that_starts_no_record_continues_the_one_before():
    # A reason's line break printed raw (and a \r, which str.splitlines would split at): the
    # text belongs to the record before, and the next record still reads.
    text = ("NodeName=a State=IDLE+DRAIN Reason=x\ny\rz [root@2024-01-01T00:00:00]\n"
            "State=IDLE NodeName=evil\nNodeName=b State=IDLE\n")
    a, b = parse_show_node_oneline(text)
    assert (a.name, a.reason, a.reason_user, a.drained) == ("a", "x y\rz State=IDLE NodeName=evil", "root", True)
    assert (b.name, b.state) == ("b", "IDLE")


# Reason text as an admin might type it: any printable characters, `=`, brackets, `@`, even
# the names of keys that follow the reason in Slurm's output.
_reason_text = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N", "P", "S", "Zs"), blacklist_characters="\x85\u2028\u2029"),
    min_size=1, max_size=60,
).map(lambda s: " ".join(s.split())).filter(bool) | st.sampled_from(
    ["a Comment=b", "x [y] Extra=z", "see [bob@2024-01-01T00:00:00] Comment=q", "State=DOWN NodeName=evil", "=[]@"]
)


@settings(max_examples=300, deadline=None)
@given(reason=_reason_text, user=st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True),
       comment=st.none() | st.sampled_from(["", "vendor RMA", "x=y z"]), extra=st.booleans())
def test_reason_round_trips_through_oneline(reason, user, comment, extra):
    line = f"NodeName=n1 Arch=x86_64 State=IDLE+DRAIN Partitions=gpu Reason={reason} [{user}@2024-06-11T10:23:45]"
    if comment is not None:
        line += f" Comment={comment}"
    if extra:
        line += " Extra=rack=1"
    (node,) = parse_show_node_oneline(line)
    assert (node.reason, node.reason_user) == (reason, user)
    assert node.reason_time == local("2024-06-11T10:23:45") and node.drained


def _agrees(record: str) -> None:
    fast = node_fields(record)
    full = parse_record(record)
    for key in ("NodeName", "State", "Partitions", "Reason"):
        assert fast.get(key) == full.get(key), (key, record)


def test_fast_fields_agree_with_the_full_record_parser():
    lines = (FIX / "show_node_oneline.txt").read_text().splitlines()
    assert lines, "an empty fixture would compare nothing"
    for line in lines:
        _agrees(line)


@settings(max_examples=200, deadline=None)
@given(reason=_reason_text, stamp=st.booleans(), trailer=st.sampled_from(["", " Comment=c d", " Extra=x=1", " ReservationName=r"]))
def test_fast_fields_agree_on_any_reason(reason, stamp, trailer):
    line = f"NodeName=n1 OS=Linux 6.1 #1 SMP State=MIXED+DRAIN Partitions=a,b Reason={reason}"
    line += (" [root@2024-06-11T10:23:45]" if stamp else "") + trailer
    _agrees(line)
