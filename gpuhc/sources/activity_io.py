"""The scenario format's ``activity`` section: what the GPUs running jobs hold did.

A block of its own beside gpuhc/sources/snapshot_validate.py (its checks stand on that module's)
and snapshot_build.py; the scenario loader calls it. The shape::

    activity:
      unmapped_pids: 0                     # optional; also `available`, `error`
      gpus:
        - {index: 0, jobs: ["4242"], span_s: 19.8, gpu_util: [100, 100, 100], mem_util: [0, 0, 0],
           power_w: [131.2, 129.8], power_limit_w: 700, sm_clock_mhz: 1980, sm_activity: 18, via: cgroup,
           pids: [5120], rank: 3, host_state: S, host_cpu_total_s: 812.4, host_dt_s: 0.5, host_cpu_s: 0.0,
           host_read_bytes: 0, host_write_bytes: 0, owners: {"4242": [1000]}}
      job_nodes: {"4242": 1}                # optional: each job's node count, and its name
      job_names: {"4242": train-llm}

Fields are exactly :class:`gpuhc.model.activity.GpuActivity`'s. Sample lists are bounded
(``MAX_ACTIVITY_SAMPLES``), every number finite and >= 0, job ids digits: a scenario may come
from anyone, and a NaN would compare false with every threshold. ``owners`` (job -> the uids
owning its processes on the GPU) is optional: without it the Slurm side does not act on the job
(docs/security.md).
"""

from __future__ import annotations

import typing
from typing import Any, Callable

from gpuhc.text.limits import MAX_ACTIVITY_SAMPLES, MAX_GPUS, MAX_JOBS_PER_GPU
from gpuhc.model.activity import Activity, GpuActivity

_SERIES = ("gpu_util", "mem_util", "power_w")
_VIA = ("cgroup", "environ", "mixed")
_TABLES: dict[str, dict] = {}


def _tables() -> tuple[dict, dict]:
    from gpuhc.sources.snapshot_validate import field_types

    if not _TABLES:
        _TABLES["act"] = field_types(Activity)
        _TABLES["gpu"] = field_types(GpuActivity)
    return _TABLES["act"], _TABLES["gpu"]


