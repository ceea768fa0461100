"""Config section ``slurm``: how gpuhc talks to Slurm and when it drains and resumes.

The defaults are the ones a site can run with on day one: resume after three clean runs and ten
minutes, stop draining past 10 % of the partition, fail open in the prolog when gpuhc itself
breaks. Every key is explained where an admin reads it (`gpuhc config show` prints the help).
"""

from __future__ import annotations

from gpuhc.text.schema import Key
from gpuhc.slurm.read.releases import REBOOT_NEXTSTATES

# The ladders an action may be given (gpuhc/slurm/repair/ladder.py declares them; repeated here as
# lists because the schema compares a value with its choices, and importing the ladder would
# load the policy on every config load).
_LADDERS = (["reset", "reboot"], ["reset"], ["reboot"], [])
# The services that commonly hold every GPU open (NVIDIA/NVSentinel#1690, NVIDIA/gpu-operator#118,
# NVIDIA/ai-cloud-validation#603), in the order they start: persistence first, the fabric before
# its users, DCGM before its exporter.
RESET_SERVICES = ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-imex", "nvidia-dcgm", "nv-hostengine",
                  "dcgm-exporter", "nvsm")


def _ladder(default: list[str], what: str) -> Key:
    return Key(list, default, f"remediation steps for findings whose action is {what!r}, mildest first",
               item=str, choices=_LADDERS)

