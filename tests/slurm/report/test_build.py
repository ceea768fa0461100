"""gpuhc.slurm.report.build: ownership, causes, filters and grouping of unavailable nodes (pure)."""

from __future__ import annotations

import json

import pytest

from gpuhc.slurm.read.nodes import Node, parse_state
from gpuhc.slurm.report.build import (
    Filters,
    ReportError,
    build_report,
    classify,
    compress,
    humanize_age,
    kind_of,
    parse_duration,
)

NOW = 1_718_107_200.0  # 2024-06-11 12:00 UTC


def mk(name: str, raw: str = "IDLE+DRAIN", reason: str | None = "x", user: str | None = "root",
       age_s: float | None = 3600.0, partitions: tuple[str, ...] = ("gpu",)) -> Node:
    state, flags = parse_state(raw)
    when = None if age_s is None else NOW - age_s
    return Node(name, state, flags, reason, user if reason else None, when if reason else None, partitions, raw)


@pytest.mark.parametrize(
    "reason, raw, cause, owner",
    [
        ("gpuhc: xid79 gpu3", "IDLE+DRAIN", "xid", "gpuhc"),
        ("gpuhc: nvswitch12028 nvswitch2 fatal", "IDLE+DRAIN", "nvswitch", "gpuhc"),
        ("gpuhc: xid Xid 79 on gpu3", "IDLE+DRAIN", "xid", "gpuhc"),  # written by an earlier release
        ("gpuhc check later", "IDLE+DRAIN", "admin", "admin"),  # an admin's note: no colon, not ours
        ("gpuhc: RETIRED pages pending", "IDLE+DRAIN", "retired", "gpuhc"),
        ("gpuhc:ecc: 3 DBE", "IDLE+DRAIN", "ecc", "gpuhc"),
        ("gpuhc: gpu-count 7 of 8 GPUs [q2]", "IDLE+DRAIN", "gpu-count", "gpuhc"),
        # the prefix is exact, as gpuhc.slurm.policy.reason decides what it may resume
        ("GPUHC check later", "IDLE+DRAIN", "admin", "admin"),
        ("gpuhc:", "IDLE+DRAIN", "gpuhc", "gpuhc"),
        ("Not responding", "DOWN*", "not responding", "slurm"),
        ("Prolog error", "IDLE+DRAIN", "prolog error", "slurm"),
        ("Epilog error", "IDLE+DRAIN", "epilog error", "slurm"),
        ("Kill task failed", "MIXED+DRAIN", "kill task failed", "slurm"),
        ("batch job complete failure", "IDLE+DRAIN", "batch job failure", "slurm"),
        ("Node unexpectedly rebooted", "DOWN", "unexpected reboot", "slurm"),
        ("gres/gpu count reported lower than configured (0 < 8)", "IDLE+DRAIN+INVALID_REG", "gres mismatch", "slurm"),
        ("Low RealMemory (reported:1 < 100.00% of configured:2)", "DOWN+DRAIN", "config mismatch", "slurm"),
        ("NHC: check_hw_ib: No IB port is ACTIVE", "IDLE+DRAIN", "nhc", "admin"),
        ("ECC memory error", "IDLE+DRAIN", "admin", "admin"),
        # the text decides, not the user: an admin reason set as user slurm stays admin
        ("not the gpuhc: prefix", "IDLE+DRAIN", "admin", "admin"),
        (None, "DOWN", "no reason", "slurm"),
        (None, "DOWN*", "not responding", "slurm"),
    ],
)
def test_classify(reason, raw, cause, owner):
    assert classify(mk("n", raw, reason, user="slurm")) == (cause, owner)


def test_kind_of_prefers_down_then_fail_then_draining():
    assert kind_of(mk("a", "DOWN+DRAIN")) == "down"
    assert kind_of(mk("a", "IDLE+FAIL")) == "fail"
    assert kind_of(mk("a", "MIXED+DRAIN")) == "draining"
    assert kind_of(mk("a", "IDLE+DRAIN")) == "drained"
    assert kind_of(mk("a", "DRAINED")) == "drained"


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d12h", 129600),
                                           ("1h30m", 5400), ("1.5h", 5400), (" 2 H ", 7200)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "1h-", "soon"])
def test_parse_duration_rejects(text):
    with pytest.raises(ReportError):
        parse_duration(text)


def test_humanize_age():
    assert [humanize_age(s) for s in (None, 5, 60 * 45, 3600 * 2 + 300, 86400 * 3 + 3600 * 4)] == [
        "-", "5s", "45m", "2h05m", "3d04h"]


