"""The active checks and the worker tasks they run, each declared once.

A *check* is what the user sees and configures (``burn-in``, ``hbm``...); a *task* is one piece
of GPU work in the worker process. One task can feed several checks (the burn-in's timings are
the GPU speed) and one check can read two tasks (P2P is judged against the topology). Everything
else in ``gpuhc.active`` (the stage plan, the worker, the supervisor, the orchestrator) and the
config validator read these declarations, so adding an active check is one entry here plus its
module.

The config loader and the profile loader read this module on every run, so it imports nothing
heavy: each judge imports its module when it is called.

Threshold defaults carry no absolute speeds: on an unknown GPU the only yardsticks are
correctness and the node's own GPUs (a straggler is slow next to its siblings whatever the
model). The GPU profiles (``gpuhc/data/profiles/<model>.yaml``) add the absolute expectations.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from gpuhc.model.record import FrozenRecord

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp64")  # the burn-in's GEMMs, gpuhc/active/gemm_types.py
MEMTEST_PATTERNS = ["address", "inverse-address", "walking-ones", "walking-zeros", "random", "checkerboard"]
STAGES = ("epilog", "bootstrap")


@dataclass(frozen=True, eq=False, repr=False)
class WorkerTask(FrozenRecord):
    """One task the GPU worker runs: its module, parameters and healthy time."""

    name: str
    module: str  # holds ``measure(params, devices)``, run in the worker process
    # (the `active` section, the stage's sub-section) -> the task's parameters
    params: Callable[[dict, dict], dict]
    # (params, GPUs) -> typical seconds on a healthy node with warm kernel caches, from the H200
    # runs in docs/verification-active.md plus a margin. Deliberately generous: it only decides
    # timeouts and whether a task still fits the budget left.
    estimate: Callable[[dict, int], float]
    cupy: bool = True  # False: runs where CuPy is missing (NVML inventory only)
    node_wide: bool = False  # True: sees every GPU of the node, not only the ones under test
    cold_start_s: float = 0.0  # extra deadline for a node's first run (kernel compilation)


# Judged (data by task name, thresholds, baseline) -> results. ``data[task]`` is None for an
# input task that did not deliver; the check's own task (the last) always delivered.
Judge = Callable[[dict[str, Any], dict[str, Any], Any], list]


@dataclass(frozen=True, eq=False, repr=False)
class ActiveCheck(FrozenRecord):
    """One active check, declared once: the tasks it reads, its judge and defaults."""

    id: str
    tasks: tuple[str, ...]  # worker tasks it reads, inputs first, its own last; () runs none
    judge: Judge | None  # None: the check runs its own program (dcgm), see orchestrate.py
    defaults: dict[str, Any]  # thresholds; the GPU profile and config override them
    needs: tuple[str, ...] = ("cupy",)  # software on the node, for `gpuhc config checks`
    # Threshold values a type cannot judge; same contract as gpuhc.checks.base.Check.validate.
    validate: Callable[[dict[str, Any]], list[str]] | None = None
    doc: str = ""
    stages: tuple[str, ...] = STAGES
    # The fields below complete gpuhc.checks.base.Declared, the shape one registry serves to
    # config validation, the profiles and the runner. timeout_s 0: no fixed default, the
    # deadline is sized from the stage's workload (WorkerTask.estimate) unless
    # `checks.<id>.timeout_s` sets one.
    timeout_s: float = 0.0
    optional: tuple[str, ...] = ()
    from_config: dict[str, tuple[str, str]] = field(default_factory=dict)
    nested_thresholds: bool = True  # per-dtype tables (tflops, rel_tol) merge key by key


# --------------------------------------------------------------------------- worker tasks


def _memtest_estimate(p: dict, n: int) -> float:
    # every pattern writes and reads the slice once, GPUs in parallel, ~4 TB/s on H200
    gib = min(80.0 * p["fraction"], p["max_gib"])
    return 1.0 + len(p["patterns"]) * 2 * gib / 2000.0 + 0.1 * n


def correctness_pass(p: dict) -> list[str]:
    """The precisions of the burn-in's untimed correctness pass (gpuhc/active/burnin.py), from
    its parameters or the `active` section: ``check_dtypes`` less the timed ``dtypes`` (a
    precision named in both is timed only); none when ``check_s`` or the list is empty."""
    if not p.get("check_s"):
        return []
    return [d for d in p.get("check_dtypes") or [] if d not in (p.get("dtypes") or [])]


def correctness_pass_s(p: dict) -> float:
    """Its estimated seconds: each precision's inputs, calibration and reference block take
    about 0.5 s besides its ``check_s`` (generous: an estimate sizes deadlines)."""
    return len(correctness_pass(p)) * (float(p.get("check_s") or 0.0) + 0.5)


TASKS: tuple[WorkerTask, ...] = (  # in the worker's order: cheap inventory first, the collective last
    WorkerTask("topology", "gpuhc.active.topology", lambda a, s: {}, lambda p, n: 0.5 + 0.05 * n,
               cupy=False, node_wide=True),
    WorkerTask("burnin", "gpuhc.active.burnin",
               lambda a, s: {"n": a["matmul_n"], "dtypes": list(a["dtypes"]), "seconds": s["burnin_s"],
                             "seed": a["seed"], "hash_every": a["hash_every"],
                             "check_dtypes": list(a["check_dtypes"] or []), "check_s": a["check_s"] or 0.0,
                             "check_n": a["check_n"]},
               # each precision: inputs, calibration and the reference block ~0.5 s, then its time
               lambda p, n: p["seconds"] + 0.5 * len(p["dtypes"]) + 0.5 + correctness_pass_s(p),
               # a node's first run compiles the kernels: 15 s more on an H200, seen once
               cold_start_s=15.0),
    WorkerTask("hbm", "gpuhc.active.hbm", lambda a, s: {"mib": s["hbm_mib"], "repeats": 20, "seed": a["seed"]},
               lambda p, n: 0.5 + 0.05 * n),
    WorkerTask("memtest", "gpuhc.active.memtest",
               lambda a, s: {"fraction": s["memtest_fraction"], "max_gib": s["memtest_max_gib"], "seed": a["seed"],
                             "patterns": list(MEMTEST_PATTERNS)},
               _memtest_estimate),
    WorkerTask("hostlink", "gpuhc.active.hostlink", lambda a, s: {"mib": s["hostlink_mib"], "repeats": 5},
               lambda p, n: 0.3 + n * (0.1 + (p["repeats"] + 2) * 2 * p["mib"] / 1024.0 / 40.0)),
    WorkerTask("p2p", "gpuhc.active.p2p", lambda a, s: {"mib": s["p2p_mib"], "repeats": 5, "seed": a["seed"]},
               lambda p, n: 0.3 + n * (n - 1) * (0.02 + (p["repeats"] + 1) * p["mib"] / 1024.0 / 300.0)),
    WorkerTask("nccl", "gpuhc.active.nccl_local",
               lambda a, s: {"mib": s["nccl_mib"], "iters": s["nccl_iters"], "warmup": 5},
               lambda p, n: 1.5 + 0.3 * n + (p["iters"] + p.get("warmup", 5)) * p["mib"] / 1024.0 * 0.01),
)
TASK = {t.name: t for t in TASKS}


# --------------------------------------------------------------------------- judges


def _judge_of(module: str, task: str) -> Judge:
    """The common case: ``gpuhc.active.<module>.judge(the task's data, thresholds)``."""

    def judge(data: dict[str, Any], thr: dict[str, Any], baseline: Any) -> list:
        return importlib.import_module(f"gpuhc.active.{module}").judge(data[task], thr)

    return judge


def _judge_topology(data: dict[str, Any], thr: dict[str, Any], baseline: Any) -> list:
    from gpuhc.active import topology

    return topology.judge(data["topology"], thr, baseline)


def _judge_p2p(data: dict[str, Any], thr: dict[str, Any], baseline: Any) -> list:
    from gpuhc.active import p2p

    return p2p.judge(data["p2p"], data.get("topology"), thr)


# --------------------------------------------------------------------------- validation


def _fractions(thr: dict[str, Any]) -> list[str]:
    """Every ``*_fraction`` is a share in (0, 1]; the warn band sits above the fail line."""
    out = []
    for key, v in thr.items():
        if key.endswith("_fraction") and _number(v) and not 0 < v <= 1:
            out.append(f"{key}: must be a fraction above 0 and at most 1, got {v!r}")
    lo, hi = thr.get("min_fraction"), thr.get("warn_fraction")
    if _number(lo) and _number(hi) and hi < lo:
        out.append(f"warn_fraction: must not be below min_fraction ({lo!r}), got {hi!r}")
    lo, hi = thr.get("straggler_fraction"), thr.get("straggler_warn_fraction")
    if _number(lo) and _number(hi) and hi < lo:
        out.append(f"straggler_warn_fraction: must not be below straggler_fraction ({lo!r}), got {hi!r}")
    return out


def _positive_or_null(*keys: str) -> Callable[[dict[str, Any]], list[str]]:
    """Expected rates: an expectation of 0 would pass any GPU, so it must be > 0 (or null)."""

    def check(thr: dict[str, Any]) -> list[str]:
        return [f"{k}: must be a number above 0, or null for no expectation, got {thr[k]!r}"
                for k in keys if thr.get(k) is not None and not (_number(thr[k]) and thr[k] > 0)]

    return check


def _per_dtype(key: str, positive: bool) -> Callable[[dict[str, Any]], list[str]]:
    def check(thr: dict[str, Any]) -> list[str]:
        table = thr.get(key)
        if not isinstance(table, dict):
            return []
        out = []
        for dt, v in table.items():
            if dt not in DTYPES:
                out.append(f"{key}.{dt}: unknown precision (known: {', '.join(DTYPES)})")
            elif not _number(v) or (positive and v <= 0):
                out.append(f"{key}.{dt}: must be a number above 0, got {v!r}")
        return out

    return check


def _whole(key: str, minimum: int) -> Callable[[dict[str, Any]], list[str]]:
    def check(thr: dict[str, Any]) -> list[str]:
        v = thr.get(key)
        if v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= minimum):
            return []
        return [f"{key}: must be a whole number >= {minimum}, got {v!r}"]

    return check


