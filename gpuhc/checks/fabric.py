"""fabric and imex: the NVLink5 fabric beyond link state -- NVML's fabric health and NVLink-C2C
errors (check ``fabric``), and the IMEX daemon (check ``imex``).

Registration (fabric state and status, and its grace after boot) is the nvswitch check's; this
check reads what the fabric says once a GPU is registered (docs/checks.md "fabric", the facts
and their sources in docs/facts.md "NVML" and "IMEX").

Health mask (``nvmlDeviceGetGpuFabricInfoV`` v2+, judged only when the state is "completed").
Each 2-bit field reads 0 "not supported", 1 "true", 2 "false" (the configuration field is 4
bits: 1 "none", 2-8 a named misconfiguration). NVIDIA's DCGM raises a health incident for a
route that is unhealthy and for degraded bandwidth; here:

- route unhealthy: FAIL, drain + reboot -- the GPU cannot reach some peers over the fabric, so
  a multi-node NVLink job on it fails; re-registering the GPU with the fabric manager (in
  practice a reboot, as for a failed registration) is the recovery.
- incorrect configuration (wrong system GUID, chassis serial, location, firmware, too few
  NVLinks, no partition, GPU state invalid): FAIL, drain + hardware ticket: a person must fix
  the tray, its cabling or its firmware.
- degraded bandwidth, route recovery or access-timeout recovery in progress, no partition
  assigned, global fabric manager disconnected: WARN -- the GPU still works (slower, or while
  the fabric heals itself), and a node must not be drained for the rack's fabric manager.
- v3's health summary: "unhealthy" with no bit above to say why FAILs (drain + reboot) on
  NVIDIA's own word; "limited capacity" WARNs.

Siblings. GPUs of one tray registered in one NVLink domain share the cluster UUID and clique
id; a GPU that differs is in another partition than its siblings: WARN.

C2C. NVLink-C2C CRC, replay and back-to-back replay counts are cumulative, so their growth
between two runs is judged, per GPU by UUID in state (first sight records; a counter that went
down -- driver reload -- is re-recorded). No NVIDIA guidance gives a level; like the nvlink
check's CRC and replay levels, growth WARNs at ``c2c_warn`` and FAILs (drain + hardware ticket:
the CPU-GPU link is on the board) at ``c2c_fail`` per reading, back-to-back replays (a replay
that itself failed) at ``c2c_b2b_warn`` / ``c2c_b2b_fail``. 0 disables a level.

IMEX (check ``imex``, where ``nvidia-imex-ctl`` is installed; passive and bootstrap only: the
tool's two calls stay off the prolog's path, and a prolog-managed IMEX may not be up yet when
gpuhc's prolog runs). Many sites run the IMEX daemon only for a job's
nodes (a prolog, Slurm's switch/nvidia_imex, Kubernetes' DRA driver), so a stopped daemon on an
idle node is normal; DCGM-based monitors that flagged it drained healthy nodes (NVIDIA/NVSentinel
issue 1471, NVIDIA/DCGM issue 308). So by default the daemon is judged only when it runs (it
answers, and not UNAVAILABLE, which DCGM also passes): not READY WARNs, a domain DOWN WARNs. ``imex_required: true`` (a site that runs IMEX
rack-wide all the time) makes a daemon that is not READY or does not answer, and a domain
DOWN, FAIL (drain + reboot). A DEGRADED domain is another node's problem: WARN, naming the
nodes that are not READY, never a drain of this one.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import IMEX, NVML, Check, CheckOutput, Context, na, result, selected_gpus
from gpuhc.model.host import ImexStatus
from gpuhc.model.nvml import GpuReading
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "fabric"

# The health mask's fields (NVML_GPU_FABRIC_HEALTH_MASK_*: shift, width, the value that is bad,
# what it means, severity, action). Declared once; the shifts are NVML's ABI.
_TRUE = 1
MASK_FIELDS: tuple[tuple[str, int, int, str, Status, Action], ...] = (
    ("route_unhealthy", 4, 0x3, "fabric route unhealthy", Status.FAIL, Action.DRAIN_REBOOT),
    ("degraded_bw", 0, 0x3, "fabric bandwidth degraded", Status.WARN, Action.NONE),
    ("route_recovery", 2, 0x3, "fabric route recovery in progress", Status.WARN, Action.NONE),
    ("access_timeout_recovery", 6, 0x3, "fabric access-timeout recovery in progress", Status.WARN, Action.NONE),
)
_CONFIG_SHIFT, _CONFIG_WIDTH = 8, 0xF
CONFIG_PROBLEMS = {2: "incorrect system GUID", 3: "incorrect chassis serial number", 4: "no partition",
                   5: "insufficient NVLinks", 6: "incompatible GPU firmware", 7: "invalid location",
                   8: "GPU state invalid"}
_PARTITION_SHIFT, _PARTITION_FALSE = 12, 2
_GFM_SHIFT, _GFM_DISCONNECTED = 14, 2
# Each C2C counter (as gpuhc/sources/nvml_fabric.py names them) and its (warn, fail) thresholds.
C2C_LEVELS = {"crc": ("c2c_warn", "c2c_fail"), "replay": ("c2c_warn", "c2c_fail"),
              "replay_b2b": ("c2c_b2b_warn", "c2c_b2b_fail")}
DEFAULTS = {"c2c_warn": 100, "c2c_fail": 10000, "c2c_b2b_warn": 1, "c2c_b2b_fail": 100}
IMEX_ID = "imex"


def decode_mask(mask: int) -> list[tuple[str, Status, Action]]:
    """The health mask's findings: (what, severity, action), worst first."""
    out: list[tuple[str, Status, Action]] = []
    for _, shift, width, what, status, action in MASK_FIELDS:
        if (mask >> shift) & width == _TRUE:
            out.append((what, status, action))
    config = (mask >> _CONFIG_SHIFT) & _CONFIG_WIDTH
    if config in CONFIG_PROBLEMS:
        out.append((f"fabric configuration: {CONFIG_PROBLEMS[config]}", Status.FAIL, Action.DRAIN_TICKET))
    elif config > 1:  # a code newer than gpuhc: say it, drain only for what NVIDIA names
        out.append((f"fabric configuration code {config} (unknown to gpuhc)", Status.WARN, Action.NONE))
    if (mask >> _PARTITION_SHIFT) & 0x3 == _PARTITION_FALSE:
        out.append(("no fabric partition assigned", Status.WARN, Action.NONE))
    if (mask >> _GFM_SHIFT) & 0x3 == _GFM_DISCONNECTED:
        out.append(("global fabric manager disconnected", Status.WARN, Action.NONE))
    out.sort(key=lambda f: (-f[1].rank, -f[2].rank))
    return out


