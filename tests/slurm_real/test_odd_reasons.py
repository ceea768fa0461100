"""Other nodes' reasons are other people's bytes: on a real Slurm (22.05, 24.11, 26.05 with
``--slurm=all``), admins' reasons holding a byte that is not UTF-8, a newline, a carriage
return, ESC/OSC/BEL sequences, and 64 KiB of text neither stop gpuhc from draining a sick node
nor reach anyone's terminal raw (issue 18, items 2 and 5; docs/security.md, "Slurm output").

The reasons are set with real ``scontrol update`` (argv bytes, no shell) and read back by the
real sinfo and scontrol; what each release prints for them is in docs/slurm.md, "Reading
Slurm's output". The tests share one cluster per release; the report tests stand on the two
drains of the first two, run first where they have not (tests/helpers/story.py).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers.slurm_flows import XID79, base_config, decisions, gpuhc
from tests.helpers.story import once

pytestmark = pytest.mark.slurm

NODES = ("n1", "n2", "n3", "n4", "n5", "n6")
SICK = ("n1", "n6")  # n1's health check, n6's prolog
# An admin's reasons, as bytes: each one broke a gpuhc read before (issue 18).
ODD = {
    "n2": b"line one\nNodeName=fake State=IDLE second line",
    "n3": b"Pr\xfcfung f\xfcr Admin",  # Latin-1 "Prüfung für Admin": not UTF-8
    "n4": b"esc \x1b[31mred\x1b[0m osc \x1b]0;owned\x07 bel\x07 cr\rend",
    "n5": b"big " + b"A" * 65536,
}


def expected(reason: bytes) -> str:
    """The reason as gpuhc must report it in JSON: exact, a byte that is not UTF-8 as U+FFFD."""
    return reason.decode("utf-8", "replace")


def raw_control(text: str) -> list[str]:
    """Characters that act on a terminal or break a line: C0 (but the line's own newline), DEL,
    C1, and Unicode's line and paragraph separators."""
    return sorted({repr(ch) for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f
                   or ch in "\u2028\u2029"})


@pytest.fixture(scope="module")
def odd(slurm_cluster_module, tmp_path_factory):
    wd = tmp_path_factory.mktemp("odd")
    cfg = base_config(wd, breaker={"max_drained": 2, "settle_s": 0.5, "jitter_s": 0.5})
    c = slurm_cluster_module(workdir=wd, nodes=NODES, gpuhc_config=cfg, node_scenarios={n: str(XID79) for n in SICK})
    for node, reason in ODD.items():
        cp = subprocess.run([b"scontrol", b"update", b"NodeName=" + node.encode(), b"State=DRAIN", b"Reason=" + reason],
                            env=c.env(), capture_output=True, timeout=30, check=False)
        assert cp.returncode == 0, cp.stderr
    c.wd = wd
    return c


def health_check_drains_n1(odd):
    hc = gpuhc(odd, "healthcheck", node="n1")
    assert hc.returncode == 1, hc.stdout + hc.stderr  # unhealthy and drained: not 3 (internal error)
    n1 = odd.node("n1")
    assert n1.drained and n1.reason.startswith("gpuhc: xid79 gpu3"), n1
    lines = decisions(odd.wd, "n1")
    assert any(line.startswith("drained:") for line in lines), lines
    assert not any("internal error" in line or "unreadable" in line for line in lines), lines
    # The breaker counted the partition through sinfo: the admins' drains are not gpuhc's.
    assert not any("circuit breaker open" in line for line in lines), lines


def prolog_drains_n6(odd):
    from tests.helpers.paths import REPO
    from tests.helpers.slurm_cluster import gpuhc_bin

    env = {"GPUHC_CONFIG": str(odd.gpuhc_yaml), "SLURMD_NODENAME": "n6", "GPUHC_STATE_DIR": str(odd.state_root / "n6"),
           "PYTHONPATH": str(REPO), "SLURM_JOB_ID": "4711", "SLURM_JOB_GPUS": "2,3"}  # the job's GPUs hold gpu3
    cp = odd.run([*gpuhc_bin().split(), "prolog"], check=False, timeout=120, env=env)
    assert cp.returncode == 1, cp.stdout + cp.stderr  # the job does not start on the sick GPU
    n6 = odd.node("n6")
    assert n6.drained and n6.reason.startswith("gpuhc: xid79 gpu3"), n6


def test_health_check_drains_the_sick_node_whatever_the_other_reasons_hold(odd):
    once(odd, health_check_drains_n1)


def test_prolog_fails_and_drains_the_sick_node_whatever_the_other_reasons_hold(odd):
    once(odd, prolog_drains_n6)


FORMS = [[], ["--csv"], ["-o", "node,state,owner,user,reason"], ["--parsable"], ["--parsable", "--noheader"],
         ["-o", "node,reason", "--noheader"]]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: " ".join(f) or "plain")
