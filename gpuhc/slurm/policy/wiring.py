"""How gpuhc is wired into Slurm: slurm.conf's settings judged against gpuhc's config, each with
the fix (``gpuhc doctor``; docs/slurm.md, "gpuhc doctor").

Pure: slurm.conf as :mod:`gpuhc.slurm.read.slurmconf` read it, the gpuhc config as a plain dict, the
Slurm release when known, and a few facts about this machine the caller looked up (does a
program exist); out come findings. What needs a live Slurm (the nodes sinfo lists, the sweep
account's rights) the command gathers and judges in gpuhc/cli/doctor_cmd.py.

A **blocker** is a setting with which gpuhc cannot do its job as configured (no health check
runs, Slurm kills gpuhc's epilog before its deadline, a drained node could never be resumed);
a **warn** works but not as docs/slurm.md recommends; **ok** is as recommended; **info** is only
said (observe or enforce).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from gpuhc.slurm.read.releases import HEALTHCHECK_NODE_STATE_SINCE, at_least
from gpuhc.slurm.read.slurmconf import SlurmConf

OK, INFO, WARN, BLOCKER = "ok", "info", "warn", "blocker"
SHIMS = "/usr/local/share/gpuhc/slurm"
# Slurm's own time to start a prolog or epilog and collect it, and a loaded node's slowness, on
# top of gpuhc's deadline: a timeout closer than this to the deadline is a race.
TIMEOUT_MARGIN_S = 10.0
LARGE_CLUSTER = 1000  # nodes: where the breaker ledger starts to pay (docs/slurm.md, "Breaker ledger")


@dataclass(frozen=True)
class Finding:
    setting: str  # what is judged, as an admin would grep for it
    status: str  # ok, info, warn, blocker
    found: str  # what it is now
    fix: str = ""  # what to do, when not ok

    def as_dict(self) -> dict:
        return {"setting": self.setting, "status": self.status, "found": self.found, "fix": self.fix}


Exists = Callable[[str], bool]  # is this an executable program on this machine?


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def judge(conf: SlurmConf, gpuhc: dict, release: str | None = None, exists: Exists = _executable) -> list[Finding]:
    """Every slurm.conf finding, in the order docs/slurm.md lists the lines."""
    slurm = gpuhc.get("slurm") or {}
    return [
        program(conf, "HealthCheckProgram", "healthcheck.sh", exists, BLOCKER,
                "gpuhc never checks a node between jobs, and never resumes one it drained"),
        interval(conf, gpuhc),
        node_state(conf, release),
        program(conf, "Prolog", "prolog.sh", exists, WARN, "no check before each job: a job can land on a GPU "
                "that failed since the last health check"),
        program(conf, "Epilog", "epilog.sh", exists, WARN, "no check after each job, and no post-mortem bundle"),
        timeout(conf, "Prolog", slurm),
        timeout(conf, "Epilog", slurm),
        prolog_flags(conf),
        nohold(conf),
        reboot_program(conf, slurm),
        return_to_service(conf, slurm),
        ledger_node(conf, slurm),
        mode(slurm),
    ]


def program(conf: SlurmConf, key: str, shim: str, exists: Exists, missing: str, why: str) -> Finding:
    want = f"{SHIMS}/{shim}"
    value = conf.get(key)
    if not value:
        return Finding(key, missing, "not set", f"{key}={want} ({why})")
    path = value.split()[0]
    if not exists(path):
        return Finding(key, BLOCKER, f"{value}: no such executable on this node",
                       f"install it here ({key} runs on every node), or {key}={want}")
    if os.path.basename(path) != shim and "gpuhc" not in path:
        return Finding(key, WARN, f"{value} (not gpuhc's shim)", f"make {path} run {want} (or gpuhc {shim[:-3]}), or "
                       f"{key}={want}")
    return Finding(key, OK, value)


def interval(conf: SlurmConf, gpuhc: dict) -> Finding:
    key, value = "HealthCheckInterval", conf.get("HealthCheckInterval")
    try:
        seconds = int(value or 0)
    except ValueError:
        return Finding(key, BLOCKER, f"{value!r} is not a number of seconds", f"{key}=300")
    slurm = gpuhc.get("slurm") or {}
    passive = float((slurm.get("deadline_s") or {}).get("passive") or 55)
    resume = int(slurm.get("resume_after") or 3)
    if seconds <= 0:
        return Finding(key, BLOCKER, "0: the health check never runs" if value else "not set (0: never runs)",
                       f"{key}=300")
    if seconds < passive:
        return Finding(key, WARN, f"{seconds} s, shorter than gpuhc's own deadline (slurm.deadline_s.passive "
                       f"{passive:g} s)", f"{key}=300 (or lower slurm.deadline_s.passive)")
    if seconds > 3600:
        return Finding(key, WARN, f"{seconds} s: a fault is seen up to {seconds // 60} min late, a mended node "
                       f"resumed after {resume} x {seconds // 60} min", f"{key}=300")
    return Finding(key, OK, f"{seconds} s (a node gpuhc drained resumes after {resume} clean runs, "
                   f"about {resume * seconds // 60} min)")


def node_state(conf: SlurmConf, release: str | None) -> Finding:
    key = "HealthCheckNodeState"
    value = conf.get(key) or "ANY"  # Slurm's default
    flags = {f.strip().upper() for f in value.split(",") if f.strip()}
    fix = f"{key}=ANY,CYCLE"
    for flag, since in HEALTHCHECK_NODE_STATE_SINCE.items():
        if flag in flags:
            if at_least(release, since) is False:
                return Finding(key, BLOCKER, f"{value}: Slurm {release} has no {flag} (it came in {since})", fix)
            return Finding(key, BLOCKER, f"{value}: the health check runs only at slurmd's start"
                           f"{' or after a reboot' if flag == 'REBOOT_ONLY' else ''}, so gpuhc never sees the clean "
                           "runs it resumes a node on, nor a fault between jobs", fix)
    unknown = flags - {"ANY", "ALLOC", "CYCLE", "IDLE", "MIXED", "NONDRAINED_IDLE"}
    if unknown:
        return Finding(key, BLOCKER, f"{value}: Slurm knows no {', '.join(sorted(unknown))}", fix)
    if "ANY" in flags or {"ALLOC", "MIXED", "IDLE"} <= flags:
        cycle = "" if "CYCLE" in flags else " (add CYCLE: nodes then run it spread over the interval, not all at once)"
        return Finding(key, OK if not cycle else WARN, value + cycle, fix if cycle else "")
    if "IDLE" not in flags:
        return Finding(key, BLOCKER, f"{value}: a drained idle node is never checked, so gpuhc never resumes it", fix)
    return Finding(key, WARN, f"{value}: nodes running jobs are not checked (an Xid during a job waits for the "
                   "epilog)", fix)


def timeout(conf: SlurmConf, which: str, slurm: dict) -> Finding:
    """Slurm kills a prolog or epilog past its timeout and drains the node with its own reason:
    it must outlast gpuhc's deadline for the stage."""
    deadline = float((slurm.get("deadline_s") or {}).get(which.lower()) or (20 if which == "Prolog" else 60))
    own = f"{which}Timeout"
    key = own if conf.get(own) else "PrologEpilogTimeout"
    value = conf.get(key)
    fix = (f"{key}={int(deadline + TIMEOUT_MARGIN_S) + 20} (above slurm.deadline_s.{which.lower()} "
           f"{deadline:g} s), or lower slurm.deadline_s.{which.lower()}")
    if not value:
        return Finding(f"{own} ({which})", OK, f"not set: Slurm waits for the {which.lower()} indefinitely; gpuhc "
                       f"ends it by slurm.deadline_s.{which.lower()} ({deadline:g} s)")
    try:
        seconds = float(value)
    except ValueError:
        return Finding(f"{key} ({which})", BLOCKER, f"{value!r} is not a number of seconds", fix)
    if seconds < deadline + TIMEOUT_MARGIN_S:
        return Finding(f"{key} ({which})", BLOCKER, f"{seconds:g} s: Slurm kills the {which.lower()} before gpuhc's "
                       f"deadline ({deadline:g} s, + {TIMEOUT_MARGIN_S:g} s margin) and drains the node with its own "
                       "reason", fix)
    return Finding(f"{key} ({which})", OK, f"{seconds:g} s, above gpuhc's {deadline:g} s")


