"""The one home of what differs between the Slurm releases gpuhc runs on, and what they share
where a reader might expect a difference. Pure data and one-line rules: the modules that talk to
Slurm or read its output ask here instead of carrying their own notes on versions.

Tested on Debian's three: 22.05 (Debian 12), 24.11 (Debian 13) and 26.05 (Debian unstable); the
measurements behind each entry are in docs/slurm.md, "Slurm releases" and "Reading Slurm's
output", recorded under tests/fixtures/slurm/. gpuhc never asks Slurm its version: every rule
here holds on all three, or is read off the answer itself (a JSON layout by its keys).
"""

from __future__ import annotations

import re

from gpuhc.text.lazyre import lazy

# --- commands -----------------------------------------------------------------------------

# ``scontrol reboot ... nextstate=X``: all three accept only these two and refuse DRAIN with
# "Invalid state: DRAIN Valid states: DOWN, RESUME".
REBOOT_NEXTSTATES = ("DOWN", "RESUME")

# ``scontrol --json``/``sinfo --json``: 22.05 has no ``scontrol --json`` ("unrecognized option")
# and prints OpenAPI v0.0.38 from ``sinfo --json``; 24.11 (data_parser v0.0.42) and 26.05
# (v0.0.45) print both. The text forms read the same on all three, so text is asked first.
SCONTROL_JSON_SINCE = "23.02"


def lacks_json(error: str) -> bool:
    """Whether a ``--json`` try failed because the release has no ``--json`` (22.05)."""
    return "unrecognized option" in error or "invalid option" in error


def json_hint(error: str) -> str:
    """Why a ``--json`` try failed, when the answer says it is the release's lack of it."""
    if lacks_json(error):
        return f" (scontrol --json needs Slurm {SCONTROL_JSON_SINCE} or later)"
    return ""

# ``scontrol show job`` without ``--json`` (all 22.05 has): the user's own text (job name,
# command, working directory, output paths, comment) printed next to the fields gpuhc acts on,
# one field per line, the AdminComment on the line right after the job's ``Command=`` and
# ``WorkDir=`` lines; 22.05's squeue prints no AdminComment. How gpuhc still reads a job as Slurm
# describes it is gpuhc/slurm/jobs/control.py's docstring.

# ``scontrol reboot ASAP``: 22.05 clears the ASAP drain at the reboot, and no release takes
# ``nextstate=DRAIN`` (REBOOT_NEXTSTATES), so a reboot for a retest asks ``nextstate=DOWN``
# (gpuhc/slurm/repair/quarantine.py).


# --- what Slurm writes into a node's reason ------------------------------------------------

# A node Slurm reboots gets " : reboot issued", " : reboot timed out" (past ResumeTimeout), then
# " : reboot complete" appended to its reason: the same words on all three.
# (compiled when first used: scontrol.py imports this module, and most runs never read a reboot)
REBOOT_NOTES_TAIL = lazy(r"(?:\s+:\s+reboot (?:issued|complete|timed out))+\s*$", re.IGNORECASE)

# ``scontrol update State=RESUME``: 22.05 and 26.05 clear the reason, 24.11 sets IDLE and keeps
# it. So whether a resume took, or an admin resumed a node, is read from the state (in service),
# never from the reason being gone (gpuhc/slurm/act/actuator.py, gpuhc/slurm/flows/handover.py): a rule
# with no branch, so no constant here.

# Slurm's return of a node gpuhc had it reboot, before the boot-time retest ran: 24.11 with
# ReturnToService=1 did once in CI (docs/slurm.md, "Slurm releases"), and with ReturnToService=2
# it is what every release does; 24.11 keeps gpuhc's reason with " : reboot complete" appended,
# 26.05 (ReturnToService=2, once in CI) cleared the reason altogether, so then only the node's
# own memory of the reboot it asked for tells (gpuhc/slurm/repair/quarantine.py,
# ``returned_before_retest``). A rule with no branch, so no constant here.

# A RESUME of a node whose base state is still UNKNOWN (slurmd's start-up health check, before
# the node registers) is refused ("Invalid node state specified") after Slurm has already
# cleared the DRAIN flag (seen on 22.05), so gpuhc never resumes a node in that state
# (gpuhc/slurm/policy/drain.py, ``registered``).