def test_drain_report_lists_every_node_and_prints_no_raw_control_byte(odd, form):
    once(odd, health_check_drains_n1, prolog_drains_n6)  # the sick nodes are drained
    cp = gpuhc(odd, "drain-report", *form)
    assert cp.returncode == 0, cp.stderr
    assert raw_control(cp.stdout) == [] and raw_control(cp.stderr) == []
    listed = cp.stdout
    for node in ("n2", "n3", "n4", "n5"):
        assert node in listed, (node, listed[:2000])
    if form and form[0] in ("--csv", "-o", "--parsable"):  # one line per node, the header aside
        body = [line for line in cp.stdout.splitlines() if line]
        assert len(body) == 6 + (0 if "--noheader" in form else 1), body
    assert "\\x1b]0;owned\\x07" in cp.stdout  # the OSC shows as text: the admin sees it was there


def test_drain_report_json_keeps_every_reason_exactly(odd):
    once(odd, health_check_drains_n1, prolog_drains_n6)  # the sick nodes are drained
    cp = gpuhc(odd, "drain-report", "--json")
    assert cp.returncode == 0, cp.stderr
    assert raw_control(cp.stdout) == []
    doc = json.loads(cp.stdout)
    got = {rec["node"]: rec for rec in doc["nodes"]}
    assert sorted(got) == list(NODES)
    # scontrol --oneliner joins a reason's lines with spaces (every release measured); the rest
    # comes through exactly, the non-UTF-8 byte as U+FFFD.
    assert got["n2"]["reason"].split() == expected(ODD["n2"]).split()
    for node in ("n3", "n4", "n5"):
        assert got[node]["reason"] == expected(ODD[node]), node
        assert (got[node]["owner"], got[node]["user"]) == ("admin", "root")
    assert got["n1"]["owner"] == "gpuhc" and got["n6"]["owner"] == "gpuhc"


def test_drain_report_terminal_table_prints_no_raw_control_byte(odd, monkeypatch):
    """The rich table (a terminal's view), from the live listing, rendered in this process."""
    once(odd, health_check_drains_n1, prolog_drains_n6)  # the sick nodes are drained
    import io

    from gpuhc.cli.report_cmd import read_live
    from gpuhc.cli.report_render import render_rich
    from gpuhc.slurm.report.build import build_report
    from gpuhc.slurm.act.scontrol import Scontrol

    for key, value in odd.env().items():  # this cluster's SLURM_CONF and clients
        monkeypatch.setenv(key, value)
    warnings: list[str] = []
    nodes, source = read_live(20.0, Scontrol(timeout_s=20.0), warnings)
    assert sorted(n.name for n in nodes) == list(NODES) and warnings == []
    buf = io.StringIO()
    render_rich(build_report(nodes, nodes[0].reason_time or 0.0), source, True, buf, width=200)
    assert raw_control(buf.getvalue()) == [], buf.getvalue()[:3000]
    assert all(n in buf.getvalue() for n in ("n2", "n3", "n4", "n5"))


def test_drain_report_from_saved_dumps_of_this_release(odd, tmp_path):
    """What an admin pastes into a ticket: this release's own scontrol and sinfo output for
    these reasons, bytes as they came, read with --from-file in every form."""
    once(odd, health_check_drains_n1, prolog_drains_n6)  # the sick nodes are drained
    dump = tmp_path / "ticket.txt"
    parts = []
    for argv in (["scontrol", "show", "node"], ["scontrol", "--oneliner", "show", "node"], ["sinfo", "-R"]):
        cp = subprocess.run(argv, env=odd.env(), capture_output=True, timeout=30, check=True)
        parts.append(b"$ " + " ".join(argv).encode() + b"\n" + cp.stdout)
    dump.write_bytes(b"".join(parts))
    for form in [["--json"], *FORMS]:
        cp = gpuhc(odd, "drain-report", "--from-file", str(dump), *form)
        assert cp.returncode == 0, cp.stderr
        assert raw_control(cp.stdout) == [] and raw_control(cp.stderr) == [], form
        for node in ODD:
            assert node in cp.stdout, (form, node)
    # The JSON form keeps the exact reasons (the multi-line blocks are read whole).
    doc = json.loads(gpuhc(odd, "drain-report", "--from-file", str(dump), "--json").stdout)
    got = {rec["node"]: rec["reason"] for rec in doc["nodes"]}
    assert sorted(got) == list(NODES)  # n2's "NodeName=fake" line is its reason's, not a node
    assert got["n2"].split() == expected(ODD["n2"]).split()
    assert got["n3"] == expected(ODD["n3"]) and got["n4"] == expected(ODD["n4"]) and got["n5"] == expected(ODD["n5"])
