"""The passive check registry.

To add a check: write ``gpuhc/checks/<name>.py`` exposing ``CHECKS = [Check(...)]`` (one module
may hold a couple of closely related checks), add the module name below, and write its test.
"""

from __future__ import annotations

import importlib

from gpuhc.checks.base import Check

MODULES = (
    "gpu_count",
    "xid",
    "ecc",
    "nvlink",
    "pcie",
    "clocks",
    "thermal",
    "power",
    "infiniband",
    "nvswitch",
    "occupancy",
)


def all_checks() -> list[Check]:
    checks: list[Check] = []
    for name in MODULES:
        checks.extend(importlib.import_module(f"gpuhc.checks.{name}").CHECKS)
    return checks


def checks_for_stage(stage: str) -> list[Check]:
    return [c for c in all_checks() if stage in c.stages]