def _all(*checks: Callable[[dict[str, Any]], list[str]]) -> Callable[[dict[str, Any]], list[str]]:
    return lambda thr: [p for c in checks for p in c(thr)]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --------------------------------------------------------------------------- the checks

CHECKS: tuple[ActiveCheck, ...] = (  # the bootstrap stage's order
    ActiveCheck(
        "topology", ("topology",), _judge_topology, needs=("nvml",),
        defaults={"nvlinks_per_gpu": None, "all_pairs_nvlink": False},
        validate=_whole("nvlinks_per_gpu", 1),
        doc="NVLink, PCIe, NUMA and NIC layout against the profile and the baseline"),
    ActiveCheck(
        "burn-in", ("burnin",), _judge_of("burnin", "burnin"),
        defaults={
            # ||gpu - float64|| / ||float64|| on a sampled block of the product. bf16/fp16 outputs
            # are rounded to 8/11 mantissa bits (~1e-3 relative); tf32 rounds the inputs (~5e-4).
            # fp64: the 24-bit inputs multiply exactly, only the order of the sums differs from
            # the host's (~1e-15 relative); 1e-10 leaves five orders of margin and still sees an
            # error a thousand times below fp32's precision (the hashes see every bit).
            "rel_tol": {"bf16": 1.0e-2, "fp16": 5.0e-3, "tf32": 5.0e-3, "fp32": 1.0e-4, "fp64": 1.0e-10},
            "bitwise": True,  # identical GPUs must produce bit-identical products (measured, see docs)
        },
        validate=_per_dtype("rel_tol", positive=True),
        doc="sustained matmuls: every product right, identical GPUs bit-identical"),
    ActiveCheck(
        "gpu-speed", ("burnin",), _judge_of("speed", "burnin"),
        defaults={
            "tflops": {},  # dtype -> expected TFLOP/s; none on an unknown GPU
            "min_fraction": 0.85,
            "warn_fraction": 0.93,
            "straggler_fraction": 0.90,  # vs the median of the node's other GPUs
            # below this, epilog after epilog (evidence.straggler), a GPU a little slow drains: healthy
            # siblings measured within 1.5 % of each other (docs/verification.md); null: off
            "straggler_warn_fraction": 0.95,
            "throttle_fail_fraction": 0.20,  # HW slowdown in this share of load samples fails
        },
        validate=_all(_fractions, _per_dtype("tflops", positive=True)),
        doc="the burn-in's TFLOP/s per GPU and the clock-event reasons under load"),
    ActiveCheck(
        "hbm", ("hbm",), _judge_of("hbm", "hbm"),
        defaults={"gbps": None, "min_fraction": 0.85, "warn_fraction": 0.93, "straggler_fraction": 0.90},
        validate=_all(_fractions, _positive_or_null("gbps")),
        doc="device-to-device copy bandwidth and its checksum"),
    ActiveCheck(
        "memtest", ("memtest",), _judge_of("memtest", "memtest"),
        defaults={"max_bad_words": 0},
        validate=_whole("max_bad_words", 0),
        doc="patterns over a share of free HBM; any wrong word fails"),
    ActiveCheck(
        "host-link", ("hostlink",), _judge_of("hostlink", "hostlink"),
        defaults={"h2d_gbps": None, "d2h_gbps": None, "min_fraction": 0.70, "warn_fraction": 0.85,
                  "straggler_fraction": 0.80},
        validate=_all(_fractions, _positive_or_null("h2d_gbps", "d2h_gbps")),
        doc="pinned host<->GPU copy bandwidth per GPU"),
    ActiveCheck(
        "p2p", ("topology", "p2p"), _judge_p2p,
        defaults={"nvlink_gbps": None, "pcie_gbps": None, "min_fraction": 0.75, "warn_fraction": 0.90,
                  "straggler_fraction": 0.85},
        validate=_all(_fractions, _positive_or_null("nvlink_gbps", "pcie_gbps")),
        doc="peer copies between every GPU pair, judged by the link between them"),
    ActiveCheck(
        "nccl-local", ("nccl",), _judge_of("nccl_local", "nccl"), needs=("cupy", "nccl"),
        defaults={"busbw_gbps": None, "min_fraction": 0.80, "warn_fraction": 0.90},
        validate=_all(_fractions, _positive_or_null("busbw_gbps")),
        doc="all-reduce over the node's GPUs: exact sum and bus bandwidth"),
    ActiveCheck(
        "dcgm", (), None, needs=("dcgmi",),
        defaults={"warn_is_fail": False},
        doc="dcgmi diag at the stage's level (bootstrap by default)"),
)
CHECK = {c.id: c for c in CHECKS}
IDS = tuple(CHECK)


def needs_cupy(task: str) -> bool:
    """Test-only tasks (not declared here) need CuPy like every GPU workload."""
    t = TASK.get(task)
    return t.cupy if t is not None else True
