"""What the runner hands the active checks.

The runner owns config loading, profile selection and the stage budget; the active suite only
needs the results of those decisions, so they arrive as one plain dataclass. ``checks`` and
``baseline`` are optional so that a caller that knows nothing of them (a test, `gpuhc` tools)
still gets the profile's thresholds and a topology judged against the profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ActiveContext:
    profile_name: str = "generic"  # gpuhc/data/profiles/<name>.yaml; unknown names fall back to generic
    config: dict[str, Any] = field(default_factory=dict)  # config section `active` (defaults filled in)
    gpus: list[int] | None = None  # NVML indices to test; None: every GPU the worker can see
    budget_s: float = 600.0  # what is left of the stage budget when the active checks start
    progress: bool = False  # rich progress on a TTY, plain lines on stderr otherwise
    # config `checks.<id>` for the active check ids: {enabled, timeout_s, thresholds}
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # `gpuhc baseline` document; its `topology` key is ours
    # The command that starts the worker; tests put a fake GPU here (the hardware boundary).
    worker_argv: list[str] | None = None
    # A GPU another process holds is the occupancy check's failure (drains); False keeps it an
    # error (a Slurm job whose GPUs are unknown: the process may be another job's).
    busy_is_finding: bool = True

    def check_enabled(self, check_id: str) -> bool:
        return bool((self.checks.get(check_id) or {}).get("enabled", True))

    def check_timeout(self, check_id: str) -> float | None:
        v = (self.checks.get(check_id) or {}).get("timeout_s")
        return float(v) if v else None

    def threshold_overrides(self, check_id: str) -> dict[str, Any]:
        return dict((self.checks.get(check_id) or {}).get("thresholds") or {})
