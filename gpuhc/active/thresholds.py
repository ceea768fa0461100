"""Thresholds of the active checks: model-agnostic defaults, then the GPU profile's file
gpuhc/data/active/<profile>.yaml, then the site's ``checks.<id>.thresholds``.

The defaults carry no absolute speeds: on an unknown GPU the only yardsticks are correctness
and the node's own GPUs (a straggler is slow next to its siblings whatever the model). The
per-profile files add the absolute expectations, each with a comment saying where the number
was measured.
"""

from __future__ import annotations

import os
from typing import Any

from gpuhc.errors import ConfigError
from gpuhc.schema import deep_merge

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "active")

DEFAULTS: dict[str, dict[str, Any]] = {
    "burn-in": {
        # ||gpu - float64|| / ||float64|| on a sampled block of the product. bf16/fp16 outputs are
        # rounded to 8/11 mantissa bits (~1e-3 relative); tf32 rounds the inputs (~5e-4).
        "rel_tol": {"bf16": 1.0e-2, "fp16": 5.0e-3, "tf32": 5.0e-3, "fp32": 1.0e-4},
        "bitwise": True,  # identical GPUs must produce bit-identical products (measured, see docs)
    },
    "gpu-speed": {
        "tflops": {},  # dtype -> expected TFLOP/s; none on an unknown GPU
        "min_fraction": 0.85,
        "warn_fraction": 0.93,
        "straggler_fraction": 0.90,  # vs the median of the node's other GPUs
        "throttle_fail_fraction": 0.20,  # HW slowdown in this share of load samples fails
    },
    "hbm": {"gbps": None, "min_fraction": 0.85, "warn_fraction": 0.93, "straggler_fraction": 0.90},
    "memtest": {"max_bad_words": 0},
    "host-link": {"h2d_gbps": None, "d2h_gbps": None, "min_fraction": 0.70, "warn_fraction": 0.85,
                  "straggler_fraction": 0.80},
    "p2p": {"nvlink_gbps": None, "pcie_gbps": None, "min_fraction": 0.75, "warn_fraction": 0.90,
            "straggler_fraction": 0.85},
    "nccl-local": {"busbw_gbps": None, "min_fraction": 0.80, "warn_fraction": 0.90},
    "topology": {"nvlinks_per_gpu": None, "all_pairs_nvlink": False},
    "dcgm": {"warn_is_fail": False},
}


def _read_profile(name: str) -> dict[str, Any]:
    path = os.path.join(DATA_DIR, f"{name}.yaml")
    if not os.path.exists(path):
        path = os.path.join(DATA_DIR, "generic.yaml")
        if not os.path.exists(path):
            return {}
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read active thresholds: {' '.join(str(e).split())}", path) from None
    if not isinstance(data, dict):
        raise ConfigError("must be a mapping of check id to thresholds", path, 1)
    for cid, section in data.items():
        if cid not in DEFAULTS:
            raise ConfigError(f"unknown active check (known: {', '.join(DEFAULTS)})", path, None, str(cid))
        if not isinstance(section, dict):
            raise ConfigError("must be a mapping", path, None, str(cid))
    return data


merge = deep_merge  # the one layered-settings merge (gpuhc.schema); plan.py imports it by this name


def thresholds_for(profile: str, overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """check id -> effective thresholds."""
    prof = _read_profile(profile)
    overrides = overrides or {}
    return {cid: merge(merge(d, prof.get(cid) or {}), overrides.get(cid) or {}) for cid, d in DEFAULTS.items()}
