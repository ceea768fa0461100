"""-o/--format, --parsable and --noheader on every table command (gpuhc/cli/tables.py; issue 50,
point 7): one implementation, sinfo's and sacct's habits. For each command: the chosen columns in
their order, --parsable `|`-separated with no padding, --noheader without the header line, and an
unknown column refused with exit 2, naming it and the valid ones, before Slurm is asked."""

from __future__ import annotations

import json
import time

import click
import pytest

from gpuhc.cli.tables import Table
from tests.helpers.cli import gpuhc, one_line_error
from tests.helpers.paths import FIXTURES

TABLE = Table({"node": 8, "act": 6, "reason": 0}, default=("node", "act", "reason"))
ROWS = [{"node": "gpu001", "act": "drain", "reason": "gpuhc: xid79 gpu3 | fell off"},
        {"node": "gpu002", "act": "resume", "reason": None}]

# (argv, columns) of every table command: the columns are the ones its -h names
COMMANDS = [
    (["quarantine", "list"], "node, phase, cycle, state, since, reason"),
    (["fleet", "stats"], "kind, key, nodes, drains, mtbf_h, mttr_h, median_ttr_h, open, retired, trend, first_half, "
                         "second_half, trend_p"),
    (["fleet", "risk"], "gpus, hours, rate, p_interrupted, expected_failures, job_mtbf_h, this_job"),
    (["fleet", "suspects"], "node, partition, jobs, bad, rate, rest_rate, ratio, p_value, suspect, bad_jobs"),
    (["fleet", "incidents"], "kind, switch, check, nodes, first, last, detail"),
    (["fleet", "lemons"], "kind, key, standing, drains, nodes, last, checks"),
    (["fleet", "observed"], "node, act, runs, first, last, stages, reason"),
    (["fleet", "config-errors"], "node, since, last, using, error"),
    (["canary", "status"], "node, gpu, status, last_run, age, cadence, due, overdue, uuid, finding"),
    (["jobs"], "job, verdict, culprits, since, age, nodes, reported, user, name"),
    (["explain", "xid"], "code, severity, action, does, name"),
    (["config", "acts"], "act, on, what, switch"),
]


def test_plain_parsable_noheader_and_chosen_columns():
    assert TABLE.lines(ROWS, None, False, False) == [
        "NODE     ACT    REASON", "gpu001   drain  gpuhc: xid79 gpu3 | fell off", "gpu002   resume -"]
    assert TABLE.lines(ROWS, "reason,NODE", True, True) == [
        "gpuhc: xid79 gpu3 \\x7c fell off|gpu001", "-|gpu002"]  # the separator never appears inside a field
    wide = TABLE.lines([{"node": "gpu-long-name-01", "act": "x\x1b[2Jy"}], "node,act", False, False)
    assert wide == ["NODE             ACT", "gpu-long-name-01 x\\x1b[2Jy"]  # a wide value widens its column; escaped
    assert TABLE.lines([], "act", True, False) == ["ACT"]  # no row: the header alone, as sinfo prints it


def test_an_unknown_column_is_a_usage_error_naming_the_columns():
    with pytest.raises(click.BadParameter, match="nodes: not a column \\(these are: node, act, reason\\)"):
        TABLE.fields("node,nodes")
    with pytest.raises(click.BadParameter, match="not a column"):
        TABLE.fields(" , ")


@pytest.mark.parametrize("argv,columns", COMMANDS, ids=[" ".join(a) for a, _ in COMMANDS])
def test_every_table_command_takes_them_and_refuses_an_unknown_column_first(tmp_path, argv, columns):
    text = " ".join(gpuhc(*argv, "-h").stdout.split())
    assert "-o, --format FIELDS" in text and "--parsable" in text and "--noheader" in text, text
    assert f"Columns, comma-separated, in the order wanted: {columns}." in text, text
    cfg = tmp_path / "gpuhc.yaml"  # Slurm's tools are nowhere: refused before anything is asked
    cfg.write_text(f"slurm:\n  scontrol: {tmp_path}/none\n")
    extra = {"fleet risk": ["--gpus", "8", "--hours", "1", "--rate", "0.001"], "explain xid": []}.get(
        " ".join(argv), ["--config", str(cfg)])
    err = one_line_error(gpuhc(*argv, *extra, "-o", "node,bogus"))
    assert "bogus: not a column" in err and f"(these are: {columns})" in err, err


