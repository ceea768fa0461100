"""A link between GPUs that stalls (gpuhc/active/stall.py): the epilog's P2P copy or all-reduce
that gets no answer while the same GPUs computed is held evidence of class ``gpu-link-stall``
(two epilogs in a row, ``evidence.link``), not "gpuhc could not judge"; every other time-out
stays an ERROR that never drains."""

from __future__ import annotations

import pytest

from gpuhc.active import stall
from gpuhc.active.supervise import Outcome
from gpuhc.catalog.evidence import HOLDS, counts_toward_lemon
from gpuhc.model.result import Action, Status
from gpuhc.run.hold import hold

DAY = 86400.0


def est(task: str) -> float:
    return 2.0  # a task's healthy seconds on these GPUs


def outcomes(**status) -> dict[str, Outcome]:
    out = {t: Outcome(t, "done", {}) for t in ("topology", "burnin", "hbm", "memtest", "hostlink", "p2p", "nccl")}
    for task, (st, secs) in status.items():
        out[task] = Outcome(task, st, message=f"timed out after {secs:.0f}s" if st == "timeout" else "", seconds=secs)
    return out


def test_a_link_task_with_no_answer_while_the_gpus_computed_is_a_stall():
    oc = outcomes(p2p=("timeout", 40.0))
    r = stall.stalled("p2p", oc["p2p"], oc, est)
    assert r.status is Status.FAIL and r.evidence == "gpu-link-stall" and r.action is Action.DRAIN_REBOOT
    assert r.message.startswith("p2p task stalled: no answer in 40s, 20x its healthy time, while burnin completed")
    assert counts_toward_lemon(r.check, r.evidence)  # the link is the board's


@pytest.mark.parametrize("status, why", [
    ({"p2p": ("timeout", 5.0)}, "cut before three times its healthy time and 10 s (a budget or a configured timeout)"),
    ({"p2p": ("timeout", 40.0), "burnin": ("timeout", 40.0), "hbm": ("skipped", 0.0), "memtest": ("skipped", 0.0)},
     "nothing computed: the GPUs themselves, or gpuhc, may be what hangs"),
    ({"p2p": ("fail", 1.0)}, "a task that answered (a failure has its own verdict)"),
])
def test_other_time_outs_are_not_evidence(status, why):
    oc = outcomes(**status)
    assert stall.stalled("p2p", oc["p2p"], oc, est) is None, why
    oc = outcomes(burnin=("timeout", 40.0))
    assert stall.stalled("burn-in", oc["burnin"], oc, est) is None  # only a link task's time-out reads as a link


def epilogs(kinds: list[str], times: list[float]):
    """The nccl-local result of consecutive epilogs, as the runner holds it: "stall" or "pass"."""
    from gpuhc.model.result import Result

    stored, out = None, []
    for kind, t in zip(kinds, times):
        oc = outcomes(nccl=("timeout", 40.0)) if kind == "stall" else outcomes()
        r = stall.stalled("nccl-local", oc["nccl"], oc, est) if kind == "stall" else \
            Result("nccl-local", Status.PASS, "busbw ok", "node")
        results, stored = hold([r], stored, t, None)
        out.append(results[0])
    return out


def test_two_epilogs_in_a_row_drain_and_reboot_and_one_warns():
    assert HOLDS["link"].runs == 2
    out = epilogs(["stall", "stall"], [0.0, 3600.0])
    assert [r.status for r in out] == [Status.WARN, Status.FAIL]
    assert out[0].action is Action.NONE and "drains when held 2 runs in a row, at most 7 d apart: evidence.link" \
        in out[0].message
    assert out[1].action is Action.DRAIN_REBOOT and out[1].message.endswith("held 2 runs over 1 h")


def test_an_epilog_whose_link_task_completes_or_a_week_apart_starts_again():
    assert [r.status for r in epilogs(["stall", "pass", "stall"], [0.0, 600.0, 1200.0])] == \
        [Status.WARN, Status.PASS, Status.WARN]
    assert epilogs(["stall", "stall"], [0.0, 8 * DAY])[-1].status is Status.WARN