def test_only_unavailable_nodes_are_listed_and_partitions_counted():
    nodes = [mk("n1", "IDLE", None), mk("n2"), mk("n3", "MIXED", None, partitions=("gpu", "debug")),
             mk("n4", "DOWN*", "Not responding", partitions=("debug",))]
    r = build_report(nodes, NOW)
    assert [e.node.name for e in r.entries] == ["n2", "n4"]
    assert r.total_nodes == 4
    assert r.partitions == {"debug": (1, 2), "gpu": (1, 3)}
    assert r.by_kind == {"down": 1, "drained": 1} and r.by_owner == {"slurm": 1, "admin": 1}


def test_grouping_by_cause_then_identical_reason():
    nodes = [mk(f"gpu{i:03d}", reason="gpuhc: xid79 gpu3", age_s=100.0 * i) for i in range(1, 6)]
    nodes += [mk("gpu010", reason="gpuhc: xid48 gpu0"), mk("gpu011", "MIXED+DRAIN", reason="gpuhc: xid79 gpu3")]
    nodes += [mk("gpu020", "DOWN*", "Not responding"), mk("gpu021", reason="cable", user="alice")]
    r = build_report(nodes, NOW)
    assert [(g.cause, g.count) for g in r.groups] == [("xid", 7), ("admin", 1), ("not responding", 1)]
    xid = r.groups[0]
    assert [(row.hostlist, row.kind, row.reason) for row in xid.rows] == [
        ("gpu[001-005]", "drained", "gpuhc: xid79 gpu3"),
        ("gpu010", "drained", "gpuhc: xid48 gpu0"),  # older than gpu011's, same count
        ("gpu011", "draining", "gpuhc: xid79 gpu3"),
    ]
    first = xid.rows[0]
    assert first.since == NOW - 500 and first.age_s == 500 and first.users == ["root"]


def test_filters():
    nodes = [mk("a1", age_s=60), mk("a2", "DOWN*", "Not responding", age_s=7200),
             mk("a3", "MIXED+DRAIN", "gpuhc: ecc x", age_s=3 * 86400, partitions=("debug",)),
             mk("a4", "IDLE+FAIL", "psu", age_s=None), mk("a5", "DOWN", None)]

    def names(**kw):
        return [e.node.name for e in build_report(nodes, NOW, Filters(**kw)).entries]

    assert names() == ["a1", "a2", "a3", "a4", "a5"]
    assert names(partitions=frozenset({"debug"})) == ["a3"]
    assert names(states=frozenset({"drain"})) == ["a1", "a3"]
    assert names(states=frozenset({"draining"})) == ["a3"]
    assert names(states=frozenset({"down", "fail"})) == ["a2", "a4", "a5"]
    assert names(states=frozenset({"not_responding"})) == ["a2"]
    assert names(owners=frozenset({"slurm"})) == ["a2", "a5"]
    assert names(owners=frozenset({"gpuhc", "admin"})) == ["a1", "a3", "a4"]
    # nodes without a reason time have no age: age filters leave them out
    assert names(older_than_s=3600) == ["a2", "a3"]
    assert names(newer_than_s=3600) == ["a1"]
    assert names(older_than_s=3600, newer_than_s=86400) == ["a2"]
    r = build_report(nodes, NOW, Filters(partitions=frozenset({"debug"})))
    assert r.partitions == {"debug": (1, 1)}


def test_unknown_filter_values_are_rejected():
    with pytest.raises(ReportError, match="unknown --state idle"):
        Filters(states=frozenset({"idle"}))
    with pytest.raises(ReportError, match="unknown --owner root"):
        Filters(owners=frozenset({"root"}))


def test_report_dict_is_json_and_complete():
    r = build_report([mk("n1", reason="défaut ✗"), mk("n2", "IDLE")], NOW)
    doc = json.loads(json.dumps(r.to_dict(), ensure_ascii=False))
    assert doc["unavailable"] == 1 and doc["total_nodes"] == 2
    assert doc["nodes"][0] == {"node": "n1", "kind": "drained", "state": "IDLE+DRAIN", "flags": ["DRAIN"],
                               "cause": "admin", "owner": "admin", "reason": "défaut ✗", "user": "root",
                               "since": NOW - 3600, "age_s": 3600.0, "partitions": ["gpu"], "reason_doubt": None,
                               "incident": None, "step": None}
    assert doc["groups"][0]["rows"][0]["nodes"] == "n1"


def test_compress():
    assert compress([]) == ""
    assert compress(["gpu001"]) == "gpu001"
    assert compress(["gpu003", "gpu001", "gpu002", "gpu009"]) == "gpu[001-003,009]"
    # zero padding makes different nodes: both stay
    assert set(compress(["n1", "n01"]).strip("n[]").split(",")) == {"1", "01"}
    assert compress(["a.example.com", "b.example.com"]) == "a.example.com,b.example.com"