def test_fleet_risk(tmp_path):
    argv = ["fleet", "risk", "--gpus", "8", "--hours", "10", "--rate", "0.001"]
    cp = gpuhc(*argv, "-o", "this_job,gpus,p_interrupted", "--parsable", "--noheader")
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [f"{'yes' if n == 8 else '-'}|{n}|{1 - (1 - 0.001) ** (n * 10):g}"
                                      for n in (2, 4, 8, 16, 32)]  # a quarter to 4 times the job
    plain = gpuhc(*argv, "-o", "gpus,this_job").stdout.splitlines()
    assert plain[0] == "GPUS   THIS_JOB" and plain[3] == "8      yes"


def test_fleet_stats(tmp_path):
    from gpuhc.export.eventlog import append_event

    now, log = time.time(), tmp_path / "events.jsonl"
    for node, t0 in (("gpu001", now - 5 * 86400), ("gpu002", now - 2 * 86400)):
        for t, act, reason in ((t0, "drain", "gpuhc: ecc gpu1 uncorrectable"), (t0 + 7200, "resume", None)):
            append_event(str(log), {"node": node, "stage": "passive", "started": t, "results": [],
                                    "slurm": {"action": act, "acted": True, "reason": reason}})
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text(f"output:\n  event_log: {log}\n")
    base = ["fleet", "stats", "--no-slurm", "--since", "7d", "--config", str(cfg)]
    cp = gpuhc(*base, "-o", "key,kind,drains,mttr_h", "--parsable", "--noheader")
    assert cp.returncode == 0, cp.stderr
    assert {"all|fleet|2|2", "ecc|cause|2|2", "gpu001|node|1|2", "gpu002|node|1|2"} <= set(cp.stdout.splitlines())
    assert all(line.count("|") == 3 and "note:" not in line for line in cp.stdout.splitlines())
    head = gpuhc(*base, "-o", "kind,drains").stdout.splitlines()
    assert head[0] == "KIND      DRAINS" and "fleet     2" in head


def test_fleet_suspects_and_incidents_rows():
    """Their rows from the real grouping and test (their commands need Slurm's accounting and
    `scontrol show node`: tests/slurm_real/test_fleet.py runs them live)."""
    from gpuhc.cli import fleet_tables as T
    from gpuhc.fleet.suspects import Job, judge
    from gpuhc.fleet.switches import Failure, group_by_switch

    jobs = [Job(str(i), "NODE_FAIL" if i % 4 == 0 and i % 8 == 1 or i % 40 == 0 else "COMPLETED", "gpu",
                (f"n{i % 8}",), None) for i in range(800)]
    recs = judge(jobs)
    lines = T.SUSPECTS.lines([T.suspect_row(r) for r in recs if r.suspect], "node,suspect,bad,jobs", True, False)
    assert lines == ["NODE|SUSPECT|BAD|JOBS", "n0|YES|20|100"], lines
    t0 = 1_700_000_000.0
    found, rest = group_by_switch([Failure("a1", "infiniband", t0, "mlx5_0 down"), Failure("a2", "infiniband", t0 + 5),
                                   Failure("b1", "ecc", t0 + 9, "gpu1 uncorrectable")],
                                  {"a1": "leaf1", "a2": "leaf1", "b1": "leaf2"}, 2, 600)
    lines = T.INCIDENTS.lines(T.incident_rows(found, rest), "kind,switch,nodes,check,detail", True, True)
    assert lines == ["incident|leaf1|a1,a2|infiniband|suspect switch leaf1: 2 nodes under it failed infiniband "
                     "within 5s (a[1-2])", "failure|-|b1|ecc|gpu1 uncorrectable"], lines


def _event_log(tmp_path):
    log, now = tmp_path / "events.jsonl", time.time()
    docs = [{"node": "gpu001", "started": now - 60, "stage": "passive",
             "slurm": {"action": "none", "observed": "drain", "reason": "gpuhc: xid79 gpu3 (0000:18:00.0) | off"}},
            {"node": "gpu002", "started": now - 60, "stage": "passive", "results": [],
             "config_error": {"error": "gpuhc.yaml:3: sweeep: unknown key", "file": "gpuhc.yaml", "line": 3,
                              "using": "built-in defaults (observe mode)"}, "slurm": {"action": "none"}}]
    log.write_text("".join(json.dumps(d, separators=(",", ":")) + "\n" for d in docs))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("{}\n")
    return ["--config", str(cfg), "--event-log", str(log)]


