"""host: what a job needs of the node besides its GPUs (docs/checks.md, "host").

- CPUs online and memory size against the baseline (``gpuhc baseline capture`` records both):
  fewer CPUs than captured (one taken offline, a socket lost) FAILs, drain + ticket; memory more
  than ``memory_loss_pct`` below the captured size (a DIMM that dropped out at boot) FAILs the
  same way. Without a baseline these are n/a: no node's own numbers to hold it to.
- mounts the site names (``mounts``, e.g. the shared file system and the dataset mount): each
  must be mounted and answer ``stat -f`` within ``mount_timeout_s`` (the probe runs in a child
  process, gpuhc/sources/host.py). Not mounted or not answering FAILs with drain + ticket once
  held over runs (evidence class ``mount``, gpuhc/catalog/evidence.py; a WARN until then): a hung NFS
  mount hangs every job that touches it, but a server's failover is over in minutes, and a
  reboot that clears the hung processes leaves the server, the fault, as it was.
- free space on ``scratch`` (local scratch; empty: off): WARN below ``scratch_warn_pct`` free, FAIL (drain +
  ticket: a person must clean it) below ``scratch_fail_pct``, once held (class ``scratch``).
- processes stuck in uninterruptible sleep (state D, no progress between runs) in the GPU driver,
  a file system or FUSE: WARN after ``dstate_warn_s``; FAIL after ``dstate_fail_s`` only in
  the GPU driver holding a GPU (drain + reboot), or on a file system whose site mount fails too
  (the mount's evidence: drain + ticket); FUSE never (gpuhc/checks/host_stuck.py). Such a process cannot be killed, so Slurm
  cannot end its job either.
Each part is off when its setting is empty or null (mounts, scratch, the dstate bounds).
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks import host_stuck
from gpuhc.checks.base import HOST, Check, CheckOutput, Context, na, reads_host, result
from gpuhc.catalog.evidence import by_id
from gpuhc.model.result import Action, Status
from gpuhc.model.snapshot import Snapshot

ID = "host"


def judge(snapshot: Snapshot, ctx: Context) -> CheckOutput:
    h = snapshot.host
    if h is None:
        return CheckOutput([na(ID, "the host was not read (a recording without its host section)")])
    out = _baseline(h, ctx) + _mounts(h, ctx) + _scratch(h, ctx)
    found, state = _dstate(h, snapshot.time, ctx)
    out += found
    if not out:
        out.append(result(ID, Status.PASS, _summary(h)))
    out.sort(key=lambda r: -r.status.rank)
    return CheckOutput(out, state=state)


def _summary(h) -> str:
    parts = []
    if h.cpus_online is not None:
        parts.append(f"{h.cpus_online} CPUs online")
    if h.mem_total_kib is not None:
        parts.append(f"{h.mem_total_kib / 1048576:.0f} GiB memory")
    if h.mounts:
        parts.append(f"{len(h.mounts)} mount(s) answering")
    return "host as expected" + (f": {', '.join(parts)}" if parts else "")


def _baseline(h, ctx: Context) -> list:
    base = (ctx.baseline or {}).get("host")
    if not isinstance(base, dict):
        return []
    out = []
    want = base.get("cpus_online")
    if isinstance(want, int) and h.cpus_online is not None and h.cpus_online < want:
        out.append(result(ID, Status.FAIL, f"{h.cpus_online} CPUs online < {want} in the baseline",
                          value=h.cpus_online, threshold=want, action=Action.DRAIN_TICKET))
    mem = base.get("mem_total_kib")
    pct = float(ctx.t("memory_loss_pct", 2.0))
    if isinstance(mem, int) and mem > 0 and h.mem_total_kib is not None and h.mem_total_kib < mem * (1 - pct / 100):
        out.append(result(ID, Status.FAIL, f"memory {h.mem_total_kib / 1048576:.1f} GiB < {mem / 1048576:.1f} GiB in the "
                          f"baseline (more than {pct:g}% gone: a DIMM lost?)", value=h.mem_total_kib, threshold=mem,
                          action=Action.DRAIN_TICKET))
    return out


def _mounts(h, ctx: Context) -> list:
    out = []
    for path, m in sorted((h.mounts or {}).items()):
        if not isinstance(m, dict) or m.get("ok"):
            continue
        out.append(result(ID, Status.FAIL, f"mount {path}: {m.get('error') or 'not answering'}", path,
                          value=m, threshold=ctx.t("mount_timeout_s"), action=by_id("mount").act, evidence="mount"))
    return out


def _scratch(h, ctx: Context) -> list:
    s = h.scratch
    if not isinstance(s, dict):
        return []
    path = s.get("path") or "scratch"
    if s.get("error"):
        return [result(ID, Status.WARN, f"scratch {path}: {s['error']}", path)]
    free, total = s.get("free_bytes"), s.get("total_bytes")
    if not isinstance(free, int) or not isinstance(total, int) or total <= 0:
        return []
    pct = 100.0 * free / total
    text = f"scratch {path}: {pct:.1f}% free ({free / 2**30:.1f} GiB)"
    fail, warn = ctx.t("scratch_fail_pct"), ctx.t("scratch_warn_pct")
    if fail is not None and pct < float(fail):
        return [result(ID, Status.FAIL, f"{text} < {fail}%", path, value=pct, threshold=fail, action=Action.DRAIN_TICKET,
                       evidence="scratch")]
    if warn is not None and pct < float(warn):
        return [result(ID, Status.WARN, f"{text} < {warn}%", path, value=pct, threshold=warn)]
    return []


def _dstate(h, now: float, ctx: Context) -> tuple[list, dict[str, Any]]:
    if h.dstate is None:
        return [], dict(ctx.prev or {})
    return host_stuck.judge_stuck(ID, h, now, ctx)


def _validate(t: dict[str, Any]) -> list[str]:
    out = []
    mounts = t.get("mounts")
    if mounts is not None and (not isinstance(mounts, list) or not all(isinstance(m, str) and m.startswith("/")
                                                                      for m in mounts)):
        out.append(f"mounts: want a list of absolute paths, got {mounts!r}")
    scratch = t.get("scratch")
    if scratch and not (isinstance(scratch, str) and scratch.startswith("/")):
        out.append(f"scratch: want an absolute path, or empty (off), got {scratch!r}")
    out += host_stuck.validate(t)
    for key in ("scratch_warn_pct", "scratch_fail_pct", "dstate_warn_s", "dstate_fail_s", "memory_loss_pct",
                "mount_timeout_s"):
        v = t.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            out.append(f"{key}: want a number >= 0 or null (off), got {v!r}")
    return out


CHECKS = [
    Check(
        id=ID,
        needs=(HOST,),
        source_needs=reads_host,  # mounts, scratch, stuck processes: only those asked for
        judge=judge,
        stages=("passive", "epilog", "bootstrap"),
        timeout_s=10.0,
        defaults={
            "cpus": True,
            "memory": True,
            "memory_loss_pct": 2.0,  # chosen here: a DIMM is 1/8 to 1/32 of a node's memory; firmware reservations move by less
            "mounts": [],  # the site's to name: e.g. ["/home", "/datasets"]
            "mount_timeout_s": 5.0,  # chosen here: a healthy NFS answers stat -f in milliseconds
            "scratch": "",  # off; e.g. "/tmp" or "/local/scratch"
            "scratch_warn_pct": 10.0,
            "scratch_fail_pct": 2.0,
            **host_stuck.DEFAULTS,  # stuck processes: wait channels by class, warn and fail spans
        },
        doc="CPUs online and memory against the baseline, site-named mounts answering, local scratch free space, "
            "processes stuck in uninterruptible sleep on the GPU or a file system.",
        validate=_validate,
    )
]
