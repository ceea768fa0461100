"""host's stuck processes (docs/checks.md, "host"): a process counts as stuck only while it
stays in uninterruptible sleep with no progress between two runs, and what that buys depends on
where it waits. Pure: the reading (gpuhc/sources/host_stuck.py) and the last run's samples in,
the findings and the samples to keep out.

- No progress: the main thread's CPU time and context switches the same as at the last run
  (a thread that woke at all switched). A process in a long NFS read sleeps and wakes between
  runs, so it is never stuck however often it is seen in state D; the time stuck counts from
  the first run that saw the sample it still shows. A sample that could not be read is no
  evidence of anything: never stuck.
- GPU driver (``dstate_gpu_wchan``), on a process that holds a GPU's device file: WARN after
  ``dstate_warn_s``, FAIL (drain + reboot: class ``stuck-process``) after ``dstate_fail_s``. Nothing short of a reboot
  wakes it, and Slurm cannot end its job. In the driver without a GPU file: WARN only.
- File system (``dstate_fs_wchan``: NFS, Lustre): WARN; FAIL only when a site-named mount of
  this run also fails its probe (a mount that is not FUSE): the file system is then the site's
  and down, not one process's slow server, and the finding is that mount's evidence (class
  ``mount``: drain + ticket, the server is the fault).
- FUSE (``dstate_fuse_wchan``): WARN, never a drain. Any user may mount one (fusermount ships
  with apptainer, enroot, squashfuse) and park a process behind a server that never answers.

Every other finding is of the evidence class ``stuck-process`` (gpuhc/catalog/evidence.py). Either class
never counts toward a lemon, and its FAIL drains only once held, acting as the table says.
"""

from __future__ import annotations

from typing import Any

from gpuhc.checks.base import Context, result
from gpuhc.catalog.evidence import by_id
from gpuhc.text.lazyre import LazyPattern
from gpuhc.model.result import Result, Status

EVIDENCE = "stuck-process"
FS_EVIDENCE = "mount"  # a file-system wait drains only with its mount down: the mount's evidence
MAX_KEPT = 256  # processes remembered between runs (the reader sends at most 64)
# Whole function-name prefixes (ending in "_") or whole names; docs/checks.md, "host", says where
# each comes from (the NVIDIA open kernel modules' source for the driver's).
DEFAULTS: dict[str, Any] = {
    # nvidia.ko's Linux layer (nv_*, nvidia_*) and its OS interface (os_*: the resource manager's
    # only way to sleep, os_acquire_mutex, os_acquire_rwlock_write...), nvidia-uvm.ko (uvm_*)
    "dstate_gpu_wchan": ["nv_", "nvidia_", "os_", "uvm_"],
    # NFS and its RPC layer; Lustre's RPC, lock and client modules
    "dstate_fs_wchan": ["nfs_", "nfs4_", "rpc_", "ptlrpc_", "ldlm_", "osc_", "mdc_"],
    # fs/fuse: a request waiting for its server's answer, and the rest of the module
    "dstate_fuse_wchan": ["fuse_", "request_wait_answer"],
    "dstate_warn_s": 120.0,  # chosen here: I/O waits of a healthy file system end in seconds
    "dstate_fail_s": 600.0,  # ten minutes without running: Slurm's own UnkillableStepTimeout is 60 s by default
}
_ENTRY = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_WHERE = {"gpu-driver": "the GPU driver", "file-system": "a file system", "fuse": "a FUSE mount"}


def judge_stuck(check_id: str, h, now: float, ctx: Context) -> tuple[list[Result], dict[str, Any]]:
    """The findings on ``h.dstate``, and the samples to keep (``{"dstate": {"pid/start": ...}}``)."""
    before = (ctx.prev or {}).get("dstate")
    before = before if isinstance(before, dict) else {}
    warn, fail = ctx.t("dstate_warn_s"), ctx.t("dstate_fail_s")
    down = [path for path, m in sorted((h.mounts or {}).items())
            if isinstance(m, dict) and not m.get("ok") and not _is_fuse(m.get("fstype"))]
    kept: dict[str, Any] = {}
    out = []
    for p in h.dstate[:MAX_KEPT]:
        if not isinstance(p, dict):
            continue
        key = f"{p.get('pid')}/{p.get('start')}"  # a reused pid has another start time
        sample = [p.get("cpu"), p.get("switches")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in sample):
            continue  # progress unknown: never stuck
        since = _since(before.get(key), sample, now)
        kept[key] = {"since": since, "sample": sample}
        finding = _finding(check_id, p, now - since, warn, fail, down)
        if finding is not None:
            out.append(finding)
    return out, {"dstate": kept}


def _since(prev: Any, sample: list, now: float) -> float:
    """When the sample it still shows was first seen; now if it made progress or is new."""
    if not isinstance(prev, dict) or prev.get("sample") != sample:
        return now
    t = prev.get("since")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t <= now:
        return now  # damaged, or from a clock that ran backwards
    return float(t)


def _finding(check_id: str, p: dict, stuck: float, warn: Any, fail: Any, down: list[str]) -> Result | None:
    wait = p.get("wait")
    may_drain, why = _may_drain(wait, p, down)
    failed = fail is not None and stuck >= float(fail)
    if not failed and (warn is None or stuck < float(warn)):
        return None
    where = _WHERE.get(wait, "an unknown wait")
    what = (f"process {p.get('pid')} ({p.get('comm')}) stuck in uninterruptible sleep in {p.get('wchan') or '?'} "
            f"({where}), no progress for {stuck:.0f}s{why}")
    value = {"stuck_s": round(stuck, 1), "wait": wait, "wchan": p.get("wchan"), "holds_gpu": p.get("holds_gpu")}
    subject = f"pid{p.get('pid')}"
    cls = FS_EVIDENCE if wait == "file-system" else EVIDENCE
    if failed and may_drain:
        return result(check_id, Status.FAIL, what, subject, value=value, threshold=fail, action=by_id(cls).act,
                      evidence=cls)
    return result(check_id, Status.WARN, what, subject, value=value, threshold=fail if failed else warn, evidence=cls)


def _may_drain(wait: Any, p: dict, down: list[str]) -> tuple[bool, str]:
    """Whether this wait may drain the node, and the words that say why or why not."""
    if wait == "gpu-driver":
        if p.get("holds_gpu") is True:
            return True, ", holding a GPU"
        return False, " (holds no GPU: not drained)" if p.get("holds_gpu") is False else " (its GPU files unreadable)"
    if wait == "file-system":
        if down:
            return True, f", and mount {down[0]} fails"
        return False, " (the site's mounts answer: not drained)"
    if wait == "fuse":
        return False, " (a mount any user can make: never drained)"
    return False, ""


def _is_fuse(fstype: Any) -> bool:
    return isinstance(fstype, str) and (fstype == "fuse" or fstype.startswith("fuse."))


def validate(t: dict[str, Any]) -> list[str]:
    out = []
    for key in ("dstate_gpu_wchan", "dstate_fs_wchan", "dstate_fuse_wchan"):
        v = t.get(key)
        if not isinstance(v, list) or not all(isinstance(e, str) and _ENTRY.fullmatch(e) and (
                not e.endswith("_") or len(e) >= 3) for e in v):
            out.append(f"{key}: want a list of kernel function names, or prefixes ending in '_' (at least 3 "
                       f"characters, e.g. 'nv_'), got {v!r}")
    return out
