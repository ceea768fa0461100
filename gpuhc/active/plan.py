"""Which worker tasks a stage runs, with what parameters, and how long each may take.

A *check* is what the user sees (``burn-in``, ``gpu-speed``...); a *task* is one piece of GPU
work in the worker. One task can feed several checks (the burn-in's timings are the GPU speed),
and one check can need two tasks (P2P is judged against the topology). Time estimates are
deliberately generous: they only decide timeouts and whether a task still fits the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuhc.active.settings import ALL_CHECKS, DTYPES, SCHEMA
from gpuhc.errors import ConfigError
from gpuhc.schema import defaults

# task order in the worker: cheap inventory first, the all-GPU collective last
TASK_ORDER = ("topology", "burnin", "hbm", "memtest", "hostlink", "p2p", "nccl")
TASKS_OF_CHECK = {
    "topology": ("topology",),
    "burn-in": ("burnin",),
    "gpu-speed": ("burnin",),
    "hbm": ("hbm",),
    "memtest": ("memtest",),
    "host-link": ("hostlink",),
    "p2p": ("topology", "p2p"),
    "nccl-local": ("nccl",),
}
NEEDS_CUPY = {"burnin", "hbm", "memtest", "hostlink", "p2p", "nccl"}
DCGM_TIMEOUT_S = {1: 180.0, 2: 900.0, 3: 2400.0, 4: 7200.0}


@dataclass
class Task:
    name: str
    params: dict[str, Any]
    checks: list[str]  # check ids fed by this task

    def estimate_s(self, ngpu: int) -> float:
        """Typical seconds on a healthy node with warm kernel caches, from the H200 runs in
        docs/verification-active.md plus a margin; a task that does not fit the budget left is
        not started."""
        p, n = self.params, max(1, ngpu)
        if self.name == "topology":
            return 0.5 + 0.05 * n
        if self.name == "burnin":
            return p["seconds"] + 0.5 * len(p["dtypes"]) + 0.5
        if self.name == "hbm":
            return 0.5 + 0.05 * n
        if self.name == "memtest":
            # every pattern writes and reads the slice once, GPUs in parallel, ~4 TB/s on H200
            gib = min(80.0 * p["fraction"], p["max_gib"])
            return 1.0 + len(p["patterns"]) * 2 * gib / 2000.0 + 0.1 * n
        if self.name == "hostlink":
            return 0.3 + n * (0.1 + (p["repeats"] + 2) * 2 * p["mib"] / 1024.0 / 40.0)
        if self.name == "p2p":
            return 0.3 + n * (n - 1) * (0.02 + (p["repeats"] + 1) * p["mib"] / 1024.0 / 300.0)
        if self.name == "nccl":
            return 1.5 + 0.3 * n + (p["iters"] + p.get("warmup", 5)) * p["mib"] / 1024.0 * 0.01
        return 10.0  # test-only tasks

    def timeout_s(self, ngpu: int) -> float:
        """Deadline when the config sets none. The burn-in also gets the time a node's first run
        spends compiling kernels (cold caches: 15 s more on an H200, seen once)."""
        cold = 15.0 if self.name == "burnin" else 0.0
        return 1.5 * self.estimate_s(ngpu) + 10.0 + cold


@dataclass
class Plan:
    stage: str
    checks: list[str]
    tasks: list[Task] = field(default_factory=list)
    dcgm_level: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


def stage_settings(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """The `active` section with defaults filled in, for callers that pass a partial dict."""
    from gpuhc.active.thresholds import merge

    return merge(defaults(SCHEMA), config or {})


def build(stage: str, config: dict[str, Any], enabled=lambda cid: True) -> Plan:
    if stage not in ("epilog", "bootstrap"):
        raise ConfigError(f"active checks run in the epilog and bootstrap stages, not {stage!r}")
    cfg = stage_settings(config, stage)
    st = cfg[stage]
    if not cfg["enabled"]:
        return Plan(stage, [], settings=cfg)
    unknown = [c for c in st["checks"] if c not in ALL_CHECKS]
    if unknown:
        raise ConfigError(f"unknown active check {unknown[0]!r} (known: {', '.join(ALL_CHECKS)})",
                          key=f"active.{stage}.checks")
    bad = [d for d in cfg["dtypes"] if d not in DTYPES]
    if bad or not cfg["dtypes"]:
        raise ConfigError(f"unknown dtype {bad[0] if bad else '(none)'!r} (known: {', '.join(DTYPES)})",
                          key="active.dtypes")
    checks = [c for c in st["checks"] if enabled(c)]
    if st["dcgm_level"] == 0 and "dcgm" in checks:
        checks.remove("dcgm")
    params = {
        "topology": {},
        "burnin": {"n": cfg["matmul_n"], "dtypes": list(cfg["dtypes"]), "seconds": st["burnin_s"],
                   "seed": cfg["seed"], "hash_every": cfg["hash_every"]},
        "hbm": {"mib": st["hbm_mib"], "repeats": 20, "seed": cfg["seed"]},
        "memtest": {"fraction": st["memtest_fraction"], "max_gib": st["memtest_max_gib"], "seed": cfg["seed"],
                    "patterns": ["address", "inverse-address", "walking-ones", "walking-zeros", "random",
                                 "checkerboard"]},
        "hostlink": {"mib": st["hostlink_mib"], "repeats": 5},
        "p2p": {"mib": st["p2p_mib"], "repeats": 5, "seed": cfg["seed"]},
        "nccl": {"mib": st["nccl_mib"], "iters": st["nccl_iters"], "warmup": 5},
    }
    feeds: dict[str, list[str]] = {}
    for c in checks:
        for t in TASKS_OF_CHECK.get(c, ()):
            feeds.setdefault(t, []).append(c)
    tasks = [Task(t, params[t], feeds[t]) for t in TASK_ORDER if t in feeds]
    return Plan(stage, checks, tasks, st["dcgm_level"] if "dcgm" in checks else 0, cfg)
