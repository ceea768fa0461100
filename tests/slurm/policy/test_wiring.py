"""gpuhc doctor's judgement of slurm.conf (gpuhc/slurm/policy/wiring.py): the recommended lines
(slurm/slurm.conf.example, which the real-Slurm tests load into slurmctld 22.05, 24.11 and
26.05) pass, and each wrong setting is named with its fix, one test per setting."""

from __future__ import annotations

import pytest

from gpuhc.slurm.policy import wiring
from gpuhc.slurm.read.slurmconf import parse_text
from tests.helpers.paths import REPO

EXAMPLE = (REPO / "slurm" / "slurm.conf.example").read_text()
NODES = "NodeName=gpu[001-004] Gres=gpu:h100:8\nNodeName=login1,n2 CPUs=8\n"


def conf(*changes: str, drop: tuple[str, ...] = ()):
    """The example with ``drop``'s keys removed and ``changes`` appended (the last value wins,
    as in Slurm)."""
    lines = [ln for ln in EXAMPLE.splitlines() if not any(ln.lower().startswith(d.lower() + "=") for d in drop)]
    return parse_text("\n".join(lines) + "\n" + NODES + "\n".join(changes) + "\n", "slurm.conf")


def present(_path: str) -> bool:
    return True


def finding(setting: str, c, gpuhc: dict | None = None, release: str | None = None, exists=present):
    found = [f for f in wiring.judge(c, gpuhc or {}, release, exists) if f.setting.split(" ")[0] == setting]
    assert found, setting
    return found


def test_the_recommended_lines_pass():
    findings = wiring.judge(conf(), {}, "22.05.8", present)
    assert wiring.worst(findings) == wiring.INFO, [f for f in findings if f.status not in ("ok", "info")]


def test_healthcheck_program():
    (f,) = finding("HealthCheckProgram", conf(drop=("HealthCheckProgram",)))
    assert f.status == wiring.BLOCKER and f.fix.startswith("HealthCheckProgram=/usr/local/share/gpuhc/slurm/healthcheck.sh")
    (f,) = finding("HealthCheckProgram", conf(), exists=lambda p: False)
    assert f.status == wiring.BLOCKER and "no such executable on this node" in f.found
    (f,) = finding("HealthCheckProgram", conf("HealthCheckProgram=/usr/sbin/nhc"))
    assert f.status == wiring.WARN and "not gpuhc's shim" in f.found


@pytest.mark.parametrize("value,status,words", [
    ("0", wiring.BLOCKER, "never runs"), ("30", wiring.WARN, "shorter than gpuhc's own deadline"),
    ("7200", wiring.WARN, "up to 120 min late"), ("five", wiring.BLOCKER, "not a number"),
])
def test_healthcheck_interval(value, status, words):
    (f,) = finding("HealthCheckInterval", conf(f"HealthCheckInterval={value}"))
    assert f.status == status and words in f.found and f.fix.startswith("HealthCheckInterval=300")


@pytest.mark.parametrize("value,release,status,words", [
    ("NONDRAINED_IDLE", None, wiring.BLOCKER, "never resumes it"),
    ("ALLOC", None, wiring.BLOCKER, "never resumes it"),
    ("IDLE,CYCLE", None, wiring.WARN, "nodes running jobs are not checked"),
    ("ANY", None, wiring.WARN, "add CYCLE"),
    ("START_ONLY", "26.05.5", wiring.BLOCKER, "only at slurmd's start"),
    ("REBOOT_ONLY", "26.05.5", wiring.BLOCKER, "or after a reboot"),
    ("START_ONLY", "24.11.5", wiring.BLOCKER, "Slurm 24.11.5 has no START_ONLY (it came in 25.11)"),
    ("REBOOT_ONLY", "25.11.0", wiring.BLOCKER, "it came in 26.05"),
    ("ANY,SOMETIMES", None, wiring.BLOCKER, "Slurm knows no SOMETIMES"),
])
def test_healthcheck_node_state(value, release, status, words):
    (f,) = finding("HealthCheckNodeState", conf(f"HealthCheckNodeState={value}"), release=release)
    assert f.status == status and words in f.found, f
    assert f.fix == "HealthCheckNodeState=ANY,CYCLE"


def test_prolog_and_epilog():
    for key in ("Prolog", "Epilog"):
        (f,) = finding(key, conf(drop=(key,)))
        assert f.status == wiring.WARN and f.found == "not set" and f.fix.startswith(f"{key}=/usr/local/share/gpuhc/")