def prolog_flags(conf: SlurmConf) -> Finding:
    value = conf.get("PrologFlags") or ""
    if "alloc" in {f.strip().lower() for f in value.split(",")}:
        return Finding("PrologFlags", OK, value)
    return Finding("PrologFlags", WARN, f"{value or 'not set'}: the prolog runs when a step first reaches the "
                   "node, minutes into a job", "PrologFlags=Alloc (add to the flags there are)")


def nohold(conf: SlurmConf) -> Finding:
    value = conf.get("SchedulerParameters") or ""
    if "nohold_on_prolog_fail" in value.lower():
        return Finding("SchedulerParameters", OK, "nohold_on_prolog_fail")
    return Finding("SchedulerParameters", WARN, "no nohold_on_prolog_fail: a job whose prolog failed is requeued "
                   "held, waiting for an admin", "add nohold_on_prolog_fail to SchedulerParameters")


def reboots(slurm: dict) -> bool:
    """Does this config let gpuhc reboot nodes (the ladder, or a quarantine retest's reboot)?"""
    return bool((slurm.get("remediation") or {}).get("enabled") or (slurm.get("quarantine") or {}).get("reboot"))


def reboot_program(conf: SlurmConf, slurm: dict) -> Finding:
    value = conf.get("RebootProgram")
    if value:
        return Finding("RebootProgram", OK, value)
    if reboots(slurm):
        return Finding("RebootProgram", BLOCKER, "not set, and gpuhc reboots nodes (slurm.remediation or "
                       "slurm.quarantine.reboot): `scontrol reboot` fails", "RebootProgram=/usr/sbin/reboot")
    return Finding("RebootProgram", OK, "not set (gpuhc reboots no node with this config)")


