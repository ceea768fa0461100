"""Which worker tasks a stage runs, with what parameters, and how long each may take.

The tasks, the checks they feed and their time estimates are declared in
:mod:`gpuhc.active.registry`; this module turns the `active` config section into the stage's
plan: the checks it runs, the tasks they need (in the worker's order) and their parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuhc.active.registry import CHECK, TASK, TASKS
from gpuhc.active.settings import SCHEMA, problems
from gpuhc.errors import ConfigError
from gpuhc.text.schema import deep_merge, defaults

DCGM_TIMEOUT_S = {1: 180.0, 2: 900.0, 3: 2400.0, 4: 7200.0}


@dataclass
class Task:
    name: str
    params: dict[str, Any]
    checks: list[str]  # check ids fed by this task

    def estimate_s(self, ngpu: int) -> float:
        """Typical seconds on a healthy node (the registry's estimate); a task that does not fit
        the budget left is not started."""
        decl = TASK.get(self.name)
        return decl.estimate(self.params, max(1, ngpu)) if decl is not None else 10.0  # test-only tasks

    def timeout_s(self, ngpu: int) -> float:
        """Deadline when the config sets none, with the time a node's first run spends compiling
        kernels where the task declares one."""
        decl = TASK.get(self.name)
        return 1.5 * self.estimate_s(ngpu) + 10.0 + (decl.cold_start_s if decl is not None else 0.0)


@dataclass
class Plan:
    stage: str
    checks: list[str]
    tasks: list[Task] = field(default_factory=list)
    dcgm_level: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


def stage_settings(config: dict[str, Any], stage: str) -> dict[str, Any]:
    """The `active` section with defaults filled in, for callers that pass a partial dict."""
    return deep_merge(defaults(SCHEMA), config or {})


def build(stage: str, config: dict[str, Any], enabled=lambda cid: True) -> Plan:
    if stage not in ("epilog", "bootstrap"):
        raise ConfigError(f"active checks run in the epilog and bootstrap stages, not {stage!r}")
    cfg = stage_settings(config, stage)
    st = cfg[stage]
    if not cfg["enabled"]:
        return Plan(stage, [], settings=cfg)
    for where, why in problems({stage: {"checks": st["checks"]}, "dtypes": cfg["dtypes"],
                                  "check_dtypes": cfg["check_dtypes"]}):
        raise ConfigError(why, key=".".join(["active", *(k for k in where if not isinstance(k, int))]))
    checks = [c for c in st["checks"] if enabled(c)]
    if st["dcgm_level"] == 0 and "dcgm" in checks:
        checks.remove("dcgm")
    feeds: dict[str, list[str]] = {}
    for c in checks:
        for t in CHECK[c].tasks:
            feeds.setdefault(t, []).append(c)
    tasks = [Task(t.name, t.params(cfg, st), feeds[t.name]) for t in TASKS if t.name in feeds]
    return Plan(stage, checks, tasks, st["dcgm_level"] if "dcgm" in checks else 0, cfg)