def check_activity(value: Any, path: tuple, err: typing.Callable[[tuple, str], Exception]) -> None:
    from gpuhc.sources.snapshot_validate import check_fields, check_number, type_name

    act_table, gpu_table = _tables()

    def series(v: Any, p: tuple) -> None:
        if not isinstance(v, list):
            raise err(p, f"must be a list of numbers (samples, oldest first), got {type_name(v)}")
        if len(v) > MAX_ACTIVITY_SAMPLES:
            raise err(p, f"at most {MAX_ACTIVITY_SAMPLES} samples, got {len(v)}")
        for i, x in enumerate(v):
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                raise err(p + (i,), f"must be a number, got {x!r}")
            check_number(x, p + (i,), err)

    def jobs(v: Any, p: tuple) -> None:
        if not isinstance(v, list) or len(v) > MAX_JOBS_PER_GPU:
            raise err(p, f"must be a list of at most {MAX_JOBS_PER_GPU} job ids")
        for i, j in enumerate(v):
            if not isinstance(j, str) or not j.isdigit() or len(j) > 12:
                raise err(p + (i,), f"a job id is a string of digits, e.g. \"4242\", got {j!r}")

    def via(v: Any, p: tuple) -> None:
        if v not in _VIA:
            raise err(p, f"must be one of {', '.join(_VIA)}, got {v!r}")

    def pids(v: Any, p: tuple) -> None:
        if not isinstance(v, list) or len(v) > MAX_ACTIVITY_SAMPLES:
            raise err(p, f"must be a list of at most {MAX_ACTIVITY_SAMPLES} process ids")
        for i, x in enumerate(v):
            if not isinstance(x, int) or isinstance(x, bool) or not 0 < x < 1 << 32:
                raise err(p + (i,), f"a process id is a positive integer, got {x!r}")

    def owners(v: Any, p: tuple) -> None:
        from gpuhc.sources.job_activity import MAX_OWNERS

        if not isinstance(v, dict) or len(v) > MAX_JOBS_PER_GPU:
            raise err(p, f"must be a mapping of job id to the uids owning its processes, at most {MAX_JOBS_PER_GPU} jobs")
        for j, uids in v.items():
            if not isinstance(j, str) or not j.isdigit() or len(j) > 12:
                raise err(p + (j,), f"a job id is a string of digits, e.g. \"4242\", got {j!r}")
            if not isinstance(uids, list) or not 0 < len(uids) <= MAX_OWNERS:
                raise err(p + (j,), f"must be a list of 1 to {MAX_OWNERS} uids, got {uids!r}")
            for i, u in enumerate(uids):
                if not isinstance(u, int) or isinstance(u, bool) or not 0 <= u < 1 << 32:
                    raise err(p + (j, i), f"a uid is an integer from 0, got {u!r}")

    def host_state(v: Any, p: tuple) -> None:
        from gpuhc.sources.job_procs import STATES

        if v is not None and v not in STATES:
            raise err(p, f"must be one of {', '.join(STATES)} (a /proc/<pid>/stat state), got {v!r}")

    def job_map(kind: type, what: str) -> Callable[[Any, tuple], None]:
        def check(v: Any, p: tuple) -> None:
            if not isinstance(v, dict) or len(v) > MAX_GPUS * MAX_JOBS_PER_GPU:
                raise err(p, f"must be a mapping of job id to {what}")
            for j, x in v.items():
                if not isinstance(j, str) or not j.isdigit() or len(j) > 12:
                    raise err(p + (j,), f"a job id is a string of digits, e.g. \"4242\", got {j!r}")
                bad = isinstance(x, bool) or not isinstance(x, kind)
                if bad or (kind is int and not 0 < x < 1 << 24) or (kind is str and len(x) > 256):
                    raise err(p + (j,), f"must be {what}, got {x!r}")
        return check

    def gpus(v: Any, p: tuple) -> None:
        if not isinstance(v, list) or len(v) > MAX_GPUS:
            raise err(p, f"activity gpus must be a list of at most {MAX_GPUS} {{index, jobs, ...}}")
        seen = set()
        for i, g in enumerate(v):
            extra = {"jobs": jobs, "via": via, "pids": pids, "host_state": host_state, "owners": owners, **{k: series for k in _SERIES}}
            check_fields(g, gpu_table, p + (i,), err, "activity GPU", extra)
            if g.get("index") is None:
                raise err(p + (i,), "each activity GPU needs its `index`")
            key = (g["index"], g.get("instance"))  # a MIG GPU: once per slice
            if key in seen:
                raise err(p + (i, "index"), f"GPU {g['index']} is listed twice")
            seen.add(key)

    check_fields(value, act_table, path, err, "activity", {
        "gpus": gpus, "job_nodes": job_map(int, "a node count (1 or more)"),
        "job_names": job_map(str, "a job name of at most 256 characters")})


def activity_from_dict(d: dict[str, Any]) -> Activity:
    """A validated ``activity`` mapping -> Activity."""
    out = []
    for g in d.get("gpus") or []:
        kw = dict(g)
        for k in _SERIES:
            kw[k] = [float(x) for x in kw.get(k) or []]
        for k in ("span_s",):
            kw[k] = float(kw.get(k) or 0.0)
        for k in ("power_limit_w", "sm_clock_mhz", "sm_activity", "sm_occupancy", "host_cpu_total_s", "host_dt_s", "host_cpu_s",
                  "host_read_bytes", "host_write_bytes"):
            kw[k] = None if kw.get(k) is None else float(kw[k])
        kw["jobs"] = list(kw.get("jobs") or [])
        kw["pids"] = list(kw.get("pids") or [])
        kw["owners"] = {str(j): sorted(set(u)) for j, u in (kw.get("owners") or {}).items()}
        out.append(GpuActivity(**kw))
    return Activity(available=d.get("available", True), error=d.get("error"),
                    gpus=sorted(out, key=lambda g: g.index), unmapped_pids=int(d.get("unmapped_pids") or 0),
                    job_nodes=dict(d.get("job_nodes") or {}), job_names=dict(d.get("job_names") or {}))
