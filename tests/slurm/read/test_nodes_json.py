"""Every Slurm JSON node listing into Node, recognised by its fields, not its version string."""

from __future__ import annotations

import json

import pytest

from gpuhc.slurm.read.dumps import parse_nodes
from gpuhc.slurm.read.nodes import NodeParseError
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm"


def load(name: str):
    return {n.name: n for n in parse_nodes((FIX / name).read_text())}


def test_sinfo_json_v0038():
    n = load("sinfo_json_v0038.json")
    assert not n["a1"].unavailable and n["a1"].reason is None and n["a1"].reason_time is None
    assert n["a2"].drained and n["a2"].state == "IDLE" and n["a2"].partitions == ("gpu", "debug")
    assert (n["a2"].reason_user, n["a2"].reason_time) == ("root", 1718101425.0)
    assert n["a3"].down and n["a3"].not_responding and n["a3"].raw_state == "DOWN+NOT_RESPONDING"
    assert n["a4"].draining and n["a4"].flags == {"DRAIN", "REBOOT_REQUESTED"}
    assert n["a4"].partitions == ("gpu",)  # a comma string is accepted too


def test_scontrol_json_2302_state_list_base_not_first():
    n = load("scontrol_json_2302.json")
    assert n["b1"].state == "IDLE" and n["b1"].reason_user is None
    assert n["b2"].state == "MIXED" and n["b2"].draining and n["b2"].reason == "Epilog error"
    assert n["b3"].down and n["b3"].drained and n["b3"].not_responding and n["b3"].partitions == ()


def test_scontrol_json_2311_time_objects():
    n = load("scontrol_json_2311.json")
    assert n["c1"].reason_time == 1718101425.0 and n["c1"].reason_user == "slurm"
    assert n["c2"].flags == {"POWERED_DOWN"} and n["c2"].reason_time is None and not n["c2"].unavailable
    assert n["c3"].state == "ALLOCATED"


def test_sinfo_json_2311_groups_merge_partitions():
    n = load("sinfo_json_2311.json")
    assert sorted(n) == ["d1", "d2", "d3"]
    assert n["d2"].partitions == ("gpu", "debug") and n["d1"].partitions == ("gpu",)
    assert n["d1"].drained and n["d1"].reason == "gpuhc: xid Xid 79 on gpu0" and n["d1"].reason_time == 1718101425.0
    assert not n["d3"].unavailable


def test_bare_list_and_non_ascii_reason():
    doc = [{"name": "e1", "state": ["IDLE", "DRAIN"], "reason": "défaut mémoire ✗", "reason_set_by_user": "root",
            "reason_changed_at": 5}]
    (node,) = parse_nodes(json.dumps(doc, ensure_ascii=False))
    assert node.reason == "défaut mémoire ✗" and node.reason_time == 5.0
    (node,) = parse_nodes(json.dumps(doc))  # \u escapes decode the same
    assert node.reason == "défaut mémoire ✗"


@pytest.mark.parametrize(
    "doc, needle",
    [
        ('{"nodes": [', "not valid JSON at line 1"),
        ('{"foo": 1}', "no `nodes` or `sinfo`"),
        ('{"nodes": {"a": 1}}', "`nodes` must be a list"),
        ('{"nodes": [{"state": "idle"}]}', "nodes[0]: node has no `name`"),
        ('{"nodes": [{"name": "x", "state": 5}]}', "nodes[0] (x): `state` must be"),
        ('{"nodes": [{"name": "x", "state": ["IDLE"], "reason": "r", "reason_changed_at": "soon"}]}', "reason_changed_at"),
        ('{"nodes": [], "errors": [{"description": "Unable to contact slurmctld", "error_number": 1}]}', "Unable to contact slurmctld"),
        ('"just a string"', "not a Slurm node listing"),
        ('{"sinfo": [{"nodes": {"nodes": ["bad[1-"]}}]}', "bad hostlist"),
        ('{"sinfo": [{"nodes": [""]}]}', "sinfo[0]: `nodes.nodes` must be a list of node names"),  # a node named ""
        ('{"nodes": [{"name": " "}]}', "nodes[0]: node has no `name`"),
    ],
)
def test_bad_json_names_the_format_and_place(doc, needle):
    with pytest.raises(NodeParseError) as err:
        parse_nodes(doc)
    assert needle in str(err.value)
