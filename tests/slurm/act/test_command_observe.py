"""Observe mode's one gate (gpuhc/slurm/act/command.py, docs/security.md "Observe mode"): every call
that changes Slurm passes SlurmCommand.call, which refuses it when ``slurm.mode`` is observe.

Two proofs: every Slurm argv written anywhere in gpuhc/ is found by walking the source, and each
one that changes Slurm is refused in observe mode; and the features that act (the in-job record
and requeue, the breaker ledger, the sweep's sbatch, the ladder) are driven in observe mode with
the subprocess boundary intercepted, which fails if a changing argv reaches it."""

from __future__ import annotations

import ast
import subprocess

import pytest

from tests.helpers.minislurm import XID, MiniSlurm, config, flow
from tests.helpers.paths import REPO

from gpuhc.errors import ObserveNotSent, SlurmError
from gpuhc.model.result import Result, Status
from gpuhc.run.report import RunReport
from gpuhc.slurm.act.command import PROGRAMS, READERS, SlurmCommand, changes
from gpuhc.slurm.jobs.control import JobControl
from gpuhc.slurm.act.scontrol import Scontrol
from gpuhc.sweep.slurmcli import SlurmCli

SLURM_PROGRAMS = {*PROGRAMS, "scancel", "srun", "salloc", "strigger"}
# Verbs that change Slurm, from scontrol(1): none of them may ever be listed as a reader.
CHANGING = {"update", "requeue", "requeuehold", "release", "hold", "uhold", "suspend", "resume", "reboot",
            "create", "delete", "cancel_reboot", "reconfigure", "shutdown", "takeover", "notify", "top",
            "power", "write", "setdebug", "add", "modify", "remove"}


def slurm_argvs() -> list[tuple[str, list[str]]]:
    """Every list literal in gpuhc/ that is a Slurm argv: its first item a Slurm program's name
    (or ``self.binary``, the scontrol of JobControl/Scontrol); other items not known in the source
    become "X"."""
    out = []
    for path in sorted((REPO / "gpuhc").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.List) or not node.elts:
                continue
            head = node.elts[0]
            if isinstance(head, ast.Attribute) and head.attr == "binary":
                prog = "scontrol"
            elif isinstance(head, ast.Constant) and head.value in SLURM_PROGRAMS:
                prog = head.value
            else:
                continue
            rest = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "X" for e in node.elts[1:]]
            out.append((f"{path.relative_to(REPO)}:{node.lineno}", [prog, *rest]))
    return out


def test_the_walk_finds_the_known_changing_call_sites():
    found = {(where.split(":")[0], argv[1]) for where, argv in slurm_argvs() if changes(argv)}
    for site in [("gpuhc/slurm/act/scontrol.py", "update"), ("gpuhc/slurm/act/scontrol.py", "reboot"),
                 ("gpuhc/slurm/jobs/control.py", "update"), ("gpuhc/slurm/jobs/control.py", "requeuehold"),
                 ("gpuhc/slurm/jobs/control.py", "release")]:
        assert site in found, (site, sorted(found))
    assert any(argv[0] == "sbatch" for _, argv in slurm_argvs())


