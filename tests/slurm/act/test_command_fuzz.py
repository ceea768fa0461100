"""Every parser of Slurm's output, fed random bytes (issue 18, "Slurm output is other people's
bytes"): reasons, comments, job names and node lists are typed by others, so any byte may come.
Each parser either reads what it can or refuses with gpuhc's own error (a GpuhcError naming
what and where); never another exception, which would end a health check in exit 3 and no
drain. The bytes are decoded the one way gpuhc decodes Slurm's answers
(:func:`gpuhc.slurm.act.command.decode`), and mixed with the tokens the parsers look for, so the
fuzzer reaches past their first check.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhc.errors import GpuhcError
from gpuhc.slurm.act.command import decode

# Tokens of every format read here: scontrol's keys and stamps, sinfo's fields and record end,
# JSON's brackets, sacct/sacctmgr's separators and times, hostlists, line breaks of all kinds.
TOKENS = [
    "NodeName=", "NodeName=n1 ", " State=", "IDLE+DRAIN", "down*", "idle~", " Partitions=gpu", " Reason=",
    " [root@2026-11-26T12:52:21]", " Comment=", " Extra=", "   ", "|", "||", "|gpuhc-eor", "|gpuhc-eor\n", "\n",
    "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\x1b]0;x\x07", "\x1b[31m", "\xfc", "\ufffd", "\x00",
    "n[1-3]", "n[1-", "n[1-99999999]", "gpu[001-004,009]", "(null)", "none", "Unknown", "2026-11-26T12:52:21",
    "{", "}", "[", "]", '"nodes":', '"sinfo":', '"name":"n1"', '"state":["IDLE","DRAIN"]', '"reason":', ",", ":",
    "1e999", "-1", "NaN", "PARTITION", "NODELIST", "STATE", "REASON", "USER", "TIMESTAMP", "HOSTNAMES",
    "gpuhc: xid79", "gpuhc-ledger", "gpuhc-ledger v1 ", "p=gpu:", "held=1,total=4,cap=2,t=1,id=ab",
    "claims ", "@", "+", "=", "COMPLETED", "FAILED", "NODE_FAIL", "SwitchName=s1 Nodes=", "\\\n", "#",
]
_bytes = st.binary(max_size=200)
_token = st.sampled_from(TOKENS).map(lambda t: t.encode("utf-8", "surrogatepass"))
raw = st.lists(_bytes | _token, max_size=40).map(b"".join)
text = raw.map(decode)

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def refuses_or_reads(fn, *args):
    """Run one parser: gpuhc's own refusal is an answer; any other exception is the bug."""
    try:
        return fn(*args)
    except GpuhcError as e:
        assert str(e), "a refusal must say what and where"
        return None


def test_decode_never_fails_and_marks_bad_bytes():
    assert decode(b"Pr\xfcfung") == "Pr\ufffdfung" and decode(None) == "" and decode("as is") == "as is"


# ---------------------------------------------------------------------------- the node readers


@FUZZ
@given(text)
def test_scontrol_text_parsers(data):
    from gpuhc.slurm.read.nodes import node_fields, node_from_record, parse_record, parse_show_node, \
        parse_show_node_oneline, split_reason

    said: list[str] = []
    for fn in (parse_show_node_oneline, parse_show_node):
        nodes = refuses_or_reads(fn, data, said.append)
        assert nodes is None or all(n.name for n in nodes)
        refuses_or_reads(fn, data)  # the strict form: read all or refuse
    refuses_or_reads(parse_record, data)
    refuses_or_reads(node_from_record, node_fields(data))
    split_reason(data)


@FUZZ
@given(text)
def test_sinfo_parsers(data):
    from gpuhc.slurm.read.sinfo import parse, parse_ledger

    said: list[str] = []
    nodes = parse(data, said.append)  # with a warn it never refuses: it skips
    assert all(n.name for n in nodes) and all(line.isprintable() for line in said)
    refuses_or_reads(parse, data)
    parse_ledger(data, "gpuhc-ledger")


@FUZZ
@given(raw)
def test_json_node_parsers(data):
    from gpuhc.slurm.read.nodes_json import parse_nodes_json

    refuses_or_reads(parse_nodes_json, data)
    refuses_or_reads(parse_nodes_json, decode(data))


