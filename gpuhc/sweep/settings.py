"""The ``sweep`` section of gpuhc.yaml: who gets probed, how jobs are submitted, what passes.

Only the submit/analyze side (an operator's cron job on an admin host) reads this section. The
job side (``gpuhc sweep run``) gets everything it needs on its command line, written there by
``submit``: the compute nodes may not be able to read the admin's config at all.

Thresholds are a mapping ``{backend: {shape: {...}}}`` where a shape is
``<nodes>x<ranks per node>`` (``2x8``), optionally with ``-cross`` for groups that span leaf
switches, or ``default``, or a GPU profile name (``h100-sxm``), or both (``a100-sxm/2x8``).
Lookup goes most specific first: ``a100-sxm/2x8-cross``, ``a100-sxm/2x8``, ``2x8-cross``,
``2x8``, the profile, ``default``. The ``nccl`` defaults are multi-node H100
reference numbers (docs/facts.md, "NCCL"); each GPU profile's ``sweep`` section
(gpuhc/data/profiles/<model>.yaml) lays its own over them, and a profile without one gets
generic's, which has no absolute bounds (other models are judged against their fleet); the
``mpi`` backend
(host buffers, CPU test clusters) has no absolute numbers at all and judges relative to the
fleet only, with looser factors, because CPU timings on shared cores are noisy.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuhc.errors import ConfigError
from gpuhc.text.schema import Key, did_you_mean
from gpuhc.sweep.stats import size_ladder

GIB = 1 << 30
MIB = 1 << 20

# The job-side settings' ranges: the one place they are set. The config schema below and the
# options of `gpuhc sweep run` (gpuhc/cli/sweep_cmd.py) are both built from it, so a value the
# config accepts is one every probe job accepts. (min, max); None: unbounded.
MAX_LATENCY_ITERS = 1000  # the nccl backend records two CUDA events per timed iteration, made up front
RUN_LIMITS: dict[str, tuple[Any, Any]] = {
    "min_bytes": (4, None),
    "max_bytes": (4, None),
    "factor": (2, 16),
    "warmup": (0, 1000),
    "iters": (1, 100000),
    "latency_iters": (1, MAX_LATENCY_ITERS),
    "latency_max_bytes": (0, None),
    "timeout_s": (0.1, 3600.0),
}


def _run_key(kind: type, name: str, default: Any, help_text: str = "") -> Key:
    lo, hi = RUN_LIMITS[name]
    return Key(kind, default, help_text, min=lo, max=hi)


# Keys of one threshold block, with their defaults for the nccl backend.
THRESHOLD_KEYS: dict[str, Any] = {
    "small_bytes": 1024,  # payload whose p95 latency is judged (LL/LL128 protocols)
    "small_p95_us": 250.0,  # absolute ceiling, None: fleet-relative only
    "medium_bytes": 16 * MIB,  # payload whose busbw is judged against the fleet (algorithm switches)
    "medium_busbw_gbs": None,  # absolute floor at medium_bytes, None: fleet only
    "large_busbw_gbs": 350.0,  # absolute floor at the largest size measured
    "large_min_bytes": GIB,  # the absolute large floor applies only when the sweep reached this size
    "fleet_busbw_fraction": 0.7,  # fail below this fraction of the fleet median (same shape)
    "fleet_latency_factor": 2.0,  # fail above this multiple of the fleet median p95
    "fleet_min_groups": 3,  # fleet comparisons need at least this many other groups
}

DEFAULT_THRESHOLDS: dict[str, dict[str, dict[str, Any]]] = {
    "nccl": {"default": dict(THRESHOLD_KEYS)},
    "mpi": {
        "default": {
            **THRESHOLD_KEYS,
            "small_p95_us": None,
            "medium_bytes": 64 * 1024,
            "large_busbw_gbs": None,
            "fleet_busbw_fraction": 0.3,
            "fleet_latency_factor": 5.0,
            "fleet_min_groups": 1,
        }
    },
}



def profile_thresholds(profile: str) -> dict[str, Any]:
    """The nccl bounds a GPU profile's file sets (its ``sweep`` section), laid over the nccl
    defaults when the group's results name the GPU model (every rank records its NVML name). A
    profile without a section, or an unknown name, gets generic's: no absolute bounds."""
    from gpuhc.config.profiles import GENERIC, profile_named

    prof = profile_named(profile)
    block = prof.sweep if prof.sweep is not None else profile_named(GENERIC).sweep or {}
    unknown = sorted(set(block) - set(THRESHOLD_KEYS))
    if unknown:
        raise ConfigError(f"unknown sweep threshold (known: {', '.join(sorted(THRESHOLD_KEYS))})", prof.path,
                          None, f"sweep.{unknown[0]}")
    return dict(block)


