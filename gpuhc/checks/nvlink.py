"""nvlink: are all NVLinks up, and are their error counters quiet?

Link count. Each GPU's active links are compared with the node's baseline (``nvlink_active`` of
that GPU, by PCI id) or, without a baseline, with the profile's ``expected_active`` (18 on
H100/H200 SXM, 12 on A100 SXM). Fewer active links: FAIL, drain + reboot — a link that did not
train often comes back after a reset, and one that stays down fails again after the reboot,
which the drain policy escalates. With neither expectation (generic profile) the count is only
reported: PCIe cards with bridges legitimately show unwired links as down.

Error counters. NVLink counters are cumulative since the driver loaded, so a lifetime total says
little; the check judges their GROWTH between two readings of a link. State (``ctx.prev``) holds
the last value keyed ``<gpu uuid>/<link>/<counter>``; the first sight of a counter only records
it, and a counter that went down (driver reload, GPU reset) is re-recorded, never judged. A
counter this run did not read keeps its last value in state, so it is judged on its next
reading against that one. Counters are grouped by kind, each with its own growth thresholds
per reading of the link (0 disables a level):

- crc (crc_flit, crc_data): bit errors on the wire; the link retransmits, so they cost
  bandwidth before they cost correctness. WARN at 100 per reading, FAIL at 10000.
- replay: retransmissions; WARN at 100, FAIL at 10000.
- recovery: the link had to retrain — the job stalls. WARN at 1, FAIL at 5 per reading.
- recovery_failed (link_recovery_failed): a retrain did not succeed. FAIL at 1.
- any other counter (malformed packets, receive errors, discards...): WARN at 100, never FAIL.

Growth failures carry drain + hardware ticket: a link that keeps taking errors is a cable,
connector or board problem. Thresholds are per reading because readings are minutes apart
(passive every few minutes, epilog after each job); a site with a different cadence tunes them.

Growth that stays (``persist_hours``, default 4, in ``persist_window_h``, default 6): a link
whose crc, replay or recovery counters grew at the WARN rate (below the FAIL rate) in 4
distinct clock hours of the last 6 is degrading, not a job's burst: FAIL, drain + ticket, the
reason saying how long it grew (gpuhc/checks/persistence.py). A burst of readings within
twenty minutes touches at most two clock hours, so a burst that stops never drains; a link
read every 15 minutes (the rotation at a 5-minute health check) that warns at every reading
fails after a little over three hours. State keeps when each link warned (``warned``, the
first and last time per clock hour, within the window); a counter that went down (a reset or
a reboot, the ladder's cures) starts its link's history again, and so does an admin's resume
(``acknowledge``). Kinds with no FAIL rate (``other``) never fail this way either.

Rotation (``dl_rotation``, default 3). On Hopper the three DL counters (replay, recovery, crc)
are the only NVLink error counters, and the driver takes ~0.8 ms per link for each of them (~43
ms per 18-link GPU, most of the NVML read: docs/verification.md run 14). The passive and prolog
stages read them on a slice of each GPU's links per run: links ``p``, ``p + dl_rotation``, ...,
with ``p`` each GPU's pointer in state (``dl_next``, by GPU index; missing or damaged: 0),
advanced by every rotating read of that GPU, so ``dl_rotation`` health checks in a row read
every link's DL counters once. Replay, CRC and recovery growth on a link is therefore seen
within ``dl_rotation`` x the health-check interval; a link that went down, the COUNT_* counters
(link_recovery_failed and the rest: cheap, every link every run) and Xid 74 in the kernel log
are still seen on every run. The epilog and bootstrap read every link (``dl_plan``): the epilog
attributes errors to the job that just ended and must not leave two thirds of them to the next
job, and the bootstrap runs once per boot. 1 reads every link every run. The rotation is chosen
before NVML names the GPU model, so it comes from the defaults and the config, never a profile.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import Context, GpuJudge, SourceNeeds, na, per_gpu_check, result
from gpuhc.checks.persistence import held, remember, setting_errors, span_text
from gpuhc.catalog.evidence import NVLINK_PERSISTENT
from gpuhc.text.limits import MAX_DL_ROTATION
from gpuhc.model.nvml import GpuReading, NvmlReading
from gpuhc.model.pci import norm_pci
from gpuhc.model.result import Action, Result, Status
from gpuhc.model.snapshot import Snapshot

ID = "nvlink"
KINDS = ("crc", "replay", "recovery", "recovery_failed", "other")
# Counter names as the NVML source reports them (gpuhc/sources/nvml.py), by kind. Anything else
# is "other". Raw symbol errors are corrected by FEC and count in the thousands on healthy
# NVLink5 links, so by default they are not judged (``ignore_counters``).
_KIND_OF = {
    "crc": "crc", "crc_flit": "crc", "crc_data": "crc",
    "replay": "replay",
    "recovery": "recovery",
    "link_recovery_failed": "recovery_failed",
}


# The stages that read a slice of the links per run (see the module docstring for why not the
# epilog and the bootstrap). The rule lives here, beside the reason for it; the check's
# source_needs (dl_plan) gives the runner the slice before the read.
ROTATING_STAGES = ("passive", "prolog")
POINTER = "dl_next"  # state key: GPU index -> the slice its next rotating read takes
WARNED = "warned"  # state key: "<gpu>/<link>/<kind>" -> when that link's growth warned
# The evidence class of a FAIL for growth that stayed below the FAIL rate (the result's
# ``evidence``; what it buys: gpuhc/catalog/evidence.py)
PERSISTENT_CLASS = NVLINK_PERSISTENT


def counter_kind(name: str) -> str:
    return _KIND_OF.get(name, "other")


def dl_plan(stage: str, thresholds: dict[str, Any], prev: Any) -> tuple[int, dict[int, int]]:
    """(rotation, GPU index -> slice) for this run's read of the DL counters, from the check's
    thresholds (defaults and config) and its state; (1, {}) reads every link."""
    rotation = thresholds.get("dl_rotation", 1) if stage in ROTATING_STAGES else 1
    if not _is_rotation(rotation) or rotation == 1:
        return 1, {}
    return rotation, _pointers(prev, rotation)


def _is_rotation(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_DL_ROTATION


def _pointers(prev: Any, rotation: int) -> dict[int, int]:
    """The usable part of the remembered pointers: a damaged or out-of-range one starts at 0."""
    stored = prev.get(POINTER) if isinstance(prev, dict) else None
    if not isinstance(stored, dict):
        return {}
    return {int(k): v for k, v in stored.items()
            if isinstance(k, str) and k.isdigit() and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < rotation}


def _advance(nvml: NvmlReading, prev: dict[str, Any], gpus: list[GpuReading], full: bool) -> dict[str, int]:
    """The pointers to store: each GPU read in a slice moves to the next one; the others keep
    theirs (a full run forgets GPUs no longer there)."""
    rotation = nvml.dl_rotation
    here = {g.index for g in nvml.gpus}
    stored = prev.get(POINTER)
    kept = {k: v for k, v in stored.items() if isinstance(k, str) and (not full or (k.isdigit() and int(k) in here))} \
        if isinstance(stored, dict) else {}
    for gpu in gpus:
        if rotation > 1 and gpu.index in nvml.dl_phases:
            kept[str(gpu.index)] = (nvml.dl_phases[gpu.index] + 1) % rotation
    return kept


def _carry_over(prev: dict[str, Any], state: dict[str, Any], gpus: list[GpuReading]) -> None:
    """Counters of these GPUs this run did not read (another slice of the rotation) keep their
    last reading, so the next reading is judged against it, never taken for a first sight."""
    owners = {gpu.uuid or gpu.subject for gpu in gpus}
    for key, value in prev.items():
        if key not in state and key.count("/") >= 2 and key.rsplit("/", 2)[0] in owners:
            state[key] = value


def _expected_active(gpu: GpuReading, ctx: Context) -> int | None:
    """This GPU's link count at commissioning (baseline), else the model's (profile)."""
    gpus = (ctx.baseline or {}).get("gpus")
    if isinstance(gpus, dict):
        for pci, info in gpus.items():
            if norm_pci(pci) == norm_pci(gpu.pci_bus_id) and isinstance(info, dict):
                if isinstance(info.get("nvlink_active"), int):
                    return info["nvlink_active"]
    expected = ctx.t("expected_active")
    return expected if isinstance(expected, int) else None


def _count_finding(gpu: GpuReading, ctx: Context) -> Result | None:
    known = [s for s in gpu.nvlinks if s.active is not None]
    if not known:
        return None
    active = sum(1 for s in known if s.active)
    expected = _expected_active(gpu, ctx)
    if expected is None or active >= expected:
        return None
    down = ", ".join(str(s.link) for s in known if not s.active)
    detail = f" (down: {down})" if down else ""
    return result(ID, Status.FAIL, f"{gpu.subject} {active}/{expected} NVLinks active{detail}",
                  gpu.subject, value=active, threshold=expected, action=Action.DRAIN_REBOOT)


def _owner(gpu: GpuReading) -> str:
    return gpu.uuid or gpu.subject  # no UUID read: fall back to the index


def _growth(gpu: GpuReading, prev: dict[str, Any], state: dict[str, Any], ignore: set[str],
            reset: set[int]) -> dict[str, dict[int, int]]:
    """Per kind, per link: how much the counters read in this run grew since their last
    reading. Updates ``state``; adds to ``reset`` the links with a counter that went down."""
    grown: dict[str, dict[int, int]] = {k: {} for k in KINDS}
    for link in gpu.nvlinks:
        for name, value in link.errors.items():
            if value is None or name in ignore:
                continue
            key = f"{_owner(gpu)}/{link.link}/{name}"
            state[key] = value
            before = prev.get(key)
            if isinstance(before, int) and value < before:
                reset.add(link.link)
            if not isinstance(before, int) or value < before:
                continue  # first sight, or the counter was reset: this run is the new baseline
            if value > before:
                per_link = grown[counter_kind(name)]
                per_link[link.link] = per_link.get(link.link, 0) + value - before
    return grown


def _growth_findings(gpu: GpuReading, grown: dict[str, dict[int, int]], ctx: Context, since: str) -> list[Result]:
    out: list[Result] = []
    for kind in KINDS:
        per_link = grown[kind]
        if not per_link:
            continue
        warn = ctx.t(f"{kind}_warn", 0) or 0
        fail = ctx.t(f"{kind}_fail", 0) or 0
        worst = max(per_link.values())
        if fail and worst >= fail:
            status, limit, action = Status.FAIL, fail, Action.DRAIN_TICKET
        elif warn and worst >= warn:
            status, limit, action = Status.WARN, warn, Action.NONE
        else:
            continue
        links = sorted(link for link, d in per_link.items() if d >= limit)
        where = "link" if len(links) == 1 else "links"
        out.append(result(
            ID, status, f"{gpu.subject} NVLink {kind} errors +{worst} since {since} ({where} {', '.join(map(str, links))})",
            gpu.subject, value={str(k): v for k, v in sorted(per_link.items())}, threshold=limit, action=action,
        ))
    return out


def _stored_links(stored: dict[str, Any], owner: str, kind: str) -> set[int]:
    """The links of this GPU with a remembered history of this kind."""
    links = set()
    for key in stored:
        head, _, tail = key.rpartition("/")
        gpu, _, link = head.rpartition("/")
        if gpu == owner and tail == kind and link.isascii() and link.isdigit():
            links.add(int(link))
    return links


def _persistent(gpu: GpuReading, grown: dict[str, dict[int, int]], reset: set[int], stored: dict[str, Any],
                kept: dict[str, list[float]], ctx: Context, now: float) -> list[Result]:
    """FAILs for links whose growth warned in ``persist_hours`` distinct hours of the window;
    this run's warnings join the remembered ones in ``kept``."""
    hours, window = ctx.t("persist_hours", 0), ctx.t("persist_window_h", 6)
    out: list[Result] = []
    for kind in KINDS:
        warn, fail = ctx.t(f"{kind}_warn", 0) or 0, ctx.t(f"{kind}_fail", 0) or 0
        if not (hours and warn and fail):
            continue  # the rule is off, or this kind never warns or never fails ("below FAIL": none)
        warned = {link for link, d in grown[kind].items() if d >= warn}
        for link in sorted(warned | _stored_links(stored, _owner(gpu), kind)):
            key = f"{_owner(gpu)}/{link}/{kind}"
            times = remember(None if link in reset else stored.get(key), [now] if link in warned else [], now, window)
            if times:
                kept[key] = times
            h = held(times, hours)
            if h is None:
                continue
            out.append(result(
                ID, Status.FAIL, f"{gpu.subject} link {link} {kind} errors growing {span_text(h.span_s)} "
                f"(WARN in {h.hours} separate hours of the last {window:g} h, below the FAIL rate)",
                gpu.subject, value={"link": link, "hours": h.hours, "first": h.first, "last": h.last},
                threshold={"hours": hours, "window_h": window}, action=Action.DRAIN_TICKET, evidence=PERSISTENT_CLASS,
            ))
    return out