def return_to_service(conf: SlurmConf, slurm: dict) -> Finding:
    value = conf.get("ReturnToService") or "0"  # Slurm's default
    if value.strip() == "2" and reboots(slurm):
        return Finding("ReturnToService", WARN, "2: a node gpuhc rebooted returns to service at its first answer, "
                       "before its boot-time retest (docs/slurm.md, \"Slurm releases\")", "ReturnToService=1")
    return Finding("ReturnToService", OK, value)


def ledger_node(conf: SlurmConf, slurm: dict) -> Finding:
    name = (slurm.get("breaker") or {}).get("ledger_node")
    size = len(conf.node_names())
    if name:
        if conf.node(name) is None:
            return Finding("slurm.breaker.ledger_node", BLOCKER, f"{name}: slurm.conf defines no such node, so "
                           "every count falls back to reading the node table", f"add the NodeName={name} and "
                           "PartitionName lines of slurm/slurm.conf.example, restart slurmctld")
        return Finding("slurm.breaker.ledger_node", OK, f"{name} (defined at {conf.node(name).where})")
    if size >= LARGE_CLUSTER:
        return Finding("slurm.breaker.ledger_node", WARN, f"not set, with {size} nodes: in a storm of failures "
                       "every node counts the whole node table", "define the ledger node (docs/slurm.md, \"Breaker "
                       "ledger\") and set slurm.breaker.ledger_node")
    return Finding("slurm.breaker.ledger_node", OK, f"not set ({size} nodes: not needed below {LARGE_CLUSTER})")


