"""Thresholds of the active checks: each check's declared defaults (gpuhc/active/registry.py),
then the GPU profile (gpuhc/data/profiles/<model>.yaml, the same file that holds the passive
and sweep thresholds of that model), then the site's ``checks.<id>.thresholds``.

Nested tables (``gpu-speed.tflops`` per precision) merge key by key, so a site that sets one
precision keeps the profile's others.
"""

from __future__ import annotations

from typing import Any

from gpuhc.active.registry import CHECKS
from gpuhc.text.schema import deep_merge as merge

DEFAULTS: dict[str, dict[str, Any]] = {c.id: c.defaults for c in CHECKS}


def thresholds_for(profile: str, overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """check id -> effective thresholds, for the profile of that name (``generic`` when no
    profile has that name: an unknown model gets no absolute expectations)."""
    from gpuhc.config.profiles import effective_thresholds, profile_named

    prof = profile_named(profile)
    overrides = overrides or {}
    return {c.id: effective_thresholds(c, prof, overrides.get(c.id)) for c in CHECKS}


__all__ = ["DEFAULTS", "merge", "thresholds_for"]