# --- slurmd and the GPUs (the GPU reset: gpuhc/slurm/repair/reset_plan.py) ---------------------

# With ``AutoDetect=nvml`` in gres.conf, 22.05's slurmd closes NVML again once it has detected
# the GPUs; from 23.02 on (SchedMD/slurm commit 49b4c8f059, "Fix reconfiguration of gpu/nvml
# plugin") the gpu/nvml plugin initialises NVML at detection and shuts it down only in its
# ``fini()``, so slurmd holds ``/dev/nvidiactl`` and every ``/dev/nvidia<N>`` for its whole life
# (src/plugins/gpu/nvml/gpu_nvml.c, 23.02, 24.11 and 26.05 alike).
SLURMD_HOLDS_GPUS_SINCE = "23.02"

# --- JSON layouts (read by feature in gpuhc/slurm/read/nodes_json.py) -------------------------------

SINFO_JSON_OLD = "sinfo --json (v0.0.37/v0.0.38)"  # 21.08/22.05: {"nodes": [...]}
SINFO_JSON_NEW = "sinfo --json (23.02+)"  # {"sinfo": [...]}, one record per (partition, state, reason)
# Where a grouped sinfo record keeps the reason's user: 23.02-25.11 under ``reason.user``,
# 26.05 beside it as ``reason_set_by_user``.
SINFO_REASON_USER_KEYS = ("user", "reason_set_by_user")


# --- the health check's own settings (slurm.conf(5) and the CHANGELOG of SchedMD/slurm) --------

# slurmd kills HealthCheckProgram at 60 s on every release; 26.05 makes that HealthCheckTimeout
# (default 60, at most 65535; slurmd.c's run_script_health_check waits that long).
HEALTH_CHECK_KILL_S = 60.0
HEALTH_CHECK_TIMEOUT_SINCE = "26.05"
# SLURM_NODE_IS_HEALTHY in the health check's environment: the controller's view, "yes" or "no"
# (down, drained, draining, failing, in maintenance), unset when unknown (slurmd's start-up run);
# 26.05.2 and later (slurmd.c, run_script_health_check).
# gpuhc needs no such hint: a healthy run of a node it does not hold asks Slurm nothing already
# (policy.needs_slurm), and every other run needs the node's reason, which "yes"/"no" does not
# carry (docs/slurm.md, "Slurm's own words about the health check").
NODE_IS_HEALTHY_SINCE = "26.05.2"
HEALTH_CHECK_MARGIN_S = 5.0  # gpuhc ends this long before slurmd would kill it


def passive_deadline_s(deadline_s: float, health_check_timeout_s: float | None) -> float:
    """The health check's hard end: ``slurm.deadline_s.passive`` (55 s, for Slurm's fixed 60 s),
    or, where the site set ``slurm.health_check_timeout_s`` to its slurm.conf HealthCheckTimeout,
    that less the margin (never below 1 s)."""
    if health_check_timeout_s is None:
        return deadline_s
    return max(1.0, float(health_check_timeout_s) - HEALTH_CHECK_MARGIN_S)

# --- slurm.conf settings that only some releases take (gpuhc doctor, gpuhc/slurm/policy/wiring.py) ------

# HealthCheckNodeState values by the release that brought them (the slurm.conf(5) of 26.05 has
# both, 24.11's neither); each is "mutually exclusive with any other state": the program then runs
# only at slurmd's start or after a reboot, never every HealthCheckInterval.
HEALTHCHECK_NODE_STATE_SINCE = {"START_ONLY": "25.11", "REBOOT_ONLY": "26.05"}
# PrologTimeout and EpilogTimeout (26.05's slurm.conf(5); not in 24.11's) override
# PrologEpilogTimeout for the one they name.


def at_least(release: str | None, since: str) -> bool | None:
    """Whether ``release`` ("24.11.5", "26.05") is ``since`` or later; None when unknown."""
    def key(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", text)[:2])

    if not release or not re.match(r"\d+\.\d+", release):
        return None
    return key(release) >= key(since)
