"""The scontrol wrapper: exact argv, timeouts inside the deadline, errors as SlurmError."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest

from gpuhc.model.deadline import Deadline
from gpuhc.errors import SlurmError
from gpuhc.slurm.act.scontrol import Scontrol, subprocess_runner

LINE = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 State=IDLE+DRAIN "
        "Partitions=gpu Reason=gpuhc: xid79 gpu3 [root@2024-06-11T10:23:45]\n"
        "NodeName=n2 Arch=x86_64 CPUTot=2 State=MIXED Partitions=gpu,debug\n")


class Recorder:
    def __init__(self, answers=None):
        self.answers = list(answers or [])
        self.seen: list[tuple[list[str], float]] = []

    def __call__(self, argv, timeout):
        self.seen.append((argv, timeout))
        a = self.answers.pop(0) if self.answers else (0, "", "")
        if isinstance(a, BaseException):
            raise a
        return a


def test_show_node_reads_one_node():
    rec = Recorder([(0, LINE.splitlines()[0] + "\n", "")])
    node = Scontrol(run=rec).show_node("n1")
    assert rec.seen[0][0] == ["scontrol", "show", "node", "-o", "n1"]
    assert node.name == "n1" and node.drained and node.reason == "gpuhc: xid79 gpu3"
    assert node.reason_user == "root"


def test_show_nodes_reads_all():
    rec = Recorder([(0, LINE, "")])
    nodes = Scontrol(binary="/usr/bin/scontrol", run=rec).show_nodes()
    assert rec.seen[0][0] == ["/usr/bin/scontrol", "show", "node", "-o"]
    assert [x.name for x in nodes] == ["n1", "n2"] and nodes[1].partitions == ("gpu", "debug")


def test_drain_resume_reboot_argv():
    rec = Recorder()
    sc = Scontrol(run=rec)
    sc.drain("gpu-01", "gpuhc: xid79 gpu3 GPU has fallen off the bus")
    sc.resume("gpu-01")
    sc.reboot("gpu[01-03]", "gpuhc: xid79 gpu3 [q1]")
    sc.reboot("gpu-01", "gpuhc: x [q1]", nextstate="RESUME", asap=False)
    assert [a for a, _ in rec.seen] == [
        ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN",
         "Reason=gpuhc: xid79 gpu3 GPU has fallen off the bus"],
        ["scontrol", "update", "NodeName=gpu-01", "State=RESUME"],
        ["scontrol", "reboot", "ASAP", "nextstate=DOWN", "reason=gpuhc: xid79 gpu3 [q1]", "gpu[01-03]"],
        ["scontrol", "reboot", "nextstate=RESUME", "reason=gpuhc: x [q1]", "gpu-01"],
    ]
    assert sc.calls == [a for a, _ in rec.seen]


@pytest.mark.parametrize("name", ["", "n1 n2", "n[1-2]", "-n1", "n1;reboot", "NodeName=x", "a" * 200])
def test_bad_node_names_are_refused_before_running_anything(name):
    rec = Recorder()
    with pytest.raises(SlurmError, match="refusing node name"):
        Scontrol(run=rec).drain(name, "gpuhc: x")
    assert rec.seen == []


@pytest.mark.parametrize("reason", ["", "gpuhc: a\nb", "gpuhc: \x1b[31m", "gpuhc: " + "x" * 300])
def test_bad_reasons_are_refused(reason):
    rec = Recorder()
    with pytest.raises(SlurmError, match="refusing reason"):
        Scontrol(run=rec).drain("n1", reason)
    assert rec.seen == []


def test_reboot_refuses_all_and_odd_lists():
    for nodes in ("ALL", "all", "n1 n2", "n1;x"):
        with pytest.raises(SlurmError):
            Scontrol(run=Recorder()).reboot(nodes, "gpuhc: x")


def test_nonzero_exit_names_the_command_and_message():
    rec = Recorder([(1, "", "scontrol: error: Invalid node state transition requested\n")])
    with pytest.raises(SlurmError) as e:
        Scontrol(run=rec).resume("n1")
    assert str(e.value) == ("scontrol update NodeName=n1 State=RESUME failed (exit 1): "
                            "scontrol: error: Invalid node state transition requested")


def test_reason_text_is_not_repeated_in_errors():
    rec = Recorder([(1, "", "boom")])
    with pytest.raises(SlurmError) as e:
        Scontrol(run=rec).drain("n1", "gpuhc: secret evidence")
    assert "secret" not in str(e.value) and "reason=..." in str(e.value)


def test_timeout_becomes_a_clear_error():
    rec = Recorder([subprocess.TimeoutExpired(["scontrol"], 2.0)])
    with pytest.raises(SlurmError, match=r"scontrol show node -o n1: no answer within 2.0s"):
        Scontrol(run=rec, timeout_s=2.0).show_node("n1")


def test_missing_binary_is_a_clear_error():
    with pytest.raises(SlurmError, match="scontrol not found"):
        Scontrol(binary="/nonexistent/scontrol").show_nodes()


def test_timeout_is_cut_to_the_remaining_deadline():
    rec = Recorder([(0, LINE, "")])
    sc = Scontrol(run=rec, timeout_s=10.0, deadline=Deadline.after(3.0))
    sc.show_nodes()
    assert rec.seen[0][1] <= 2.5  # 3 s left minus the margin kept for logging


def test_the_slowest_answer_of_the_run_is_kept(tmp_path):
    """A real program that answers late, then one that never answers within its bound: the
    actuator's time to verify a drain grows with the slowest (gpuhc/slurm/act/actuator.py)."""
    slow = tmp_path / "scontrol"
    slow.write_text(f"#!/bin/sh\nsleep 0.4\nprintf '%s' '{LINE}'\n")
    slow.chmod(0o755)
    sc = Scontrol(paths={"scontrol": str(slow)}, timeout_s=5.0)
    assert sc.slowest_s == 0.0
    sc.show_nodes()
    assert 0.4 <= sc.slowest_s
    hung = tmp_path / "hung"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    sc.paths["scontrol"], sc.timeout_s = str(hung), 1.0
    with pytest.raises(SlurmError, match="no answer within"):
        sc.show_nodes()
    assert 1.0 <= sc.slowest_s < 30