SCHEMA: dict[str, Any] = {
    "partitions": Key(list, [], "partitions whose IDLE nodes are probed (empty: all)", item=str),
    "group_size": Key(int, 2, "nodes per probe job (2, 4, 8, ...)", min=2, max=256),
    "ranks_per_node": Key(int, 8, "ranks per node: one per GPU", min=1, max=64),
    "backend": Key(str, "nccl", "nccl (CuPy NCCL on GPUs) or mpi (host buffers, no GPU)", choices=("nccl", "mpi")),
    "period_h": Key(float, 24.0, "probe every node at least this often; nodes probed more recently wait", min=0.0),
    "max_nodes": Key(int, 0, "nodes per sweep at most (0: every due idle node)", min=0),
    "cross_switch_fraction": Key(float, 0.25, "share of groups that span leaf switches (topology/tree only)", min=0.0, max=1.0),
    "results_dir": Key(str, None, "where jobs write results: must be shared and writable by the job user; "
                                  "default <state_dir>/sweep/results", nullable=True),
    "history_window": Key(int, 200, "past groups per shape kept for fleet comparisons", min=1, max=100000),
    "timeout_s": _run_key(float, "timeout_s", 120.0, "a collective that takes longer is declared hung"),
    "job": {
        "name_prefix": Key(str, "gpuhc-sweep", "job names start with this; squeue finds running sweeps by it"),
        "time": Key(str, "00:15:00", "sbatch --time"),
        "deadline_h": Key(float, 2.0, "sbatch --deadline=now+N: Slurm removes a probe job that cannot end within this "
                                      "many hours of its submission instead of letting it pend (0: no deadline)",
                          min=0.0, max=720.0),
        "partition": Key(str, None, "sbatch --partition (default: the node's partition from sinfo)", nullable=True),
        "account": Key(str, None, "sbatch --account", nullable=True),
        "qos": Key(str, None, "sbatch --qos", nullable=True),
        "priority": Key(int, None, "sbatch --priority (needs operator rights)", nullable=True, min=0),
        "gpus_per_node": Key(int, None, "GPUs requested per node (sbatch --gres=gpu:N); null: ranks_per_node for the "
                                        "nccl backend, none for mpi; 0: no request", nullable=True, min=0, max=64),
        "extra_args": Key(list, [], "more sbatch arguments, one per item", item=str),
        "command": Key(str, "gpuhc", "how the job starts gpuhc on the nodes (split like a shell would, never run by one)"),
        "template": Key(str, None, "sbatch script template (string.Template); default: built in", nullable=True),
    },
    "launcher": {
        "kind": Key(str, "srun", "srun or mpiexec", choices=("srun", "mpiexec")),
        "flavor": Key(str, "hydra", "mpiexec's MPI: hydra (MPICH, Intel MPI, MVAPICH: -ppn N) or openmpi "
                                    "(--map-by ppr:N:node)", choices=("hydra", "openmpi")),
        "mpi": Key(str, "pmi2", "srun --mpi= plugin (pmi2, pmix, ...)"),
        "args": Key(list, [], "more launcher arguments", item=str),
    },
    "sizes": {
        "min_bytes": _run_key(int, "min_bytes", 8, "smallest payload"),
        "max_bytes": _run_key(int, "max_bytes", 2 * GIB, "largest payload"),
        "factor": _run_key(int, "factor", 2, "ladder step"),
    },
    "iters": {
        "warmup": _run_key(int, "warmup", 5, "untimed collectives before each size"),
        "iters": _run_key(int, "iters", 20, "timed iterations per bandwidth size"),
        "latency_iters": _run_key(int, "latency_iters", 100, "timed iterations per latency size (each timed alone)"),
        "latency_max_bytes": _run_key(int, "latency_max_bytes", MIB, "sizes up to this get per-iteration timing and percentiles"),
    },
    "localize": {
        "max_rounds": Key(int, 4, "rounds per sweep, the first probe included", min=1, max=20),
        "auto_submit": Key(bool, True, "analyze submits follow-up rounds by itself"),
        "strategy": Key(str, "auto", "isolate (suspect + known-good nodes), bisect, or auto", choices=("auto", "isolate", "bisect")),
    },
    # Empty by default: the built-in numbers (DEFAULT_THRESHOLDS, the profiles' sweep sections) are merged
    # by thresholds_for beneath whatever the site writes here. Were they the default value here,
    # a config without `thresholds` would carry the H100 numbers as site settings, above the
    # per-model layer.
    "thresholds": Key(dict, {}, "{backend: {default|<gpu profile>|<shape>: {threshold: value}}}; empty: built-in "
                                "numbers (nccl: H100/H200 absolute bounds, other models fleet-only)"),
}


