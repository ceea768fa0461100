"""Judging a measured rate (TFLOP/s, GB/s) per GPU: against the profile and against siblings.

Two yardsticks, because each misses what the other sees: the profile's expected value catches
a node whose GPUs are *all* slow (wrong power cap, a bad BIOS), and the siblings' median
catches one straggler on a model gpuhc has no profile for. A straggler is compared with the
median of the *other* GPUs, so that with two GPUs the slow one is measured against the fast.

Each finding carries the action its *own* fault calls for, so that one GPU's corrupt copy (a
hardware ticket) does not turn a sibling's merely slow copy into a ticket too, nor the reverse.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from gpuhc.model.result import Action, Status

STRAGGLER_HELD = "gpu-straggler"  # the evidence table's class of a GPU a little slow (gpuhc/catalog/evidence.py)


@dataclass
class Finding:
    """What was found about one subject (a GPU, a GPU pair): worst status, texts, and the
    strongest action among its FAIL findings (NONE: the caller's default applies)."""

    status: Status = Status.PASS
    texts: list[str] = field(default_factory=list)
    action: Action = Action.NONE
    # the class of evidence (gpuhc/catalog/evidence.py) of its FAILs when every one of them names the
    # same held class: a FAIL that acts at once among them makes it None (the check's class)
    evidence: str | None = None
    _fails: int = 0

    def add(self, status: Status, text: str, action: Action | None = None, evidence: str | None = None) -> None:
        if status.rank > self.status.rank:
            self.status = status
        if status is Status.FAIL:
            if action is not None and action.rank > self.action.rank:
                self.action = action
            self.evidence = evidence if self._fails == 0 or self.evidence == evidence else None
            self._fails += 1
        self.texts.append(text)


def judge_rates(values: dict[str, float], expected: float | None, thr: dict, label: str, unit: str,
                findings: dict[str, Finding] | None = None, action: Action | None = None) -> dict[str, Finding]:
    """Add findings about ``values`` (subject -> rate) to ``findings`` and return it; a FAIL
    finding carries ``action`` (None: the default that :func:`rate_results` is given)."""
    findings = findings if findings is not None else {}
    minf = float(thr.get("min_fraction", 0.85))
    warnf = float(thr.get("warn_fraction", 0.93))
    strag = float(thr.get("straggler_fraction", 0.90))
    mild = thr.get("straggler_warn_fraction")  # a little slow: FAIL once held over runs (evidence.straggler)
    for subj, v in values.items():
        f = findings.setdefault(subj, Finding())
        if expected:
            frac = v / expected
            if frac < minf:
                f.add(Status.FAIL, f"{label} {v:.0f} {unit} is {frac:.0%} of the expected {expected:.0f} "
                                   f"(fails below {minf:.0%})", action)
            elif frac < warnf:
                f.add(Status.WARN, f"{label} {v:.0f} {unit} is {frac:.0%} of the expected {expected:.0f}")
        others = [o for s, o in values.items() if s != subj]
        if others:
            med = statistics.median(others)
            if med > 0 and v / med < strag:
                f.add(Status.FAIL, f"{label} {v:.0f} {unit} is {v / med:.0%} of its siblings' median {med:.0f} "
                                   f"(straggler below {strag:.0%})", action)
            elif med > 0 and mild is not None and v / med < float(mild):
                # short: the drain reason (255 bytes) must keep how long it held, after both precisions
                f.add(Status.FAIL, f"{label} {v:.0f} {unit} {v / med:.1%} of siblings' {med:.0f} (a little slow: "
                                   f"below {float(mild):.0%})", action, STRAGGLER_HELD)
    return findings


def gpu_order(subject: str) -> tuple:
    """Sort key: gpu2 before gpu10; other subjects after, by name."""
    digits = "".join(ch for ch in subject if ch.isdigit())
    return (int(digits) if digits else 1 << 30, subject)


def rate_results(check: str, findings: dict[str, Finding], values: dict[str, Any], pass_text: dict[str, str],
                 thr: dict, fail_action: Action) -> list:
    """One Result per subject from its findings (PASS text when nothing was found). A failing
    subject gets its own findings' action, or ``fail_action`` when they named none."""
    from gpuhc.model.result import Result

    out = []
    for subj in sorted(findings, key=gpu_order):
        f = findings[subj]
        msg = f"{subj}: " + ("; ".join(f.texts) if f.texts else pass_text.get(subj, "ok"))
        action = (f.action if f.action is not Action.NONE else fail_action) if f.status is Status.FAIL else Action.NONE
        out.append(Result(check, f.status, msg, subj, values.get(subj), thr, action))
    return out
