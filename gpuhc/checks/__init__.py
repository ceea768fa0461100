"""The check registry: every check a config may name.

Passive checks judge a snapshot; each module here exposes ``CHECKS = [Check(...)]`` (one module
may hold a couple of closely related checks). To add one: write ``gpuhc/checks/<name>.py``, add
the module name below, and write its test. Active checks make the GPUs work; they are declared
in ``gpuhc/active/registry.py`` and listed here too, so that the config validator and
``gpuhc config checks`` see one list of ids, threshold defaults and validators.
"""

from __future__ import annotations

import importlib
from gpuhc.checks.base import Check, Declared

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
    "mig_layout",
    "fabric",
    "jobs",
    "pcie_aer",  # the node around the GPUs (docs/checks.md): AER, machine checks, host, services
    "machine_check",
    "host",
    "services",
    "hung_task",  # the kernel's hung-task reports and the NIC driver's health (gpuhc/sources/node_reports.py)
    "nic_health",
    "firmware",  # the GPUs' VBIOS and the HCAs' firmware alike; IPoIB interfaces up (sysfs_ipoib)
    "ipoib",
    "storage",  # the kernel's words about local disks and NFS, and its own state (kernel_log_storage)
    "kernel_health",
)


def passive_checks() -> list[Check]:
    checks: list[Check] = []
    for name in MODULES:
        checks.extend(importlib.import_module(f"gpuhc.checks.{name}").CHECKS)
    return checks


def all_checks() -> list[Declared]:
    """Passive, then active declarations (the active ones import nothing heavy)."""
    from gpuhc.active.registry import CHECKS as ACTIVE

    return [*passive_checks(), *ACTIVE]


def active_ids() -> frozenset[str]:
    """The ids of the active checks (declarations only: light)."""
    from gpuhc.active.registry import IDS

    return frozenset(IDS)


def checks_for_stage(stage: str) -> list[Check]:
    """The passive checks a stage runs (its active checks are planned by gpuhc.active)."""
    return [c for c in passive_checks() if stage in c.stages]