def _health(gpu: GpuReading) -> list[Result]:
    s = gpu.subject
    found = decode_mask(gpu.fabric_health_mask) if gpu.fabric_health_mask is not None else []
    value = {"health_mask": None if gpu.fabric_health_mask is None else hex(gpu.fabric_health_mask),
             "summary": gpu.fabric_health_summary}
    if gpu.fabric_health_summary == "unhealthy" and not any(st is Status.FAIL for _, st, _ in found):
        found.insert(0, ("NVML fabric health summary: unhealthy", Status.FAIL, Action.DRAIN_REBOOT))
    elif gpu.fabric_health_summary == "limited capacity" and not found:
        found.append(("NVML fabric health summary: limited capacity", Status.WARN, Action.NONE))
    if not found:
        return []
    worst = found[0]
    what = "; ".join(w for w, _, _ in found)
    return [result(ID, worst[1], f"{s} {what}", s, value=value, action=worst[2])]


def _siblings(gpus: list[GpuReading]) -> list[Result]:
    """GPUs of one node registered in another NVLink partition than most of their siblings."""
    keyed = [(g, (g.fabric_cluster_uuid, g.fabric_clique_id)) for g in gpus if g.fabric_clique_id is not None]
    if len(keyed) < 2:
        return []
    counts: dict[Any, int] = {}
    for _, key in keyed:
        counts[key] = counts.get(key, 0) + 1
    usual = max(counts, key=lambda k: (counts[k], str(k)))
    if counts[usual] == len(keyed):
        return []
    return [result(ID, Status.WARN, f"{g.subject} in NVLink clique {key[1]} of cluster {key[0] or 'none'}, its "
                   f"siblings in clique {usual[1]} of cluster {usual[0] or 'none'}", g.subject,
                   value={"cluster": key[0], "clique": key[1]}, threshold={"cluster": usual[0], "clique": usual[1]})
            for g, key in keyed if key != usual]


def _c2c(gpus: list[GpuReading], prev: dict[str, Any], ctx: Context) -> tuple[list[Result], dict[str, Any], int]:
    """C2C counter growth since the last run; the new state (a run over some GPUs -- the prolog's
    -- keeps the others'; a full run drops GPUs no longer there); how many GPUs have C2C."""
    results: list[Result] = []
    state = dict(prev) if ctx.gpus is not None else {}
    seen = 0
    for gpu in gpus:
        if not gpu.c2c_errors or gpu.lost:
            continue
        seen += 1
        before = prev.get(gpu.uuid) if isinstance(prev.get(gpu.uuid), dict) else {}
        state[gpu.uuid] = dict(gpu.c2c_errors)
        worst, grew = None, {}
        for name, now in gpu.c2c_errors.items():
            last = before.get(name)
            if not isinstance(last, int) or now < last or name not in C2C_LEVELS:
                continue
            growth = now - last
            warn, fail = (int(ctx.t(k, DEFAULTS[k])) for k in C2C_LEVELS[name])
            level = Status.FAIL if fail and growth >= fail else Status.WARN if warn and growth >= warn else None
            if level is not None:
                grew[name] = growth
                worst = level if worst is None or level.rank > worst.rank else worst
        if worst is not None:
            what = ", ".join(f"{k} +{v}" for k, v in grew.items())
            results.append(result(ID, worst, f"{gpu.subject} NVLink-C2C errors growing: {what}", gpu.subject,
                                  value=grew, action=Action.DRAIN_TICKET if worst is Status.FAIL else Action.NONE))
    return results, state, seen


