"""drain-report's JSON reader: the fast path agrees with the careful one on every node shape,
orjson and json give the same nodes, and bytes read straight from a file parse like text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhc.slurm.read import nodes_json
from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.slurm.read.nodes import NodeParseError
from gpuhc.slurm.read.nodes_json import _fast_node, _guess_kind, _node, parse_nodes_json
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"
JSON_FIXTURES = sorted(p.name for p in FIX.glob("*.json"))

WORDS = st.sampled_from(["IDLE", "idle", "MIXED", "DOWN", "down*", "DRAIN", "NOT_RESPONDING", "drained",
                         "ALLOCATED", "REBOOT_REQUESTED", "", "FUTURE"])
# Integers within 64 bits, as Slurm prints them: past that, orjson (when installed) reads a number
# as a float where json keeps an int, and the refusal's message quotes the value differently
# (both refuse: gpuhc.slurm.read.nodes_json.loads).
INT = st.integers(-2 ** 63, 2 ** 63 - 1)
ODD = st.one_of(st.none(), st.integers(-5, 5), st.booleans(), st.floats(allow_nan=False),
                st.dictionaries(st.text(max_size=3), INT, max_size=2), st.lists(INT, max_size=2))
TIME = st.one_of(st.integers(-10, 2_000_000_000), st.floats(0, 2e9, allow_nan=False),
                 st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(), "number": st.integers(0, 2**40)}),
                 st.fixed_dictionaries({"number": st.integers(0, 10)}), ODD)


def good_items():
    """Node objects in the shapes Slurm writes (each field may be missing)."""
    fields = {
        "state_flags": st.one_of(st.lists(WORDS, max_size=2), st.just(""), st.none()),
        "reason": st.one_of(st.sampled_from(["gpuhc: xid Xid 79 on gpu3", "  ", "", "défaut ✗"]), st.none()),
        "reason_set_by_user": st.one_of(st.sampled_from(["root", "", " slurm "]), st.none()),
        "reason_changed_at": st.one_of(st.integers(-10, 2_000_000_000), st.floats(0, 2e9),
                                       st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(),
                                                              "number": st.integers(0, 2**40)}), st.none()),
        "partitions": st.one_of(st.lists(st.sampled_from(["gpu", "debug", ""]), max_size=3), st.just("gpu,,long"),
                                st.none()),
        "cpus": st.integers(0, 96),  # an unknown key: ignored
    }
    return st.fixed_dictionaries({"name": st.sampled_from(["n1", "gpu0042"]),
                                  "state": st.one_of(WORDS, st.lists(WORDS, max_size=3))}, optional=fields)


def node_items():
    """Node objects as Slurm writes them, with every field sometimes missing or of a wrong type."""
    fields = {
        "name": st.one_of(st.sampled_from(["n1", "gpu0042", ""]), ODD),
        "state": st.one_of(WORDS, st.lists(WORDS, max_size=3), st.lists(ODD, min_size=1, max_size=2), ODD),
        "state_flags": st.one_of(st.lists(WORDS, max_size=2), st.just(""), ODD),
        "reason": st.one_of(st.sampled_from(["gpuhc: xid Xid 79 on gpu3", "  ", "", "défaut ✗"]), ODD),
        "reason_set_by_user": st.one_of(st.sampled_from(["root", "", " slurm "]), ODD),
        "reason_changed_at": TIME,
        "partitions": st.one_of(st.lists(st.sampled_from(["gpu", "debug", ""]), max_size=3), st.just("gpu,,long"),
                                st.lists(ODD, min_size=1, max_size=2), ODD),
        "cpus": st.integers(0, 96),  # an unknown key: ignored
    }
    return st.fixed_dictionaries({}, optional=fields)


def careful(item, i=0):
    try:
        return _node(item, f"nodes[{i}]", _guess_kind(item))
    except NodeParseError as e:
        return ("error", str(e))


@settings(max_examples=300, deadline=None)
@given(good_items())
def test_fast_path_takes_every_usual_shape_and_agrees(item):
    fast = _fast_node(item)
    assert fast is not None and fast == careful(item), item


@settings(max_examples=400, deadline=None)
@given(node_items())
def test_fast_path_never_accepts_what_the_careful_path_refuses(item):
    fast = _fast_node(item)
    slow = careful(item)
    if fast is not None:  # else the careful path judges it, whatever it says
        assert fast == slow, (item, fast, slow)


@settings(max_examples=200, deadline=None)
@given(st.lists(node_items(), max_size=4))
def test_document_results_equal_the_careful_path_node_by_node(items):
    want = [careful(it, i) for i, it in enumerate(items)]
    errors = [w for w in want if isinstance(w, tuple)]
    doc = json.dumps({"nodes": items})
    if errors:
        with pytest.raises(NodeParseError) as err:
            parse_nodes_json(doc)
        assert str(err.value) == errors[0][1]
    else:
        assert parse_nodes_json(doc) == want


@pytest.mark.parametrize("name", JSON_FIXTURES)
def test_orjson_and_json_give_the_same_nodes(name, monkeypatch):
    text = (FIX / name).read_text()
    with_orjson = parse_nodes(text)
    monkeypatch.setattr(nodes_json, "_orjson", None)
    assert parse_nodes(text) == with_orjson
    assert with_orjson  # every fixture has nodes


def test_orjson_is_used_exactly_when_importable():
    try:
        import orjson
    except ImportError:  # json is the fallback; the tests above prove both give the same nodes
        orjson = None
    assert nodes_json._orjson is orjson


def test_what_orjson_refuses_json_still_reads():
    # NaN and a 70-bit integer in keys gpuhc ignores: json takes them, so must we.
    doc = '{"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "x", "cpu_load": NaN,' \
          ' "big": 1180591620717411303424}]}'
    (node,) = parse_nodes(doc)
    assert node.drained and node.reason == "x"


def test_bytes_parse_like_text_and_keep_non_ascii():
    doc = {"nodes": [{"name": "e1", "state": ["IDLE", "DRAIN"], "reason": "défaut mémoire ✗",
                      "reason_set_by_user": "root", "reason_changed_at": {"set": True, "infinite": False, "number": 7}}]}
    text = json.dumps(doc, ensure_ascii=False)
    assert parse_nodes(text.encode()) == parse_nodes(text)
    assert parse_nodes(text.encode())[0].reason == "défaut mémoire ✗"
    oneline = (FIX / "show_node_oneline.txt").read_bytes()
    assert parse_nodes(oneline) == parse_nodes(oneline.decode())


def test_bytes_that_are_not_utf8_still_parse():
    raw = b'{"nodes": [{"name": "n1", "state": "drained", "reason": "bad \xff byte"}]}'
    (node,) = parse_nodes(raw)
    assert node.reason == "bad \ufffd byte" and node.drained


def test_invalid_json_bytes_name_line_and_column():
    with pytest.raises(NodeParseError, match="not valid JSON at line 2 column"):
        parse_nodes(b'{"nodes": [\n  {"name": "n1",, }]}')


def test_the_collector_is_back_on_after_parsing():
    import gc

    assert gc.isenabled()
    parse_nodes((FIX / "scontrol_json_2311.json").read_bytes())
    assert gc.isenabled()
    with pytest.raises(NodeParseError):
        parse_nodes('{"nodes": [{"state": "idle"}]}')
    assert gc.isenabled()
