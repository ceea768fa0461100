"""The peers' kernel-log cases (tests/fixtures/parity/cases.json) judged as a replay judges a
kernel log: parsed, then every passive check that reads the kernel log, then the evidence
table's holds (gpuhc/run/hold.py) as the runner applies them, on one run of a fresh node."""

from __future__ import annotations

import json
from functools import lru_cache

from gpuhc.model.result import Status
from tests.helpers.paths import FIXTURES

# A peer's verdict and the gpuhc status that agrees with it: "fatal" marks the node unhealthy,
# "event" is a warning, "none" nothing; "detect" only asserts the line is found (any finding)
AGREES = {"fatal": ("FAIL",), "event": ("WARN",), "none": ("PASS",), "detect": ("WARN", "FAIL")}
_ORDER = ("PASS", "WARN", "FAIL")


@lru_cache(maxsize=1)
def cases() -> list[dict]:
    return json.loads((FIXTURES / "parity" / "cases.json").read_text())["cases"]


@lru_cache(maxsize=1)
def _kernel_checks() -> list:
    from gpuhc.checks import passive_checks
    from gpuhc.checks.base import KERNEL_LOG

    return [c for c in passive_checks() if KERNEL_LOG in c.needs]


def judge_lines(lines: list[str], driver_version: str | None = None) -> tuple[str, str | None]:
    """(the worst status of every kernel-log check on ``lines``, the action of the worst FAIL)."""
    from gpuhc.run.hold import hold
    from gpuhc.sources.kernel_log_parse import parse_lines
    from tests.helpers.snapshots import context, healthy_node

    snap = healthy_node()
    snap.kernel = parse_lines(lines)
    snap.kernel.boot_id = "boot-a"
    if driver_version and snap.kernel.driver_version is None:  # the peer's table names the driver branch
        snap.kernel.driver_version = driver_version
    if snap.kernel.last_time:  # a replay judges "now" by the log (gpuhc/run/runner.py)
        snap.time = snap.kernel.last_time
    results = [r for c in _kernel_checks() for r in c.judge(snap, context(c)).results]
    results, _ = hold(results, None, snap.time, None)
    for r in results:
        assert r.status is not Status.ERROR, f"{r.check}: {r.message}"
    worst = max((r.status.value.upper() for r in results), key=_ORDER.index, default="PASS")
    actions = [r.action.value for r in results if r.status is Status.FAIL]
    return worst, (actions[0] if actions else None)


def agrees(peer_verdict: str, status: str) -> bool:
    return status in AGREES[peer_verdict]