def thresholds_for(table: dict[str, Any], backend: str, shape: str, span: str = "",
                   profile: str | None = None) -> dict[str, Any]:
    """The merged threshold block for one group: the backend's built-in defaults, the built-in
    numbers of the group's GPU profile (nccl only; a profile without numbers of its own counts
    as ``generic``), then from the config, most specific last: ``default``, the profile
    (``a100-sxm``), the shape (``2x8``), the span-qualified shape (``2x8-cross``), the profile's
    shape (``a100-sxm/2x8``), the profile's span-qualified shape (``a100-sxm/2x8-cross``).
    ``profile`` None: the model is not considered (no profile layer at all)."""
    merged = dict(DEFAULT_THRESHOLDS.get(backend, DEFAULT_THRESHOLDS["nccl"])["default"])
    if profile is not None and backend == "nccl":
        merged.update(profile_thresholds(profile))
    per_backend = table.get(backend) or {}
    shapes = [shape, f"{shape}-{span}" if span else None]
    keys = ["default", profile, *shapes] + ([f"{profile}/{x}" if x else None for x in shapes] if profile else [])
    for key in keys:
        if key and isinstance(per_backend.get(key), dict):
            merged.update(per_backend[key])
    return merged


def gpu_profile(result: dict | None, backend: str) -> str | None:
    """The GPU profile a group's results point at (the NVML names its ranks recorded), for the
    nccl backend; ``generic`` when no rank named a known model; None for ``mpi`` (no GPU)."""
    if backend != "nccl":
        return None
    from gpuhc.config.profiles import select_profile_for

    ranks = (result or {}).get("ranks") or []
    names = [r["gpu"] for r in ranks if isinstance(r, dict) and isinstance(r.get("gpu"), str)]
    return select_profile_for(names).name


def validate(section: Any, file: str | None = None, lines: dict | None = None, path: tuple = ("sweep",)) -> None:
    """Everything about a ``sweep`` section that the generic schema check cannot see; raises
    :class:`ConfigError` naming file, line and key.

    For the config loader (``gpuhc config validate``, every ``load_config``), so that a bad
    section is refused when the config is read, not first by ``gpuhc sweep submit`` on the
    admin host. ``section`` is what the file gives (partial: the defaults fill the rest for
    the checks that compare keys); ``path`` is where it sits in the file: ``("sweep",)``, or
    ``("hosts", 2, "sweep")`` for a per-host override. Pure: reads no file, runs nothing, so it
    is safe on every node that loads the config.
    """
    if section is None:
        return
    if not isinstance(section, dict):
        raise ConfigError("must be a mapping", file, _line(lines, path, file), _dotted(path))
    if "thresholds" in section:
        validate_thresholds(section["thresholds"], file, lines, path + ("thresholds",))
    merged = _merged(section)
    sizes = merged["sizes"]
    try:
        size_ladder(int(sizes["min_bytes"]), int(sizes["max_bytes"]), int(sizes["factor"]))
    except (TypeError, ValueError):
        where = path + ("sizes", "min_bytes" if "min_bytes" in (section.get("sizes") or {}) else "max_bytes")
        raise ConfigError(f"min_bytes {sizes['min_bytes']} is above max_bytes {sizes['max_bytes']}", file,
                          _line(lines, where, file), _dotted(where)) from None
    job = merged["job"]
    limit = slurm_minutes(job.get("time"))
    if limit is None:
        where = path + ("job", "time")
        raise ConfigError(f"not a Slurm time limit: {job.get('time')!r} (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                          "D-HH:MM:SS)", file, _line(lines, where, file), _dotted(where))
    deadline_h = job.get("deadline_h") or 0
    if deadline_h and limit != float("inf") and deadline_h * 60 <= limit:
        where = path + ("job", "deadline_h" if "deadline_h" in (section.get("job") or {}) else "time")
        raise ConfigError(f"deadline_h {deadline_h:g} h is not longer than the time limit {job['time']}: "
                          "Slurm would remove every probe job", file, _line(lines, where, file), _dotted(where))
    command = merged["job"].get("command")
    if isinstance(command, str):
        import shlex  # here: every run's config check imports this module, few configs set a command

        try:
            if not shlex.split(command):
                raise ValueError("empty")
        except ValueError as e:
            where = path + ("job", "command")
            raise ConfigError(f"cannot split into a command line: {e}", file, _line(lines, where, file),
                              _dotted(where)) from None