def _imex(imex: ImexStatus, required: bool) -> list[Result]:
    bad = Status.FAIL if required else Status.WARN
    action = Action.DRAIN_REBOOT if required else Action.NONE
    need = " (imex_required)" if required else ""
    if imex.daemon in (None, "UNAVAILABLE"):  # not running: DCGM passes UNAVAILABLE too
        why = imex.error or "UNAVAILABLE"
        if not required:  # a daemon stopped between jobs (prolog- or DRA-managed IMEX) is normal
            return [result(IMEX_ID, Status.PASS, f"IMEX installed, daemon not running ({why}); not required")]
        return [result(IMEX_ID, Status.FAIL, f"IMEX daemon not running{need}: {why}", value=imex.daemon,
                       threshold="READY", action=action)]
    if imex.daemon != "READY":
        return [result(IMEX_ID, bad, f"IMEX daemon {imex.daemon}{need}", value=imex.daemon, threshold="READY", action=action)]
    if imex.domain == "DOWN":
        return [result(IMEX_ID, bad, f"IMEX domain DOWN{need}", value=imex.domain, threshold="UP", action=action)]
    if imex.domain == "DEGRADED":
        others = sorted(addr for addr, st in imex.nodes.items() if st != "READY")
        named = f": not ready {', '.join(others[:8])}" + (f" (+{len(others) - 8})" if len(others) > 8 else "") if others else ""
        return [result(IMEX_ID, Status.WARN, f"IMEX domain DEGRADED{named}", value={"domain": imex.domain, "not_ready": others},
                       threshold="UP")]
    if imex.domain is None:
        return [result(IMEX_ID, Status.WARN, f"IMEX daemon READY, domain not read: {imex.error}")]
    return [result(IMEX_ID, Status.PASS, f"IMEX daemon READY, domain UP ({len(imex.nodes)} node(s))")]


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    prev = ctx.prev or {}
    nvml = snapshot.nvml
    results: list[Result] = []
    c2c_state = prev.get("c2c") if isinstance(prev.get("c2c"), dict) else {}
    registered = c2c_seen = 0
    if nvml is not None and nvml.available:
        gpus = [g for g in selected_gpus(snapshot, ctx) if not g.lost]
        done = [g for g in gpus if g.fabric_state == "completed"]
        registered = len(done)
        for gpu in done:
            results.extend(_health(gpu))
        results.extend(_siblings(done))
        c2c, c2c_state, c2c_seen = _c2c(gpus, c2c_state, ctx)
        results.extend(c2c)
    if not any(r.status is not Status.PASS for r in results):
        parts = []
        if registered:
            parts.append(f"fabric healthy on {registered} GPU(s)")
        if c2c_seen:
            parts.append(f"NVLink-C2C quiet on {c2c_seen} GPU(s)")
        if parts:
            results = [result(ID, Status.PASS, "; ".join(parts), value=registered)]
        else:
            why = "NVML unavailable" if nvml is None or not nvml.available else "no NVLink fabric or C2C on this node"
            results = [na(ID, why)]
    results.sort(key=lambda r: (-r.status.rank, r.subject))
    return CheckOutput(results, state={"c2c": c2c_state})


def judge_imex(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    imex = snapshot.imex
    if imex is None:
        return CheckOutput([na(IMEX_ID, "IMEX status not read")])
    if not imex.installed and imex.error:  # a tool gpuhc must not run as root: said, never run
        return CheckOutput([result(IMEX_ID, Status.WARN, f"IMEX tool not run: {imex.error}")])
    if not imex.installed:
        return CheckOutput([na(IMEX_ID, "IMEX not installed (no nvidia-imex-ctl in a system directory)")])
    return CheckOutput(_imex(imex, bool(ctx.t("imex_required", False))))


def validate(thr: dict[str, Any]) -> list[str]:
    errors = []
    for key in DEFAULTS:
        v = thr.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            errors.append(f"{key}: must be a whole number >= 0 (0 disables the level), got {v!r}")
    return errors


def validate_imex(thr: dict[str, Any]) -> list[str]:
    v = thr.get("imex_required")
    return [] if isinstance(v, bool) else [f"imex_required: must be true or false, got {v!r}"]


CHECKS = [
    Check(
        id=ID,
        needs=(NVML,),
        judge=judge,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults=dict(DEFAULTS),
        validate=validate,
        doc="NVLink5 fabric health mask and summary, sibling partitions, NVLink-C2C error growth.",
    ),
    Check(
        id=IMEX_ID,
        needs=(IMEX,),
        judge=judge_imex,
        stages=("passive", "bootstrap"),
        timeout_s=10.0,  # two tool calls of at most 3 s each (gpuhc/sources/imex.py)
        defaults={"imex_required": False},
        validate=validate_imex,
        doc="The IMEX daemon and its domain (nvidia-imex-ctl), where installed.",
    ),
]
