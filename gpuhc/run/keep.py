"""What a run keeps in the node's state: the checks' slices, the replay's step, the last run.

The state document (gpuhc/state/node.py) is shared with other runs and may have been damaged by hand
or by another version: every section is read through :func:`mapping`, so a section that holds
something else is rebuilt, never crashed on. Saving is best effort: a failed write is an error
result and a note, never a drain.
"""

from __future__ import annotations

from typing import Any

from gpuhc.model.result import Result, Status
from gpuhc.run.report import RunReport, one_line
from gpuhc.sources import SourceSpec
from gpuhc.state.node import StateStore


def mapping(value: Any) -> dict[str, Any]:
    """A section of the state document, or {} when a damaged document holds something else there."""
    return value if isinstance(value, dict) else {}


def scenario_step(prior: dict[str, Any], spec: SourceSpec, report: RunReport | None = None) -> int | None:
    """Replay scenarios with time steps advance one step per run unless a step is pinned."""
    if not spec.nvml_scenario or spec.step is not None:
        return spec.step
    step = mapping(mapping(prior.get("runner")).get("scenario_steps")).get(spec.nvml_scenario, 0)
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    if report is not None:
        report.notes.append(f"remembered scenario step {step!r} is not a step number; starting from 0")
    return 0


def save_state(store: StateStore, new_state: dict, step: int | None, spec: SourceSpec, report: RunReport,
               held: dict | None = None) -> None:
    try:
        with store.transaction() as doc:
            # Sections a damaged document holds as something else are rebuilt, not crashed on.
            for key in ("checks", "runner"):
                doc[key] = mapping(doc.get(key))
            # Each check's slice was computed from what this run read at its start; a concurrent
            # run (an epilog overlapping a health check) may have written since, and the later
            # write wins: growth checks then re-baseline once, nothing is corrupted. Counters
            # owned by the runner are advanced from what is stored now, so no step is lost.
            # Flushed to disk only when it holds something a crash must not lose: a check's
            # slice, the held evidence, a replay's step. A run that changed only last_run (most
            # runs of a healthy node) is written without the fsyncs.
            if all(doc["checks"].get(k) == v for k, v in new_state.items()) \
                    and (held is None or doc.get("evidence") == held) \
                    and not (spec.nvml_scenario and spec.step is None):
                store.lightly()
            doc["checks"].update(new_state)
            if held is not None:  # the evidence held over runs (gpuhc/run/hold.py), whole
                doc["evidence"] = held
            if spec.nvml_scenario and spec.step is None:
                steps = doc["runner"]["scenario_steps"] = mapping(doc["runner"].get("scenario_steps"))
                stored = steps.get(spec.nvml_scenario)
                steps[spec.nvml_scenario] = max(step or 0, stored if isinstance(stored, int) else 0) + 1
            doc["runner"]["last_run"] = {
                "stage": report.stage,
                "time": report.started,
                "status": report.status.value,
            }
    except Exception as e:  # state is best effort: a failed write must not turn into a drain
        report.notes.append(f"state not saved: {one_line(e)}")
        report.results.append(Result("state", Status.ERROR, f"state not saved: {one_line(e)}"))