SCHEMA = {
    # docs/repair.md "Observe mode": decide everything, change nothing in Slurm; going live is
    # this one line.
    "mode": Key(str, "enforce", "enforce: drain, resume and reboot as decided; observe: only log and record "
                "what would have been done (no scontrol update, no reboot; the prolog and epilog always exit 0)",
                choices=("enforce", "observe")),
    "scontrol": Key(str, "scontrol", "scontrol binary (a name looked up on the shim's PATH, or a full path)"),
    "sinfo": Key(str, "sinfo", "sinfo binary: gpuhc reads nodes with it (one node per query, see docs/slurm.md)"),
    "timeout_s": Key(float, 10.0, "timeout of one scontrol call (further capped by the stage's deadline)",
                     min=0.5, max=120.0),
    "deadline_s": {
        # slurmd kills HealthCheckProgram at 60 s: end before that, whatever Slurm does.
        "passive": Key(float, 55.0, "hard end of `gpuhc healthcheck`, checks plus scontrol", min=2.0, max=3600.0),
        "prolog": Key(float, 20.0, "hard end of `gpuhc prolog` (keep under PrologEpilogTimeout)", min=1.0, max=3600.0),
        "epilog": Key(float, 60.0, "hard end of `gpuhc epilog`", min=2.0, max=3600.0),
        "bootstrap": Key(float, 900.0, "hard end of `gpuhc quarantine retest`", min=10.0, max=14400.0),
    },
    # Slurm 26.05's HealthCheckTimeout, as set in slurm.conf (gpuhc/slurm/read/releases.py): the health
    # check then ends 5 s before it instead of at deadline_s.passive.
    "health_check_timeout_s": Key(float, None, "your slurm.conf HealthCheckTimeout (Slurm 26.05+); the health "
                                  "check ends 5 s before it instead of at deadline_s.passive", min=6.0, max=65535.0,
                                  nullable=True),
    # docs/slurm.md "Sharing the slot with NHC": Slurm's HealthCheckProgram is one program.
    "chain": Key(list, [], "the site's other health check (e.g. [/usr/sbin/nhc]): an argv list, absolute path first, "
                 "run by `gpuhc healthcheck` after its own run, within its deadline; the exit status is gpuhc's "
                 "when not 0, else 1 when this program failed, 3 when it gave no verdict", item=str),
    "log_file": Key(str, None, "append gpuhc's Slurm decisions here too (slurmd discards the health check's output)",
                    nullable=True),
    "syslog": Key(bool, True, "log decisions to syslog (facility daemon, ident gpuhc)"),
    "resume_after": Key(int, 3, "consecutive healthy health checks before gpuhc resumes a node it drained",
                        min=1, max=1000),
    "cooldown_s": Key(float, 600.0, "minimum seconds between gpuhc's drain and its resume", min=0.0),
    "max_cooldown_s": Key(float, 21600.0, "cap of the cool-down, which doubles for each flap", min=0.0),
    "flap_window_s": Key(float, 21600.0, "a drain this soon after gpuhc's resume counts as a flap", min=0.0),
    "prolog_fail_open": Key(bool, True, "prolog: when gpuhc itself breaks (bug, bad config), let the job "
                            "run (exit 0, loud log) instead of blocking the node"),
    "postmortem_dir": Key(str, "/var/lib/gpuhc/postmortem", "epilog: where post-mortem bundles of failed jobs go"),
    "postmortem_format": Key(str, "dir", "bundle as a directory or one .tar.gz", choices=("dir", "tar.gz")),
    "postmortem_keep": Key(int, 50, "bundles kept per node; the oldest beyond this are removed", min=1),
    "postmortem_kernel_lines": Key(int, 200, "most recent raw kernel-log lines (and parsed events) copied into a bundle",
                                   min=0),
    "retire_bundle": {  # docs/repair.md "The retire bundle"
        "enabled": Key(bool, True, "when gpuhc or an admin retires this node, write the evidence an RMA asks for"),
        "dir": Key(str, "/var/lib/gpuhc/retired", "where retire bundles go (root's alone; format as postmortem_format)"),
        "keep": Key(int, 10, "retire bundles kept per node", min=1),
        "kernel_lines": Key(int, 2000, "most recent raw kernel-log lines copied into a retire bundle", min=0),
        "bug_report": Key(str, "nvidia-bug-report.sh", "NVIDIA's report script; skipped where not installed"),
        "bug_report_timeout_s": Key(float, 300.0, "nvidia-bug-report.sh is killed after this long (and at the "
                                    "run's deadline: a health check leaves it little time)", min=0.0, max=3600.0),
    },
    "breaker": {
        "enabled": Key(bool, True, "stop draining when gpuhc already holds too many nodes"),
        "max_drained": Key(int, None, "absolute cap of nodes drained by gpuhc", min=0, nullable=True),
        "max_drained_percent": Key(float, 10.0, "cap as a percentage of the nodes in scope (rounded up)",
                                   min=0.0, max=100.0, nullable=True),
        "max_retired_percent": Key(float, 10.0, "retired nodes do not count toward the drain cap; at this share "
                                   "of the scope (rounded up) every count says ALERT (docs/slurm.md, Circuit breaker)",
                                   min=0.0, max=100.0),
        "scope": Key(str, "partition", "count within the node's partitions or the whole cluster",
                     choices=("partition", "cluster")),
        "settle_s": Key(float, 1.0, "after a drain, wait this long and re-count: concurrent drains past the "
                        "cap are undone by the nodes ranked last (keep >= 1: Slurm stamps drains to the second)",
                        min=0.0, max=10.0),
        "jitter_s": Key(float, 10.0, "before its first count a node waits up to this long (a fixed share of it "
                        "per node name), so a storm of failures reaches slurmctld spread out; cut to what the "
                        "stage's deadline leaves", min=0.0, max=60.0),
        # docs/slurm.md "Breaker ledger": at thousands of nodes, most counts come from here.
        "ledger_node": Key(str, None, "a node record dedicated to gpuhc (in a hidden partition, never running "
                           "jobs) whose Comment holds the breaker's last counts, so that in a storm most nodes "
                           "read one node instead of counting the whole table; none: every node counts",
                           nullable=True, pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"),
        "ledger_ttl_s": Key(float, 30.0, "a ledger entry older than this no longer decides before a drain",
                            min=1.0, max=600.0),
        "ledger_wait_s": Key(float, 2.0, "after a drain, wait up to this long (a fixed share per node name) for "
                             "another node's count that saw it, before counting", min=0.0, max=10.0),
    },
    "quarantine": {
        "max_cycles": Key(int, 3, "failed retests before a node is marked RETIRED", min=1, max=99),
        "reboot": Key(bool, False, "`quarantine retest` of a remote node reboots it (needs RebootProgram)"),
        "reboot_nextstate": Key(str, "DOWN", "state after the reboot: DOWN keeps the node out of service until "
                                "the boot-time retest resumes it; RESUME returns it at once, without that gate "
                                "(22.05, 24.11 and 26.05 accept only these two)", choices=REBOOT_NEXTSTATES),
    },
    "lemon": {  # docs/repair.md "Lemon memory"; the defaults' arithmetic is in docs/facts.md
        "enabled": Key(bool, True, "retire a node (reason `gpuhc: RETIRED lemon ...`) whose drains, or one GPU's, "
                       "reach `faults` within `window_days`, even when its retests pass"),
        "faults": Key(int, 3, "K: drains within the window that make a lemon (near-lemon: one fewer)", min=2, max=100),
        "window_days": Key(float, 30.0, "D: the window, in days (a fraction of a day is allowed, for tests)",
                           min=0.0001, max=3650.0),
        "event_logs": Key(list, [], "event logs (paths or globs) the fault history is rebuilt from when the state "
                          "lost it; a shared glob lets a GPU moved between nodes keep its record; empty: "
                          "output.event_log", item=str),
    },
    "remediation": {  # the ladder, docs/slurm.md "Remediation ladder"
        "enabled": Key(bool, False, "let the health check reset GPUs and reboot nodes gpuhc drained"),
        "actions": {
            "reset_gpu": _ladder(["reset", "reboot"], "reset GPU"),
            "drain_reboot": _ladder(["reboot"], "drain + reboot"),
            "drain_ticket": _ladder([], "drain + hardware ticket"),
        },
        "reset_command": Key(list, ["nvidia-smi", "-r", "-i", "{gpu}"], "GPU reset argv, run without a shell once "
                             "per GPU; {gpu} is the GPU's index", item=str),
        "reset_timeout_s": Key(float, 30.0, "one reset command's timeout (cut to the health check's deadline)",
                               min=1.0, max=600.0),
        # docs/repair.md "The GPU reset procedure": what holds the GPUs is found and stopped
        # first, because the driver refuses a reset while any client holds the device.
        "reset": {
            "services": Key(list, list(RESET_SERVICES), "systemd units that may hold the GPUs, in the order they "
                            "start (stopped in reverse, started back in this order); units absent on the node "
                            "are skipped", item=str, pattern=r"[A-Za-z0-9][A-Za-z0-9@._:-]{0,127}"),
            "stop_units": Key(list, [], "systemd units the site has stopped before every GPU reset and started "
                              "again after, whatever they hold (its monitors, e.g. dcgm-exporter.service): stopped "
                              "first, started last, journaled like the services", item=str,
                              pattern=r"[A-Za-z0-9][A-Za-z0-9@._:-]{0,127}"),
            "yield_timeout_s": Key(float, 10.0, "how long a reset waits for gpuhc's own node watcher to let go of "
                                   "NVML; past it the reset is not tried this run, and no reboot comes of it",
                                   min=1.0, max=120.0),
            "systemctl": Key(str, "systemctl", "systemctl binary (stop and start the services)"),
            "nvidia_smi": Key(str, "nvidia-smi", "nvidia-smi binary (persistence mode off and back on)"),
            "proc_root": Key(str, "/proc", "where /proc is: processes holding /dev/nvidia* are found there"),
            "dev_root": Key(str, "/dev", "where /dev is: NVSwitch device files are looked for there"),
            "command_timeout_s": Key(float, 30.0, "one systemctl or nvidia-smi call's timeout (cut to the run's "
                                     "deadline)", min=1.0, max=600.0),
            "fabric_timeout_s": Key(float, 60.0, "after the reset, wait up to this long for every GPU's NVSwitch "
                                    "fabric registration to complete (cut to the run's deadline)",
                                    min=0.0, max=1800.0),
        },
        "admin_tools": Key(list, ["dcgmi", "nv-hostengine", "nvidia-smi", "nvidia-bug-report.sh", "gpuhc"],
                           "names of processes (comm) that are an admin's on a drained node: a GPU process by one of "
                           "these, or by root, never makes the ladder reboot (it waits and says so)", item=str),
        "reset_attempts": Key(int, 2, "GPU resets per episode before the ladder moves on to a reboot",
                              min=0, max=10),
        "reboot_timeout_s": Key(float, 1800.0, "a reboot and its boot-time retest must answer within this, "
                                "else the cycle counts as failed", min=60.0, max=86400.0),
    },
    # The other Slurm programs gpuhc runs, like scontrol and sinfo above: every one goes through
    # gpuhc/slurm/act/command.py, which runs the path named here (docs/slurm.md "Slurm's programs").
    "squeue": Key(str, "squeue", "squeue binary (`sweep submit`: are the sweep's jobs still queued?)"),
    "sbatch": Key(str, "sbatch", "sbatch binary (`sweep submit` and `sweep analyze`: the probe jobs)"),
    "sacct": Key(str, "sacct", "sacct binary (`fleet suspects`, `sweep submit`'s suspects first)"),
    "sacctmgr": Key(str, "sacctmgr", "sacctmgr binary (`fleet stats`: Slurm's node events)"),
}
