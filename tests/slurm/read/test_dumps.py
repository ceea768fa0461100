"""`drain-report --from-file` on what admins really paste: sinfo's tables, mixes of commands with
their prompts, and the sinfo/sacct output habits (-o, --parsable, --noheader). Samples: real captures
from this repo's Slurm 22.05 test cluster and public pastes, see fixtures/slurm/sinfo/README.md."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from gpuhc.cli import cli
from gpuhc.slurm.read.dumps import read_dump
from gpuhc.slurm.read.nodes import NodeParseError
from gpuhc.slurm.report.build import build_report, classify
from tests.helpers.paths import FIXTURES

FIX = FIXTURES / "slurm" / "sinfo"
NOW = "2026-11-26T07:00:00"
FULL = {  # the reasons as `scontrol show node` gave them on that cluster
    "gpu01": "gpuhc: xid gpu3 Xid 79 (fallen off the bus) [q1]",
    "gpu02": "bad DIMM, ticket 4711 — müssen tauschen",
    "gpu03": "bad DIMM, ticket 4711 — müssen tauschen",
    "gpu04": "Rack 7 PDU maintenance until Friday, see the ops calendar for the exact window",
    "gpu06": "NHC: check_fs_mount:  /scratch not mounted",
}
OWNERS = {"gpu01": "gpuhc", "gpu02": "admin", "gpu03": "admin", "gpu04": "admin", "gpu06": "admin"}


def dump(name: str):
    return read_dump((FIX / name).read_bytes())


def out_nodes(d) -> dict[str, tuple]:
    return {n.name: (n.state, n.reason, classify(n)[1]) for n in d.nodes if n.unavailable}


def run(*args: str):
    return CliRunner().invoke(cli, ["drain-report", *args], catch_exceptions=False)


@pytest.mark.parametrize("name", ["2205_show_node.txt", "2205_show_node_o.txt", "2205_sinfo_json.json"])
def test_whole_reasons_from_scontrol_and_json_keep_their_exact_utf8_text(name):
    d = dump(name)
    assert {n: r for n, (_, r, _) in out_nodes(d).items()} == FULL
    assert {n: o for n, (_, _, o) in out_nodes(d).items()} == OWNERS
    assert d.warnings == []


def test_default_sinfo_gives_states_and_no_owner():
    d = dump("2205_sinfo.txt")
    got = out_nodes(d)
    assert {n: s for n, (s, _, _) in got.items()} == {"gpu01": "DRAINED", "gpu02": "DRAINED", "gpu03": "DRAINED",
                                                       "gpu04": "DOWN", "gpu06": "DRAINED"}
    assert {o for _, _, o in got.values()} == {"unknown"}  # no reason shown: no owner claimed
    assert next(n for n in d.nodes if n.name == "gpu06").partitions == ("gpu", "debug")  # `gpu*`: the default


@pytest.mark.parametrize("name, kind", [("2205_sinfo_R.txt", "UNAVAILABLE"), ("2205_sinfo_R_l.txt", None),
                                        ("2205_sinfo_N_l.txt", None)])
def test_sinfo_tables_with_reasons_cut_at_20_characters(name, kind):
    d = dump(name)
    got = out_nodes(d)
    assert sorted(got) == sorted(FULL)
    for node, (state, reason, owner) in got.items():
        assert reason == FULL[node][:20].rstrip() and owner == OWNERS[node]
        if kind:
            assert state == kind  # sinfo -R alone does not say how a node is out
    assert got["gpu04"][0] in ("DOWN", "UNAVAILABLE")
    assert any("cuts reasons at 20 characters" in w for w in d.warnings)


def test_sinfo_format_with_a_wide_reason_column_even_where_it_runs_into_the_next():
    d = dump("2205_sinfo_O.txt")
    got = out_nodes(d)
    assert {n: r for n, (_, r, _) in got.items()} == {**FULL, "gpu04": FULL["gpu04"][:60]}
    gpu04 = next(n for n in d.nodes if n.name == "gpu04")
    assert gpu04.reason_time == time.mktime(time.strptime("2026-11-26T06:11:11", "%Y-%m-%dT%H:%M:%S"))
    assert any("cuts reasons at 60 characters" in w for w in d.warnings)


def test_sinfo_format_by_host_name_says_host_names_may_differ():
    d = dump("2205_sinfo_O_hostnames.txt")
    assert [n.name for n in d.nodes] == ["localhost"]  # every node of that test cluster runs on localhost
    assert any("HOSTNAMES" in w and "may differ" in w for w in d.warnings)


def test_a_mix_with_prompts_reads_every_block_and_names_what_it_skipped():
    d = dump("2205_mixed_with_prompts.txt")
    got = out_nodes(d)
    assert sorted(got) == sorted(FULL)
    assert got["gpu04"] == ("DOWN", FULL["gpu04"], "admin")  # scontrol's whole reason beats sinfo -R's cut one
    assert got["gpu02"] == ("DRAINED", FULL["gpu02"][:20], "admin")  # the state from sinfo, the reason from -R
    assert d.formats == ["sinfo", "sinfo -R", "scontrol show node"]
    assert d.warnings[-1].startswith("lines 35-36: skipped, not a node listing gpuhc reads: 'JOBID PARTITION")


def test_public_sinfo_R_paste_with_its_prompt_expands_hostlists():
    d = dump("baobab_sinfo_R.txt")
    got = out_nodes(d)
    assert len(got) == 3 + 1 + 1 + 6 + 1 + 1 + 26 + 10  # gpu[013-017,021-026,034-044,046-049] is 26
    assert got["gpu045"] == ("UNAVAILABLE", "gres/gpu GRES core s", "slurm")
    assert got["cpu319"] == ("UNAVAILABLE", "issue-6543", "admin")


def test_squeue_blocks_between_sinfo_snapshots_are_skipped_and_the_latest_wins():
    d = dump("stackhpc_squeue_sinfo_R_timeline.txt")
    got = out_nodes(d)
    assert got["dev-compute-0"][1] == "update" and got["dev-extra-1"][1] == "update : reboot issu"
    assert [w.split(":")[0] for w in d.warnings[:2]] == ["lines 1-4", "lines 8-11"]


def test_a_node_listing_inside_other_output_is_found():
    d = dump("psnode_sinfo_N_l_ps.txt")
    assert [(n.name, n.state, n.partitions) for n in d.nodes] == [("a058", "MIXED", ("xeon8",))]
    assert len(d.warnings) == 2  # the psnode banner and the ps table


def test_nothing_recognised_fails_with_the_first_skipped_block():
    with pytest.raises(NodeParseError, match="no Slurm node listing found.*lines 1-2: skipped.*'hello'"):
        read_dump(b"hello\nworld\n")
    with pytest.raises(NodeParseError, match="the input is empty"):
        read_dump(b"")


def test_sinfo_json_record_with_several_nodes_names_no_owner_for_them():
    nodes = read_dump((FIX.parent / "sinfo_json_2311.json").read_bytes()).nodes
    d1 = next(n for n in nodes if n.name == "d1")
    d2 = next(n for n in nodes if n.name == "d2")
    assert "may be only one node's" in d1.reason_doubt and classify(d1) == ("shared reason", "unknown")
    assert not d2.reason_doubt and classify(d2)[1] == "gpuhc"  # d2 has a record of its own
    rep = build_report(nodes, 0.0)
    assert any(r.doubt for g in rep.groups for r in g.rows)


def test_json_output_lists_formats_and_warnings():
    r = run("--from-file", str(FIX / "2205_mixed_with_prompts.txt"), "--json", "--now", NOW)
    doc = json.loads(r.stdout)
    assert doc["formats"] == ["sinfo", "sinfo -R", "scontrol show node"]
    assert len(doc["warnings"]) == 2 and doc["unavailable"] == 5
    assert r.stderr.count("gpuhc drain-report: warning: ") == 2


# ---------------------------------------------------------------------------- sinfo/sacct habits


def test_format_fields_and_noheader():
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "-o", "node,owner,Reason", "--now", NOW)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NODE", "OWNER", "REASON"]
    assert lines[1] == "gpu01  gpuhc  " + FULL["gpu01"]
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "-o", "node,owner", "--noheader", "--now", NOW)
    assert r.stdout.splitlines()[0].split() == ["gpu01", "gpuhc"]


def test_parsable_is_delimited_with_exact_reasons():
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "--parsable", "-o", "node,kind,reason", "--now", NOW)
    lines = r.stdout.splitlines()
    assert lines[0] == "NODE|KIND|REASON"
    assert lines[2] == f"gpu02|drained|{FULL['gpu02']}"
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "--parsable", "--delimiter", ";", "--noheader", "--now", NOW)
    assert r.stdout.splitlines()[0].startswith("gpu01;drained;gpuhc;xid;")


def test_noheader_plain_table_is_rows_only_and_csv_drops_its_header():
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "--noheader", "--now", NOW)
    assert all("gpuhc drain-report" not in line and not line.startswith("CAUSE") for line in r.stdout.splitlines())
    assert len(r.stdout.splitlines()) == 4  # xid, admin x2 (two reasons), nhc
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "--csv", "--noheader", "--now", NOW)
    assert r.stdout.splitlines()[0].startswith("gpu01,drained,IDLE+DRAIN,DRAIN,xid,gpuhc,")


def test_unknown_field_and_h_is_help_as_in_every_gpuhc_command():
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "-o", "node,colour")
    assert r.exit_code == 2 and "unknown field colour" in r.output
    for flag in ("-h", "--help"):  # issue 21: -h was sinfo's no-header, unlike every other gpuhc command
        h = run(flag)
        assert h.exit_code == 0 and "Usage:" in h.output and "--noheader" in h.output


def test_unknown_partition_warns():
    r = run("--from-file", str(FIX / "2205_show_node_o.txt"), "--partition", "nosuch", "--now", NOW)
    assert r.exit_code == 0
    assert r.stderr == "gpuhc drain-report: warning: no node is in partition nosuch (partitions here: debug, gpu)\n"


def test_a_reason_time_past_any_calendar_does_not_crash():
    doc = {"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "x", "reason_changed_at": 1e30}]}
    r = CliRunner().invoke(cli, ["drain-report", "--from-file", "-", "--now", NOW], input=json.dumps(doc))
    assert r.exit_code == 0 and "n1" in r.stdout
    r = CliRunner().invoke(cli, ["drain-report", "--from-file", "-", "--csv"], input=json.dumps(doc))
    assert r.exit_code == 0 and r.stdout.splitlines()[1].split(",")[8] == ""


def test_a_symlinked_or_fifo_dump_is_refused(tmp_path):
    import os

    from gpuhc.errors import GpuhcError

    link = tmp_path / "dump.txt"
    link.symlink_to("/dev/zero")
    r = CliRunner().invoke(cli, ["drain-report", "--from-file", str(link)])
    assert isinstance(r.exception, GpuhcError) and "is a symbolic link" in str(r.exception)
    assert "--from-file -" in str(r.exception)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = CliRunner().invoke(cli, ["drain-report", "--from-file", str(fifo)])
    assert isinstance(r.exception, GpuhcError) and "not a regular file (a FIFO)" in str(r.exception)


def test_every_output_says_when_a_reason_may_not_be_the_nodes_own():
    path = str(FIX.parent / "slurm-26.05" / "sinfo_json.json")
    row = next(line for line in run("--from-file", path).stdout.splitlines() if line.startswith("shared reason"))
    assert row.split()[:5] == ["shared", "reason", "unknown", "4", "drained"] and "n[2-4,7]" in row
    assert row.endswith("(note: one reason for the 4 nodes of one sinfo --json record, it may be only one node's; "
                        "`scontrol show node` has each node's own)")
    doc = json.loads(run("--from-file", path, "--json").stdout)
    (group,) = [g for g in doc["groups"] if g["cause"] == "shared reason"]
    assert group["owner"] == "unknown" and "may be only one node's" in group["rows"][0]["reason_doubt"]
    lines = run("--from-file", path, "--parsable", "--noheader", "-o", "node,owner,doubt").stdout.splitlines()
    assert lines[0].startswith("n2|unknown|one reason for the 4 nodes")


def test_sinfo_format_with_reasons_but_no_state_lists_the_nodes_that_are_out():
    got = out_nodes(dump("2205_sinfo_O_no_state.txt"))
    assert {n: r for n, (_, r, _) in got.items()} == FULL  # a 90-wide column: whole reasons, gpu05's `none` is in service
    assert {s for s, _, _ in got.values()} == {"UNAVAILABLE"}  # out, but how is not in this table


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_json_between_prompts_and_a_windows_paste_are_read(newline):
    """A ticket pasted from a Windows mail client: CRLF line ends, JSON between two commands."""
    mix = ("$ sinfo --json\n" + (FIX.parent / "slurm-26.05" / "sinfo_json.json").read_text() + "\n$ sinfo -R\n"
           + (FIX / "2205_sinfo_R.txt").read_text()).replace("\n", newline)
    d = read_dump(mix.encode())
    assert d.formats == ["json", "sinfo -R"]
    assert sorted(out_nodes(d)) == ["gpu01", "gpu02", "gpu03", "gpu04", "gpu06", "n2", "n3", "n4", "n5", "n6", "n7", "n8"]
    assert out_nodes(d)["gpu02"][1] == "bad DIMM, ticket 471"  # no stray \r kept in a reason