def test_prolog_epilog_timeout_against_gpuhcs_deadlines():
    prolog, epilog = finding("PrologEpilogTimeout", conf("PrologEpilogTimeout=45"))
    assert prolog.status == wiring.OK and "above gpuhc's 20 s" in prolog.found
    assert epilog.status == wiring.BLOCKER and "kills the epilog before gpuhc's deadline (60 s" in epilog.found
    assert epilog.fix.startswith("PrologEpilogTimeout=90 (above slurm.deadline_s.epilog 60 s)")
    # a longer deadline in the config moves the line
    (p, _e) = finding("PrologEpilogTimeout", conf(), {"slurm": {"deadline_s": {"prolog": 85}}})
    assert p.status == wiring.BLOCKER
    # 26.05's PrologTimeout/EpilogTimeout win over PrologEpilogTimeout for their own script
    (found,) = finding("EpilogTimeout", conf("EpilogTimeout=30"))
    assert found.setting == "EpilogTimeout (Epilog)" and found.status == wiring.BLOCKER
    (none_p,) = [f for f in wiring.judge(conf(drop=("PrologEpilogTimeout",)), {}, None, present)
                 if f.setting == "PrologTimeout (Prolog)"]
    assert none_p.status == wiring.OK and "indefinitely" in none_p.found


def test_prolog_flags():
    (f,) = finding("PrologFlags", conf(drop=("PrologFlags",)))
    assert f.status == wiring.WARN and f.fix.startswith("PrologFlags=Alloc")
    (f,) = finding("PrologFlags", conf("PrologFlags=Contain,Alloc"))
    assert f.status == wiring.OK


def test_nohold_on_prolog_fail():
    (f,) = finding("SchedulerParameters", conf("SchedulerParameters=bf_continue"))
    assert f.status == wiring.WARN and "requeued held" in f.found


def test_reboot_program_when_gpuhc_reboots():
    ladder = {"slurm": {"remediation": {"enabled": True}}}
    (f,) = finding("RebootProgram", conf(), ladder)
    assert f.status == wiring.BLOCKER and f.fix == "RebootProgram=/usr/sbin/reboot"
    (f,) = finding("RebootProgram", conf("RebootProgram=/usr/sbin/reboot"), ladder)
    assert f.status == wiring.OK
    (f,) = finding("RebootProgram", conf())
    assert f.status == wiring.OK and "reboots no node" in f.found


def test_return_to_service():
    ladder = {"slurm": {"quarantine": {"reboot": True}}}
    (f,) = finding("ReturnToService", conf("ReturnToService=2", "RebootProgram=/usr/sbin/reboot"), ladder)
    assert f.status == wiring.WARN and "before its boot-time retest" in f.found and f.fix == "ReturnToService=1"
    (f,) = finding("ReturnToService", conf("ReturnToService=2"))
    assert f.status == wiring.OK  # gpuhc reboots nothing: no difference to it


def test_breaker_ledger_node():
    named = {"slurm": {"breaker": {"ledger_node": "gpuhc-ledger"}}}
    (f,) = finding("slurm.breaker.ledger_node", conf(), named)
    assert f.status == wiring.BLOCKER and "defines no such node" in f.found
    ledger = "NodeName=gpuhc-ledger NodeHostname=localhost CPUs=1 RealMemory=100 State=UNKNOWN"
    (f,) = finding("slurm.breaker.ledger_node", conf(ledger), named)
    assert f.status == wiring.OK
    (f,) = finding("slurm.breaker.ledger_node", conf("NodeName=big[0001-2000] Gres=gpu:8"))
    assert f.status == wiring.WARN and "2006 nodes" in f.found


def test_observe_or_enforce():
    (f,) = finding("slurm.mode", conf(), {"slurm": {"mode": "observe"}})
    assert f.status == wiring.INFO and f.found.startswith("observe") and "slurm.mode: enforce" in f.fix
    (f,) = finding("slurm.mode", conf())
    assert f.found.startswith("enforce")


def test_sweep_account_rights():
    assert wiring.sweep_rights("gpuhc", "gpuhc|Operator\n", None).status == wiring.OK
    f = wiring.sweep_rights("gpuhc", "gpuhc|None\n", None)
    assert f.status == wiring.BLOCKER and f.fix == "sacctmgr modify user gpuhc set adminlevel=operator"
    assert wiring.sweep_rights("gpuhc", "", None).status == wiring.BLOCKER
    assert wiring.sweep_rights("gpuhc", None, "sacctmgr: timed out").status == wiring.WARN


def test_results_dir_shared():
    assert wiring.results_dir(None, None, None, "gpuhc").status == wiring.BLOCKER
    assert wiring.results_dir("/shared/x", None, None, "gpuhc").status == wiring.BLOCKER
    assert wiring.results_dir("/var/tmp/x", "ext4", "gpuhc", "gpuhc").status == wiring.WARN
    assert wiring.results_dir("/shared/x", "nfs4", "root", "gpuhc").status == wiring.WARN
    assert wiring.results_dir("/shared/x", "lustre", "gpuhc", "gpuhc").status == wiring.OK


def test_textfile_directory():
    assert wiring.textfile("/x/y/gpuhc.prom", None).status == wiring.OK
    f = wiring.textfile("/var/lib/prometheus/node-exporter/gpuhc.prom", "its directory does not exist (...)")
    assert f.status == wiring.WARN and f.fix.startswith("install -d -m 0755 /var/lib/prometheus/node-exporter")
    f = wiring.textfile("/var/lib/prometheus/node-exporter/gpuhc.prom", "not root's")
    assert "dpkg-statoverride --update --add root root 0755 /var/lib/prometheus" in f.fix