@pytest.mark.parametrize("where,argv", slurm_argvs(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_slurm_argv_in_gpuhc_is_sent_only_if_it_reads(where, argv):
    verb = next((a for a in argv[1:] if not a.startswith("-")), "")
    if argv[0] in ("sbatch", "scancel", "srun", "salloc", "strigger") or verb in CHANGING:
        assert changes(argv), f"{where}: {argv} changes Slurm but the gate lets it through"
    sent: list[list[str]] = []
    cmd = SlurmCommand(run=lambda a, t: (sent.append(a), (0, "", ""))[1],
                       run_stdin=lambda a, t, s: (sent.append(a), (0, "", ""))[1], observe=True, warn=lambda _: None)
    if changes(argv):
        with pytest.raises(ObserveNotSent, match="observe mode: not sent"):
            cmd.call(argv)
        assert sent == []
    else:
        cmd.call(argv)
        assert sent == [argv]


def test_readers_never_list_a_changing_verb_and_unknown_programs_are_changes():
    for prog, verbs in READERS.items():
        assert not (verbs or set()) & CHANGING, prog
    assert changes(["scancel", "5"]) and changes(["sbatch", "--parsable"]) and changes(["/opt/x/strigger", "--set"])
    assert changes(["scontrol", "-o", "update", "NodeName=n1"]) and changes(["sacctmgr", "-i", "modify", "user"])
    assert not changes(["/usr/bin/scontrol", "--all", "--json", "show", "node"]) and not changes(["sinfo", "-h"])
    assert changes([]) and changes(["scontrol"]) is True and not changes(["scontrol", "--version"])


def test_the_config_sets_the_gate_for_every_command_object():
    for cls in (SlurmCommand, Scontrol, JobControl, SlurmCli):
        assert cls.from_section({"mode": "observe"}).observe and not cls.from_section({"mode": "enforce"}).observe


# ---------------------------------------------------------------------------- the features, intercepted


class Sent(list):
    said: dict


@pytest.fixture
def intercepted(monkeypatch):
    """subprocess.run, where every Slurm command of gpuhc ends: a stand-in that logs the argv and
    answers a running job on n1 that n2 already recorded as hung (so a requeue is due)."""
    sent: Sent = Sent()
    said = {"comment": "gpuhc-jobs{n2/hang/1000/-}"}

    def fake_run(argv, **kw):
        sent.append(list(argv))
        out = ""
        if "--json" in argv:
            return subprocess.CompletedProcess(argv, 1, b"", b"scontrol: unrecognized option '--json'\n")
        if argv[0].endswith("/squeue") or argv[0] == "squeue":  # run by its real path (gpuhc/files/fsutil.py)
            sep = argv[-1][2:argv[-1].index("%U")]
            out = sep.join(["RUNNING", "1000", "n[1-2]", "", "/w/run.sh", "/w", "\n"])
        elif argv[1:3] == ["show", "job"]:
            out = ("JobId=5 JobName=train\n   UserId=alice(1000) GroupId=alice(1000)\n   JobState=RUNNING\n"
                   "   NodeList=n[1-2]\n   Command=/w/run.sh\n   WorkDir=/w\n   AdminComment=" + said["comment"] + " \n"
                   "   StdErr=/dev/null\n")
        return subprocess.CompletedProcess(argv, 0, out.encode(), b"")

    monkeypatch.setattr(subprocess, "run", fake_run)
    sent.said = said  # type: ignore[attr-defined]
    return sent


def _no_change(sent: list[list[str]]) -> None:
    changed = [a for a in sent if changes(a)]
    assert changed == [], f"observe mode sent changing calls: {changed}"


def test_the_in_job_record_and_requeue_send_nothing_in_observe_mode(tmp_path, monkeypatch, intercepted):
    from gpuhc.slurm.jobs.act import after_healthcheck

    cfg = config(tmp_path, mode="observe")
    cfg.data.setdefault("checks", {}).setdefault("jobs", {})["thresholds"] = {"requeue_after_s": 1}
    _, f = flow(tmp_path, monkeypatch, "passive", MiniSlurm({"n1": ("IDLE", None)}), [])
    f.opts.config = cfg
    hang = Result("jobs", Status.WARN, "job 5 hung", "job5",
                  value={"job": "5", "signature": "hang", "since": 1000, "culprits": ["gpu3"], "owners": [1000]})  # alice's
    report = RunReport(node="n1", stage="passive", started=0.0, duration_s=0.0, results=[hang])
    after_healthcheck(f, report)
    assert any(a[1:3] == ["show", "job"] for a in intercepted), (intercepted, f.log.lines)  # it read
    _no_change(intercepted)
    assert any("observe mode" in line and "not sent" in line for line in f.log.lines), f.log.lines
    # a record that already holds this node's view: nothing to write, the requeue is due
    intercepted.said["comment"] = "gpuhc-jobs{n1/hang/1000/gpu3,n2/hang/1000/-}"
    after_healthcheck(f, report)
    _no_change(intercepted)
    assert any("requeue without n1" in line and "observe mode" in line for line in f.log.lines), f.log.lines


def test_the_ledger_and_the_drain_send_nothing_in_observe_mode(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None), "n2": ("IDLE", None), "ledger": ("IDLE+DRAIN", "gpuhc-ledger")})
    cfg = config(tmp_path, mode="observe", breaker={"ledger_node": "ledger"})
    name, f = flow(tmp_path, monkeypatch, "passive", s, [XID], cfg=cfg)
    from gpuhc.slurm.flows import entry

    out = getattr(entry, name)(f)
    assert out.extra.get("observed") == "drain"
    _no_change(s.calls)


def test_the_sweeps_sbatch_is_not_sent_in_observe_mode(intercepted):
    cli = SlurmCli.from_section({"mode": "observe"}, warn=lambda _: None)
    with pytest.raises(SlurmError, match="observe mode"):
        cli.sbatch(["sbatch", "--parsable", "--job-name=gpuhc-sweep-1"], "#!/bin/sh\n")
    assert intercepted == []


def test_a_flow_built_scontrol_carries_the_gate_whoever_made_it(tmp_path, monkeypatch):
    s = MiniSlurm({"n1": ("IDLE", None)})
    _, f = flow(tmp_path, monkeypatch, "passive", s, [XID], cfg=config(tmp_path, mode="observe"))
    sc = f.scontrol()
    with pytest.raises(ObserveNotSent):
        sc.drain("n1", "gpuhc: test")
    with pytest.raises(ObserveNotSent):
        sc.set_comment("n1", "x")
    assert s.calls == [] and s.nodes["n1"] == ["IDLE", None]