def test_no_call_is_made_past_the_deadline():
    rec = Recorder()
    sc = Scontrol(run=rec, deadline=Deadline.after(-1))
    with pytest.raises(SlurmError, match="not sent, no time left"):
        sc.drain("n1", "gpuhc: x")
    assert rec.seen == [] and sc.calls == []


def test_garbage_answer_is_a_slurm_error():
    rec = Recorder([(0, "something else entirely\n", "")])
    with pytest.raises(SlurmError, match="unreadable answer"):
        Scontrol(run=rec).show_nodes()


def test_answer_without_the_node_is_an_error():
    rec = Recorder([(0, LINE.splitlines()[1] + "\n", "")])
    with pytest.raises(SlurmError, match="no record for n1"):
        Scontrol(run=rec).show_node("n1")


def test_subprocess_runner_really_times_out(tmp_path):
    # A stand-in executable (not Slurm: this tests the subprocess plumbing) that never answers.
    exe = tmp_path / "hang"
    exe.write_text("#!/bin/sh\nexec sleep 30\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(SlurmError, match="no answer within"):
        Scontrol(binary=str(exe), timeout_s=0.3).show_nodes()


def test_subprocess_runner_returns_code_and_streams(tmp_path):
    exe = tmp_path / "talk"
    exe.write_text('#!/bin/sh\necho "out $1"\necho err >&2\nexit 3\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert subprocess_runner([str(exe), "a b"], 5.0) == (3, "out a b\n", "err\n")
    assert os.path.exists(exe)


def test_slurm_answers_are_decoded_with_replacement(tmp_path):
    # What real 22.05 printed for an admin's Latin-1 reason (tests/fixtures/slurm/odd_reasons):
    # byte 0xfc, not UTF-8. Stdout, stderr and the stdin runner's answer read with U+FFFD, never
    # a UnicodeDecodeError (issue 18: exit 3 and no drain).
    from gpuhc.slurm.act.command import stdin_runner

    exe = tmp_path / "latin1"
    exe.write_bytes(b"#!/bin/sh\ncat >/dev/null\nprintf 'n3|gpu*|idle+drain|Pr\\374fung\\n'\n"
                    b"printf 'f\\374r\\n' >&2\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert subprocess_runner([str(exe)], 5.0) == (0, "n3|gpu*|idle+drain|Pr\ufffdfung\n", "f\ufffdr\n")
    assert stdin_runner([str(exe)], 5.0, "script \xfc")[1] == "n3|gpu*|idle+drain|Pr\ufffdfung\n"


# ------------------------------------------------------------------ sinfo reads

from gpuhc.slurm.read.nodes import NodeParseError  # noqa: E402
from gpuhc.slurm.read.sinfo import END, FIELDS, parse  # noqa: E402
from tests.helpers.paths import FIXTURES

# As Slurm 22.05's sinfo printed them for FIELDS (tests/slurm_real/test_sinfo.py reads the same
# against a live slurmctld): the default partition starred, "none"/"Unknown" when unset, and a
# grouped line whose node list is a hostlist; each record ends with END.
SINFO = (f"n1|p1*|idle+drain|2026-11-26T06:14:10|root|gpuhc: xid | odd reason{END}\n"
         f"n1|extra|idle+drain|2026-11-26T06:14:10|root|gpuhc: xid | odd reason{END}\n"
         f"s[00001-00002,00004]|p1*|unknown|Unknown|Unknown|none{END}\n")


def test_node_asks_sinfo_for_that_node_alone():
    rec = Recorder([(0, SINFO.split("s[")[0], "")])
    node = Scontrol(run=rec, sinfo="/usr/bin/sinfo").node("n1")
    assert rec.seen[0][0] == ["/usr/bin/sinfo", "-h", "-a", "-N", "-n", "n1", "-O", FIELDS]
    assert node.name == "n1" and node.drained and node.state == "IDLE" and node.raw_state == "IDLE+DRAIN"
    assert node.reason == "gpuhc: xid | odd reason" and node.reason_user == "root"
    assert node.partitions == ("p1", "extra") and node.reason_time is not None


def test_node_in_no_partition_falls_back_to_scontrol():
    rec = Recorder([(0, "", ""), (0, LINE.splitlines()[0] + "\n", "")])
    node = Scontrol(run=rec).node("n1")
    assert [a[0] for a, _ in rec.seen] == ["sinfo", "scontrol"] and node.reason == "gpuhc: xid79 gpu3"


def test_scope_asks_for_the_partitions_and_expands_groups():
    rec = Recorder([(0, SINFO, "")])
    nodes = Scontrol(run=rec).scope(["p1", "extra"])
    assert rec.seen[0][0] == ["sinfo", "-h", "-O", FIELDS, "-p", "p1,extra"]
    assert sorted(n.name for n in nodes) == ["n1", "s00001", "s00002", "s00004"]
    s1 = next(n for n in nodes if n.name == "s00001")
    assert s1.state == "UNKNOWN" and s1.reason is None and s1.reason_time is None and not s1.drained
    assert Scontrol(run=Recorder([(0, "", "")])).scope(None) == []


@pytest.mark.parametrize("part", ["p1,p2", "-x", "a b", ""])
def test_odd_partition_names_are_refused(part):
    rec = Recorder()
    with pytest.raises(SlurmError, match="refusing partition name"):
        Scontrol(run=rec).scope([part])
    assert rec.seen == []


GOOD = f"ok1|p1|idle+drain|2026-11-26T06:14:10|root|gpuhc: xid 79{END}\n"


@pytest.mark.parametrize("bad, says", [
    (f"n1|p1|idle{END}\n", "3 fields"),
    (f"n[1-|p1|idle|Unknown|Unknown|none{END}\n", "node list n[1-"),
    (f"n1|p1\nX|idle|Unknown|Unknown|none{END}\n", "line break before the reason"),
])
def test_unreadable_sinfo_record_is_skipped_with_one_warning(bad, says):
    said: list[str] = []
    sc = Scontrol(run=Recorder([(0, bad + GOOD, ""), (0, GOOD + bad, "")]), warn=said.append)
    for _ in range(2):  # wherever the bad record is, the good one reads; the warning is said once
        assert [(n.name, n.reason) for n in sc.scope(None)] == [("ok1", "gpuhc: xid 79")]
    assert len(said) == 1 and says in said[0] and "skipped unreadable sinfo record" in said[0]


def test_sinfo_answer_cut_short_loses_only_its_last_record():
    said: list[str] = []
    nodes = parse(GOOD + "n2|p1|idle|Unknown|Unknown|no", said.append)
    assert [n.name for n in nodes] == ["ok1"] and "no end of record" in said[0]
    with pytest.raises(NodeParseError, match="sinfo record 'n2.*no end of record"):
        parse(GOOD + "n2|p1|idle|Unknown|Unknown|no")  # without a warn: the strict reader


def test_sinfo_reason_keeps_newlines_and_control_bytes():
    # What 22.05, 24.11 and 26.05 print for such reasons (tests/fixtures/slurm/odd_reasons)
    text = (f"n2|gpu*|idle+drain|2026-11-26T12:52:21|root|line one\nNodeName=fake State=IDLE second{END}\n"
            f"n4|gpu*|idle+drain|2026-11-26T12:52:21|root|esc \x1b]0;t\x07 cr\rend{END}\n")
    n2, n4 = parse(text)
    assert n2.reason == "line one\nNodeName=fake State=IDLE second" and n4.reason == "esc \x1b]0;t\x07 cr\rend"
    assert n2.drained and n4.drained and n2.reason_user == "root"


def test_parse_keeps_flags_and_suffixes():
    (n,) = parse(f"g1|gpu|mixed+drain+reboot_requested|2026-11-26T06:14:10|slurm|Reboot ASAP{END}\n")
    assert n.drained and "REBOOT_REQUESTED" in n.flags and n.state == "MIXED"
    (d,) = parse(f"g2|gpu|down*|2026-11-26T06:14:10|slurm|Not responding{END}\n")
    assert d.down and d.not_responding


# ------------------------------------------------------------------ odd reasons, as real releases print them

ODD = FIXTURES / "slurm" / "odd_reasons"
ODD_REASONS = {
    "n2": "line one\nNodeName=fake State=IDLE second line",
    "n3": "Pr\ufffdfung f\ufffdr Admin",  # Latin-1 0xfc, decoded with replacement
    "n4": "esc \x1b[31mred\x1b[0m osc \x1b]0;owned\x07 bel\x07 cr\rend",
    "n5": "big " + "A" * 4096,
}


@pytest.mark.parametrize("release", sorted(p.name for p in ODD.glob("slurm-*")))
def test_real_sinfo_answers_with_odd_reasons_read_whole(release):
    from gpuhc.slurm.act.command import decode

    said: list[str] = []
    nodes = {n.name: n for n in parse(decode((ODD / release / "sinfo_fields.txt").read_bytes()), said.append)}
    assert said == [] and sorted(nodes) == ["n1", "n2", "n3", "n4", "n5"]
    assert {n: nodes[n].reason for n in ODD_REASONS} == ODD_REASONS
    assert all(nodes[n].drained and nodes[n].reason_user == "root" for n in ODD_REASONS) and not nodes["n1"].drained


@pytest.mark.parametrize("release", sorted(p.name for p in ODD.glob("slurm-*")))
def test_real_scontrol_answers_with_odd_reasons_read_whole(release):
    from gpuhc.slurm.act.command import decode
    from gpuhc.slurm.read.dumps import parse_nodes

    for name in ("scontrol_show_node_oneline.txt", "scontrol_show_node.txt", "scontrol_json.json"):
        path = ODD / release / name
        if not path.exists():  # 22.05 has no scontrol --json
            continue
        nodes = {n.name: n for n in parse_nodes(decode(path.read_bytes()))}
        assert sorted(nodes) == ["n1", "n2", "n3", "n4", "n5"], name
        got = {n: nodes[n].reason for n in ODD_REASONS}
        # text joins a reason's lines with spaces (-o) or keeps the indented line (plain): the
        # words are all there; the other reasons come through exactly
        assert got["n2"].split() == ODD_REASONS["n2"].split(), name
        assert {n: got[n] for n in ("n3", "n4", "n5")} == {n: ODD_REASONS[n] for n in ("n3", "n4", "n5")}, name