def acknowledge(state: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The state after an admin's resume or a retest: the links' warnings are forgiven (their
    evidence builds again from here); the counters' last readings stay."""
    return {k: v for k, v in state.items() if k != WARNED} if isinstance(state, dict) else {}


def _clean(gpu: GpuReading, ctx: Context) -> Result:
    if all(s.active is None for s in gpu.nvlinks):
        return na(ID, f"{gpu.subject} NVLink state not supported", gpu.subject)
    active = sum(1 for s in gpu.nvlinks if s.active)
    return result(ID, Status.PASS, f"{gpu.subject} {active} NVLinks active, no error growth",
                  gpu.subject, value=active, threshold=_expected_active(gpu, ctx))


def _plan(snapshot: Snapshot, ctx: Context, gpus: list[GpuReading]) -> GpuJudge:
    prev = ctx.prev or {}
    # A run over a subset of GPUs (prolog: the job's GPUs) keeps the others' baselines; a full
    # run rewrites the state, so counters of GPUs that were swapped out do not pile up.
    state: dict[str, Any] = dict(prev) if ctx.gpus is not None else {}
    ignore = set(ctx.t("ignore_counters", []) or [])
    # With a rotation, a DL counter's last reading may be runs ago: say so in the message.
    since = "last run" if snapshot.nvml.dl_rotation <= 1 else "the link's last reading"
    stored = prev.get(WARNED) if isinstance(prev.get(WARNED), dict) else {}
    kept: dict[str, list[float]] = {}

    def findings(gpu: GpuReading) -> list[Result]:
        count = _count_finding(gpu, ctx)
        reset: set[int] = set()
        grown = _growth(gpu, prev, state, ignore, reset)
        return ([count] if count else []) + _growth_findings(gpu, grown, ctx, since) + \
            _persistent(gpu, grown, reset, stored, kept, ctx, snapshot.time)

    def finish() -> dict[str, Any]:
        if ctx.gpus is None:
            _carry_over(prev, state, gpus)
        pointers = _advance(snapshot.nvml, prev, gpus, full=ctx.gpus is None)
        if pointers:
            state[POINTER] = pointers
        # A run over some GPUs keeps the others' histories; a full run keeps only what it judged.
        judged = {_owner(g) for g in gpus}
        warned = {k: v for k, v in stored.items() if k.rpartition("/")[0].rpartition("/")[0] not in judged} \
            if ctx.gpus is not None else {}
        warned.update(kept)
        state.pop(WARNED, None)
        if warned:
            state[WARNED] = warned
        return state

    return GpuJudge(unsupported=lambda gpu: None if gpu.nvlinks else "no NVLink", findings=findings,
                    clean=lambda gpu: _clean(gpu, ctx), state=finish)


def _validate(t: dict[str, Any]) -> list[str]:
    value = t.get("dl_rotation")
    if not _is_rotation(value):
        return [f"dl_rotation: must be a whole number from 1 (every link every run) to {MAX_DL_ROTATION}, got {value!r}"]
    return setting_errors(t, "persist_hours", "persist_window_h")


CHECKS = [
    per_gpu_check(
        ID, _plan,
        stages=("passive", "prolog", "epilog", "bootstrap"),
        defaults={
            "expected_active": None,  # the profile knows the model's link count
            "crc_warn": 100, "crc_fail": 10000,
            "replay_warn": 100, "replay_fail": 10000,
            "recovery_warn": 1, "recovery_fail": 5,
            "recovery_failed_warn": 0, "recovery_failed_fail": 1,
            "other_warn": 100, "other_fail": 0,
            "ignore_counters": ["symbol_errors"],
            # passive and prolog read the DL counters of 1/dl_rotation of the links per run
            "dl_rotation": 3,
            # growth at the WARN rate in this many distinct clock hours of the window: FAIL
            # (0: off). A burst touches at most 2 hours; 4 of 6 is a link that keeps degrading.
            "persist_hours": 4, "persist_window_h": 6,
        },
        doc="active NVLink count vs profile/baseline; per-link error counter growth between readings"
            " (DL counters: a 1/dl_rotation slice of the links per passive or prolog run)",
        validate=_validate,
        source_needs=lambda r: SourceNeeds(dl_slice=dl_plan(r.stage, r.thresholds, r.prev)),
        acknowledge=acknowledge,
    )
]