def mode(slurm: dict) -> Finding:
    value = slurm.get("mode") or "enforce"
    if value == "observe":
        return Finding("slurm.mode", INFO, "observe: gpuhc decides and logs, changes nothing in Slurm",
                       "after a week of `gpuhc fleet observed` that reads right: slurm.mode: enforce")
    rem = slurm.get("remediation") or {}
    fixes = ("reboots and resets GPUs it drained (slurm.remediation.enabled)" if rem.get("enabled")
             else "reboots and resets nothing (slurm.remediation.enabled: false)")
    return Finding("slurm.mode", INFO, f"enforce: gpuhc drains, resumes its own drains, {fixes}")


def worst(findings: list[Finding]) -> str:
    order = (OK, INFO, WARN, BLOCKER)
    return max((f.status for f in findings), key=order.index, default=OK)


# --- the admin host: what the sweep needs (README, "systemd timer or cron") -------------------

LOCAL_FS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "vfat", "ramfs"}


def sweep_rights(user: str, answer: str | None, error: str | None) -> Finding:
    """``sacctmgr -n -P show user USER format=user,adminlevel``'s answer (or why it failed)."""
    key = f"sweep account {user}"
    fix = f"sacctmgr modify user {user} set adminlevel=operator"
    if error is not None:
        return Finding(key, WARN, f"could not ask slurmdbd ({error})", f"check by hand: sacctmgr show user {user} "
                       f"format=user,adminlevel; then {fix}")
    rows = [line.split("|") for line in (answer or "").splitlines() if line.strip()]
    level = next((r[1].strip() for r in rows if len(r) >= 2 and r[0].strip() == user), None)
    if level is None:
        return Finding(key, BLOCKER, "not a Slurm user: `sweep analyze --apply` cannot drain",
                       f"sacctmgr add user {user} account=<an account>; {fix}")
    if level.lower() in ("operator", "administrator"):
        return Finding(key, OK, f"adminlevel {level}")
    return Finding(key, BLOCKER, f"adminlevel {level}: `sweep analyze --apply` cannot drain, "
                   "`sweep.job.priority` is refused", fix)


def results_dir(path: str | None, fstype: str | None, owner: str | None, user: str) -> Finding:
    """sweep.results_dir: set, there, on storage the probe jobs on other nodes share, the sweep
    account's."""
    key = "sweep.results_dir"
    if not path:
        return Finding(key, BLOCKER, "not set: each probe job would write on its own node, and `sweep analyze` "
                       "would find nothing", "sweep.results_dir: a directory on shared storage (NFS, Lustre, GPFS) "
                       f"owned by {user}, mode 0755")
    if fstype is None:
        return Finding(key, BLOCKER, f"{path}: no such directory",
                       f"install -d -o {user} -m 0755 {path} (on shared storage)")
    if fstype in LOCAL_FS:
        return Finding(key, WARN, f"{path}: on a local {fstype} file system, which the probe jobs on other nodes "
                       "do not see", "a directory on shared storage (NFS, Lustre, GPFS, CephFS)")
    if owner != user:
        return Finding(key, WARN, f"{path}: owned by {owner}, not {user}: probe jobs run as {user}",
                       f"chown {user} {path}")
    return Finding(key, OK, f"{path} ({fstype}, {user}'s)")


def textfile(path: str | None, problem: str | None) -> Finding:
    key = "output.prometheus_textfile"
    if not path:
        return Finding(key, OK, "not set: no metrics written")
    if problem and "does not exist" in problem:
        return Finding(key, WARN, f"{path}: {problem}", f"install -d -m 0755 {os.path.dirname(path)} (or install "
                       "prometheus-node-exporter), or set output.prometheus_textfile to its textfile directory")
    if problem:
        return Finding(key, WARN, f"{path}: {problem}", "dpkg-statoverride --update --add root root 0755 "
                       f"{os.path.dirname(os.path.dirname(path))} (Debian's node exporter), or another directory "
                       "(install.sh --textfile-dir)")
    return Finding(key, OK, path)