def slurm_minutes(text: Any) -> float | None:
    """A Slurm time limit (``--time``) in minutes; inf for UNLIMITED; None when unreadable."""
    if not isinstance(text, str) or not text.strip():
        return None
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE"):
        return float("inf")
    days, dash, rest = t.rpartition("-")
    if dash and not days:
        return None
    try:
        d = int(days) if days else 0
        parts = [int(p) for p in rest.split(":")]
    except ValueError:
        return None
    if d < 0 or any(p < 0 for p in parts) or not 1 <= len(parts) <= 3:
        return None
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # HH:MM:SS
        h, m, sec = parts
    else:  # minutes, or minutes:seconds
        h, m, sec = 0, parts[0], parts[1] if len(parts) == 2 else 0
    return d * 1440 + h * 60 + m + sec / 60.0


def _merged(section: dict) -> dict:
    """The section over the defaults, one level of nesting deep (the schema's depth)."""
    from gpuhc.text.schema import defaults

    out = defaults(SCHEMA)
    for key, value in section.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict) and key != "thresholds":
            out[key] = {**out[key], **value}
        elif value is not None:
            out[key] = value
    return out


def _line(lines: dict | None, where: tuple, file: str | None) -> int | None:
    from gpuhc.text.yamlpos import line_of

    return line_of(lines or {}, where) if file else None


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def validate_thresholds(table: Any, file: str | None = None, lines: dict | None = None,
                        path: tuple = ("sweep", "thresholds")) -> None:
    """Names and kinds inside ``sweep.thresholds``; the generic schema only knows it is a mapping."""


    def fail(msg: str, sub: tuple) -> None:
        raise ConfigError(msg, file, _line(lines, path + sub, file), _dotted(path + sub))

    if not isinstance(table, dict):
        fail("must be a mapping of backend to shapes", ())
    for backend, shapes in table.items():
        if backend not in ("nccl", "mpi"):
            fail(f"unknown backend{did_you_mean(backend, ('mpi', 'nccl'))} (known: mpi, nccl)", (backend,))
        if not isinstance(shapes, dict):
            fail("must be a mapping of shape (like 2x8, 2x8-cross, default) to thresholds", (backend,))
        for shape, block in shapes.items():
            if not _block_key_ok(str(shape)):
                fail("must be 'default', a shape <nodes>x<ranks per node> (optionally -cross or -leaf), a GPU "
                     "profile name (like h100-sxm), or <profile>/<shape>", (backend, shape))
            if not isinstance(block, dict):
                fail("must be a mapping of threshold names to values", (backend, shape))
            for name, value in block.items():
                if name not in THRESHOLD_KEYS:
                    fail(f"unknown threshold{did_you_mean(name, THRESHOLD_KEYS)} (known: "
                         f"{', '.join(sorted(THRESHOLD_KEYS))})", (backend, shape, name))
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                          or value != value or value == float("inf")):
                    fail(f"must be a non-negative finite number or null, got {value!r}", (backend, shape, name))
                if name.endswith("_bytes") and value is not None and (not isinstance(value, int) or value < 4):
                    fail(f"must be a whole number of bytes >= 4, got {value!r}", (backend, shape, name))


def _block_key_ok(key: str) -> bool:
    """``default``, ``2x8[-cross|-leaf]``, ``<profile>`` or ``<profile>/2x8[-cross|-leaf]``."""
    if key == "default" or _shape_ok(key):
        return True
    profile, slash, shape = key.partition("/")
    return _profile_ok(profile) and (not slash or _shape_ok(shape))


def _profile_ok(name: str) -> bool:
    # The shipped profile names; read only for a key that is neither 'default' nor a shape.
    from gpuhc.config.profiles import profile_names

    return name in profile_names()


def _shape_ok(shape: str) -> bool:
    base, _, span = shape.partition("-")
    n, _, r = base.partition("x")
    return n.isdigit() and r.isdigit() and span in ("", "cross", "leaf")


def sweep_section(config: Any) -> dict[str, Any]:
    """The effective ``sweep`` section of a loaded :class:`gpuhc.config.load.Config`, checked."""
    from gpuhc.text.schema import defaults

    section = copy.deepcopy(config.section("sweep")) or defaults(SCHEMA)
    validate(section, getattr(config, "path", None), getattr(config, "lines", None))
    return section