scalars = st.none() | st.booleans() | st.integers() | st.floats() | text.map(lambda s: s[:20])
documents = st.recursive(scalars, lambda ch: st.lists(ch, max_size=4)
                         | st.dictionaries(st.sampled_from(["nodes", "sinfo", "name", "state", "state_flags", "reason",
                                                            "reason_changed_at", "reason_set_by_user", "partitions",
                                                            "errors", "nodes", "number", "set", "description"]) | text,
                                           ch, max_size=5), max_leaves=25)


@FUZZ
@given(documents)
def test_json_node_documents_of_any_shape(doc):
    from gpuhc.slurm.read.nodes_json import nodes_from_document, parse_nodes_json

    refuses_or_reads(nodes_from_document, doc)
    refuses_or_reads(parse_nodes_json, json.dumps(doc))


@FUZZ
@given(raw)
def test_dump_reader_and_sinfo_tables(data):
    from gpuhc.slurm.read.dumps import parse_nodes, read_dump
    from gpuhc.slurm.read.sinfo_text import header_of, read_table

    refuses_or_reads(read_dump, data)
    refuses_or_reads(parse_nodes, data)
    lines = decode(data).split("\n")
    for i, line in enumerate(lines):
        header = header_of(line)
        if header is not None:
            read_table(lines, i, header)


# ---------------------------------------------------------------------------- the ledger (read only)


@FUZZ
@given(text, text)
def test_ledger_record_parsers(comment, extra):
    from gpuhc.slurm.policy import ledger

    entries = ledger.parse(comment)
    ledger.with_claims(entries, extra)
    ledger.parse_claims(extra)
    ledger.foreign(comment)


# ---------------------------------------------------------------------------- fleet and sweep


@FUZZ
@given(text)
def test_fleet_accounting_parsers(data):
    from gpuhc.fleet.history import parse_sacctmgr_events
    from gpuhc.fleet.suspects import parse_sacct
    from gpuhc.fleet.switches import parse_topology_conf

    refuses_or_reads(parse_sacctmgr_events, data)
    refuses_or_reads(parse_sacct, data)
    refuses_or_reads(parse_topology_conf, data)


@FUZZ
@given(data=raw)
def test_fleet_node_list_read(data):
    from gpuhc.fleet import gather
    from gpuhc.slurm.act.command import SlurmCommand

    notes: list[str] = []
    refuses_or_reads(gather._partitions, SlurmCommand(run=lambda argv, t: (0, decode(data), "")), notes)


@FUZZ
@given(raw)
def test_sweep_slurm_readers(data):
    from gpuhc.sweep.slurmcli import SlurmCli, in_service

    cli = SlurmCli(run=lambda argv, t: (0, decode(data), ""), run_stdin=lambda argv, t, s: (0, decode(data), ""))
    refuses_or_reads(cli.node_states, ["gpu"])
    refuses_or_reads(cli.active_jobs, "gpuhc-sweep", ["12"])
    refuses_or_reads(cli.topology)
    refuses_or_reads(cli.sbatch, ["sbatch", "--parsable"], "#!/bin/sh\n")
    for state in decode(data).split("|")[:5]:
        in_service(state)


def test_sweep_node_states_skip_an_unreadable_line_with_one_warning():
    from gpuhc.sweep.slurmcli import SlurmCli

    said: list[str] = []
    answer = "n1|idle|gpu*\nn2|idle\x1b]0;x\x07\nn3|drained|gpu\n"
    cli = SlurmCli(run=lambda argv, t: (0, answer, ""), warn=said.append)
    for _ in range(2):
        states, part_of = cli.node_states(["gpu"])
        assert states == {"n1": "idle", "n3": "drained"} and part_of == {"n1": "gpu", "n3": "gpu"}
    assert len(said) == 1 and "n2" in said[0] and said[0].isprintable()


def test_fleet_node_list_counts_what_it_skipped():
    from gpuhc.fleet import gather
    from gpuhc.slurm.act.command import SlurmCommand

    cmd = SlurmCommand(run=lambda argv, t: (0, "n1|gpu\nodd line\n\nn2|gpu\n", ""))
    notes: list[str] = []
    assert gather._partitions(cmd, notes) == {"n1": ("gpu",), "n2": ("gpu",)}
    assert notes == ["1 sinfo line(s) of the node list did not read and were skipped"]