def test_fleet_observed_and_config_errors(tmp_path):
    args = _event_log(tmp_path)
    cp = gpuhc("fleet", "observed", *args, "-o", "reason,act,node", "--parsable", "--noheader")
    assert cp.returncode == 0 and cp.stdout == "gpuhc: xid79 gpu3 (0000:18:00.0) \\x7c off|drain|gpu001\n", cp.stdout
    cp = gpuhc("fleet", "config-errors", *args, "-o", "node,using", "--parsable")
    assert cp.returncode == 1 and cp.stdout == "NODE|USING\ngpu002|built-in defaults (observe mode)\n", cp.stdout
    cp = gpuhc("fleet", "config-errors", *args, "-o", "using,node")
    assert cp.stdout.splitlines()[:2] == ["USING" + " " * 36 + "NODE", "built-in defaults (observe mode)" + " " * 9
                                          + "gpu002"], cp.stdout


def test_fleet_lemons(tmp_path):
    from gpuhc.export.eventlog import append_event
    from gpuhc.slurm.repair.lemons import Fault

    log, now = tmp_path / "events.jsonl", time.time()
    for t, check in ((now - 3 * 86400, "xid"), (now - 2 * 86400, "ecc"), (now - 86400, "xid")):
        append_event(str(log), {"node": "dev0", "started": t, "slurm": {"acted": True,
                                                                       "fault": Fault(t, "dev0", check).to_dict()}})
    cfg = tmp_path / "gpuhc.yaml"
    (tmp_path / "topology.conf").write_text("SwitchName=s0 Nodes=dev0\n")  # no Slurm asked
    cfg.write_text(f"fleet:\n  switch:\n    topology_file: {tmp_path}/topology.conf\n")
    base = ["fleet", "lemons", "--config", str(cfg), "--event-log", str(log)]
    cp = gpuhc(*base, "-o", "key,standing,drains,checks", "--parsable", "--noheader")
    assert cp.returncode == 1 and cp.stdout == "dev0|LEMON|3|ecc,xid\n", cp.stdout + cp.stderr
    assert gpuhc(*base, "-o", "drains,key", "--parsable").stdout.splitlines()[0] == "DRAINS|KEY"


def test_canary_status_with_nothing_recorded_prints_the_header_alone(tmp_path):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("{}\n")
    base = ["canary", "status", "--config", str(cfg), "--state-dir", str(tmp_path / "state")]
    assert gpuhc(*base, "-o", "status,node", "--parsable").stdout == "STATUS|NODE\n"
    assert gpuhc(*base, "--noheader").stdout == ""


def test_jobs_on_a_real_dump():
    dump = str(FIXTURES / "slurm_jobs" / "show-job-26.05.json")
    cp = gpuhc("jobs", "--from-file", dump, "-o", "culprits,job,verdict", "--parsable", "--noheader")
    assert cp.returncode == 0 and cp.stdout == "n1:gpu3|1|hung\n", cp.stdout + cp.stderr
    plain = gpuhc("jobs", "--from-file", dump, "-o", "job,verdict").stdout.splitlines()
    assert plain == ["JOB      VERDICT", "1        hung"], plain


def test_explain_catalogs():
    cp = gpuhc("explain", "xid", "79", "-o", "name,code,severity", "--parsable", "--noheader")
    assert cp.returncode == 0 and cp.stdout == "GPU has fallen off the bus|79|fail\n", cp.stdout + cp.stderr
    sxid = gpuhc("explain", "sxid", "-o", "code", "--parsable").stdout.splitlines()
    assert sxid[0] == "CODE" and len(sxid) > 10 and all(c.isdigit() for c in sxid[1:]), sxid[:3]
    assert "catalogs" in one_line_error(gpuhc("explain", "check", "--noheader"))


def test_config_acts(tmp_path):
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("slurm:\n  mode: observe\n")
    cp = gpuhc("config", "acts", "--config", str(cfg), "-o", "switch,on,act", "--parsable", "--noheader")
    assert cp.returncode == 0 and cp.stdout.splitlines()[0] == "slurm.mode; slurm.breaker|off|drain", cp.stdout
    doc = json.loads(gpuhc("config", "acts", "--config", str(cfg), "--json").stdout)
    assert len(cp.stdout.splitlines()) == len(doc["acts"])  # every act, one line each
