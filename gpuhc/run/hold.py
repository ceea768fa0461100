"""Evidence held over runs: what a run's findings buy once gpuhc/catalog/evidence.py's table says their
class must be held before it drains (docs/checks.md, "Evidence to act").

A check judges one snapshot; whether its finding has *stayed* is a question of runs. So the
runner, after the checks, asks the table of each finding: a FAIL of a class that must be held
(the node around the GPUs: a service that does not answer, a mount, scratch, a corrected-error
rate) is a WARN that says how long it has been seen, until it was seen on ``runs`` consecutive
runs spanning ``span_s`` (``evidence.<hold>``); then it is the FAIL, with how long it held in its
message, so the drain reason says it, and the act its class buys (the table's ``act``: a reboot
only where a reboot is the cure, else drain + ticket), whatever the check asked for. A finding of
a class that acts at once passes untouched.

The count lives in the node's state (``evidence``: one entry per check, subject and class),
like the checks' own slices (gpuhc/run/keep.py). "Consecutive" is per check: a run that judged
the check and did not see the finding forgets it; a run that did not judge it (another stage, a
time-out: gpuhc's own failure) leaves the count alone. A sighting after a whole span unseen
(the hold's ``gap_s`` where it sets one: evidence only a job's end shows) starts again. Pure:
results, stored section, time and settings in; results and section out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuhc.catalog.evidence import Evidence, Hold, class_of, holds_from, span_text
from gpuhc.model.result import Action, Result, Status

STATE_KEY = "evidence"
MAX_ENTRIES = 256  # findings counted at once; a node with more is a node on fire, and new ones start later


def hold(results: list[Result], stored: Any, now: float, section: dict[str, Any] | None) -> tuple[list[Result], dict]:
    """(the results as the table makes them, the section to store)."""
    holds = holds_from(section)
    before = stored if isinstance(stored, dict) else {}
    judged = {r.check for r in results if r.status is not Status.ERROR}
    kept = {k: v for k, v in before.items() if isinstance(k, str) and k.split("|", 1)[0] not in judged
            and _entry(v) is not None}
    out = []
    for r in results:
        cls = class_of(r.check, r.evidence)
        if cls.hold is None or r.status is not Status.FAIL:
            out.append(r)
            continue
        h = holds[cls.hold]
        key = f"{r.check}|{r.subject}|{cls.id}"
        seen = _entry(before.get(key))
        if seen is None or now - seen["last"] > max(h.gap, 1.0) or now < seen["last"]:
            seen = {"first": now, "last": now, "runs": 0}
        if key not in kept and len(kept) >= MAX_ENTRIES:
            out.append(_waiting(r, cls, h, 1, 0.0))
            continue
        seen = {"first": seen["first"], "last": now, "runs": seen["runs"] + 1}
        kept[key] = seen
        span = now - seen["first"]
        out.append(_held(r, cls, seen["runs"], span) if seen["runs"] >= h.runs and span >= h.span_s
                   else _waiting(r, cls, h, seen["runs"], span))
    return out, kept


def _entry(v: Any) -> dict[str, Any] | None:
    """A stored count, or None when it is not one (a damaged state starts the count again)."""
    if not isinstance(v, dict):
        return None
    first, last, runs = v.get("first"), v.get("last"), v.get("runs")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x == x for x in (first, last, runs)):
        return None
    if runs < 0 or first > last:
        return None
    return {"first": float(first), "last": float(last), "runs": int(runs)}


def _held(r: Result, cls: Evidence, runs: int, span: float) -> Result:
    return replace(r, evidence=cls.id, action=cls.act or r.action,
                   message=f"{r.message}; held {runs} runs over {span_text(round(span))}")


def _waiting(r: Result, cls: Evidence, h: Hold, runs: int, span: float) -> Result:
    return replace(r, status=Status.WARN, action=Action.NONE, evidence=cls.id,
                   message=f"{r.message} (seen {runs} run{'s' * (runs != 1)} over {span_text(round(span))}; "
                           f"drains when held {h.text()}: evidence.{cls.hold})")
