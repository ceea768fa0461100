"""The drain/resume policy: every node state x reason owner x verdict, then hysteresis and flaps."""

from __future__ import annotations

import itertools

import pytest

from gpuhc.model.result import Result, Status
from gpuhc.slurm.read.nodes import Node, parse_state
from gpuhc.slurm.policy.drain import (
    Act,
    Memory,
    PolicySettings,
    Verdict,
    decide,
    needs_slurm,
    out_of_service,
    reboot_pending,
    registered,
    rejudge,
    resumable,
    unjudged,
    unjudged_hold,
    verdict_of,
)
from gpuhc.slurm.policy.reason import parse_reason

NOW = 1_700_000_000.0
OURS = "gpuhc: xid79 gpu3 GPU has fallen off the bus"
S = PolicySettings(resume_after=3, cooldown_s=600, max_cooldown_s=4800, flap_window_s=3600)

# Every spelling of a node state the health check can meet. The expectations below are derived
# from what the state *means* (the flags on the right), not from the code under test.
STATES = {
    "idle": "IDLE",
    "alloc": "ALLOCATED",
    "mixed": "MIXED",
    "completing": "IDLE+COMPLETING",
    "alloc+drain": "ALLOCATED+DRAIN",  # draining: jobs still running
    "mixed+drain": "MIXED+DRAIN",
    "completing+drain": "IDLE+COMPLETING+DRAIN",
    "drained": "IDLE+DRAIN",
    "down": "DOWN",
    "down+drain": "DOWN+DRAIN",
    "fail": "IDLE+FAIL",  # an admin's State=FAIL
    "not-responding": "IDLE*",
    "down*": "DOWN*",
    "drained*": "IDLE+DRAIN*",
    "unknown": "UNKNOWN",
    "unknown+drain": "UNKNOWN+DRAIN",
    "reboot-requested": "IDLE+DRAIN+REBOOT_REQUESTED",
    "reboot-issued": "IDLE+DRAIN+REBOOT_ISSUED",
    "reboot-requested-in-service": "IDLE+REBOOT_REQUESTED",
}
# Out of service: the state itself keeps new jobs away (drained/draining, down, failed).
OUT_OF_SERVICE = {"alloc+drain", "mixed+drain", "completing+drain", "drained", "down", "down+drain", "fail",
                  "down*", "drained*", "unknown+drain", "reboot-requested", "reboot-issued"}
NOT_REGISTERED = {"unknown", "unknown+drain"}  # slurmctld has not heard from slurmd since it started
NOT_RESPONDING = {"not-responding", "down*", "drained*"}
REBOOT_PENDING = {"reboot-requested", "reboot-issued", "reboot-requested-in-service"}
Q1 = "gpuhc: xid79 gpu3 [q1]"
OWNERS = {
    "none": (None, None),
    "gpuhc-same": (OURS, "root"),
    "gpuhc-different": ("gpuhc: pcie gpu1 link width x8 < x16", "root"),
    "gpuhc-q1": (Q1, "root"),
    "gpuhc-retired": ("gpuhc: RETIRED xid79 gpu3", "root"),
    "admin": ("bad fan, ticket 4711", "alice"),
    "slurm": ("Not responding", "slurm"),
    "prolog-error": ("Prolog error", "root"),
}
VERDICTS = ("pass", "fail", "warn", "error", "breaker-open")
# What gpuhc remembers: it holds the node (drained it two hours ago, two healthy runs since), or
# it remembers nothing (never drained it, or its state was lost).
MEMORIES = {
    "holding": Memory(drained_at=NOW - 7200, reason=OURS, passes=2, cooldown_s=600),
    "none": Memory(),
}


def node(state: str = "idle", owner: str = "none", name: str = "n1") -> Node:
    raw = STATES[state]
    base, flags = parse_state(raw)
    reason, user = OWNERS[owner]
    return Node(name=name, state=base, flags=flags, reason=reason, reason_user=user,
                reason_time=NOW - 7200 if reason else None, partitions=("gpu",), raw_state=raw)


def expected(state: str, owner: str, verdict: str, mem: str) -> Act:
    """The specification, written as a table from the rules rather than derived from the code."""
    ours = owner.startswith("gpuhc")
    held = state in OUT_OF_SERVICE
    if verdict == "error":  # could not judge: never drains, never resumes
        return Act.NONE
    if verdict in ("pass", "warn"):
        if not ours:  # someone else's reason, or none: nothing of ours to resume
            return Act.NONE
        if state in NOT_REGISTERED:  # decide once slurmctld knows the node again
            return Act.NONE
        if state in REBOOT_PENDING:  # a reboot was asked for: the boot-time retest decides
            return Act.KEEP
        if not held:  # stale reason on a schedulable node: Slurm takes no RESUME; forget it
            return Act.NONE
        if owner in ("gpuhc-q1", "gpuhc-retired"):  # need a retest / an admin's release
            return Act.KEEP
        if state in NOT_RESPONDING:  # slurmctld does not hear from slurmd: decide next run
            return Act.NONE
        # Held by gpuhc and healthy: the third consecutive healthy run (two remembered) resumes;
        # without memory this is the first, so the node waits.
        return Act.RESUME if mem == "holding" else Act.WAIT
    # fail, with the breaker closed or open
    if owner in ("admin", "slurm", "prolog-error") and (held or state in REBOOT_PENDING | NOT_REGISTERED):
        return Act.KEEP  # theirs: a node they hold out, or a reboot they asked for
    # (another's reason on a node in service is stale, as Slurm 24.11 leaves it at a RESUME: replaced)
    if ours and held:  # already ours: keep the first reason, send nothing
        return Act.KEEP
    if held:  # no reason on an out-of-service node: adding ours takes no capacity
        return Act.DRAIN
    return Act.BLOCKED if verdict == "breaker-open" else Act.DRAIN


@pytest.mark.parametrize("state,owner,verdict,mem", list(itertools.product(STATES, OWNERS, VERDICTS, MEMORIES)))
def test_every_state_owner_verdict_memory(state, owner, verdict, mem):
    n = node(state, owner)
    memory = MEMORIES[mem]
    v = Verdict.FAIL if verdict == "breaker-open" else Verdict(verdict)
    d = decide(n, v, OURS if v is Verdict.FAIL else None, memory, NOW, S, breaker_open=verdict == "breaker-open")
    assert d.act is expected(state, owner, verdict, mem), d.why
    # Invariants that must hold whatever the table says.
    if not owner.startswith("gpuhc") and owner != "none":
        # never resume a reason gpuhc did not set, nor overwrite one on a node it holds out
        assert d.act is not Act.RESUME and not (d.act.touches_slurm and state in OUT_OF_SERVICE), d.why
        if d.act is Act.DRAIN:
            assert "replacing the reason left on a node in service" in d.why, d.why
    if d.act is Act.DRAIN:
        assert d.reason == OURS and d.memory.drained_at == NOW and d.memory.reason == OURS
        assert d.uses_capacity is (state not in OUT_OF_SERVICE)
    if d.act is Act.RESUME:
        assert n.reason.startswith("gpuhc:") and not d.memory.holding and d.memory.last_resume == NOW
        assert not (parse_reason(n.reason).quarantined or parse_reason(n.reason).retired)
        assert resumable(n) and state not in NOT_RESPONDING | REBOOT_PENDING
    if v in (Verdict.WARN, Verdict.PASS, Verdict.ERROR):
        assert d.act is not Act.DRAIN
    if v is Verdict.ERROR:
        assert d.memory == memory  # nothing learnt from a run that could not judge
    if d.act is Act.BLOCKED:
        assert d.memory.drained_at == memory.drained_at  # not recorded as if drained
    if d.act is Act.KEEP and owner.startswith("gpuhc") and mem == "holding":
        assert d.memory.drained_at == memory.drained_at  # the first drain time stays
    if v in (Verdict.PASS, Verdict.WARN) and not owner.startswith("gpuhc"):
        assert not d.memory.holding  # a hold someone else took over is forgotten
    in_flux = state in NOT_REGISTERED or (state in NOT_RESPONDING and state in OUT_OF_SERVICE)
    if v is not Verdict.FAIL and owner.startswith("gpuhc") and in_flux:
        assert d.memory == memory  # decided next run: nothing learnt, nothing forgotten
    if d.memory.flaps != memory.flaps:
        assert d.act is Act.DRAIN  # only a drain counts a flap
    assert d.why and "\n" not in d.why


def test_the_matrix_covers_every_state_kind():
    """The state groups the table is written from agree with what the states mean to Slurm, and
    the tagged gpuhc owners are what they claim to be."""
    for s in STATES:
        n = node(s)
        assert out_of_service(n) is (s in OUT_OF_SERVICE), s
        assert registered(n) is (s not in NOT_REGISTERED), s
        assert n.not_responding is (s in NOT_RESPONDING), s
        assert reboot_pending(n) is (s in REBOOT_PENDING), s
    assert parse_reason(OWNERS["gpuhc-q1"][0]).quarantined
    assert parse_reason(OWNERS["gpuhc-retired"][0]).retired


def test_gpuhc_same_reason_is_not_resent():
    d = decide(node("drained", "gpuhc-same"), Verdict.FAIL, OURS, Memory(drained_at=NOW - 60, reason=OURS), NOW, S)
    assert d.act is Act.KEEP and "same reason" in d.why


def test_gpuhc_keeps_its_first_reason_and_drain_time():
    first = Memory(drained_at=NOW - 60, reason=OWNERS["gpuhc-different"][0], passes=1)
    d = decide(node("drained", "gpuhc-different"), Verdict.FAIL, OURS, first, NOW, S)
    assert d.act is Act.KEEP and d.memory.drained_at == NOW - 60 and d.memory.passes == 0
    assert "keeping the first reason" in d.why


def test_stale_gpuhc_reason_on_node_in_service_is_replaced_by_a_drain():
    d = decide(node("idle", "gpuhc-different"), Verdict.FAIL, OURS, Memory(), NOW, S)
    assert d.act is Act.DRAIN and d.reason == OURS and d.uses_capacity


def test_admin_reason_keeps_node_even_when_it_fails_and_passes():
    n = node("drained", "admin")
    assert decide(n, Verdict.FAIL, OURS, Memory(), NOW, S).act is Act.KEEP
    d = decide(n, Verdict.PASS, None, Memory(drained_at=NOW - 9999, reason=OURS, passes=10), NOW, S)
    assert d.act is Act.NONE and not d.memory.holding  # our hold was taken over: forget it


# ------------------------------------------------------------------ hysteresis and cool-down


def run_healthy(memory: Memory, when: float, state="drained", owner="gpuhc-same"):
    return decide(node(state, owner), Verdict.PASS, None, memory, when, S)


def test_resume_needs_consecutive_passes_and_cooldown():
    m = Memory(drained_at=NOW, reason=OURS, cooldown_s=600)
    d1 = run_healthy(m, NOW + 100)
    assert d1.act is Act.WAIT and d1.memory.passes == 1 and "1/3 healthy runs" in d1.why
    d2 = run_healthy(d1.memory, NOW + 200)
    d3 = run_healthy(d2.memory, NOW + 300)
    assert d3.act is Act.WAIT and "cool-down 300/600s" in d3.why and "healthy runs" not in d3.why
    d4 = run_healthy(d3.memory, NOW + 600)
    assert d4.act is Act.RESUME and d4.memory.last_resume == NOW + 600


def test_a_failure_while_held_resets_the_pass_count():
    m = Memory(drained_at=NOW, reason=OURS, passes=2, cooldown_s=0)
    d = decide(node("drained", "gpuhc-same"), Verdict.FAIL, OURS, m, NOW + 10, S)
    assert d.act is Act.KEEP and d.memory.passes == 0
    assert run_healthy(d.memory, NOW + 20).act is Act.WAIT


def test_warn_counts_as_healthy_and_error_freezes_the_count():
    m = Memory(drained_at=NOW, reason=OURS, passes=1, cooldown_s=0)
    w = decide(node("drained", "gpuhc-same"), Verdict.WARN, None, m, NOW + 10, S)
    assert w.act is Act.WAIT and w.memory.passes == 2
    e = decide(node("drained", "gpuhc-same"), Verdict.ERROR, None, w.memory, NOW + 20, S)
    assert e.act is Act.NONE and e.memory.passes == 2


def test_lost_memory_falls_back_to_slurms_reason_time():
    d = run_healthy(Memory(), NOW)
    assert d.act is Act.WAIT and d.memory.drained_at == NOW - 7200 and d.memory.passes == 1


def test_a_drain_by_an_active_check_stands_until_a_run_of_that_check_passes():
    # The campaign's slow GPUs and silent data corruption: burn-in or gpu-speed drained the
    # node, and passive health checks, which cannot see a GPU that computes wrong or slow, used
    # to resume it onto jobs (docs/campaign.md). Only a run that judged that check may count.
    from gpuhc.checks import active_ids

    reason = "gpuhc: burn-in gpu5 checksum differs from its peers' (3 of 3 runs)"
    n = Node("n1", "IDLE", frozenset({"DRAIN"}), reason, "root", NOW - 9999, ("gpu",), "IDLE+DRAIN")
    m = Memory(drained_at=NOW - 9999, reason=reason, passes=50, cooldown_s=0)
    passive = [Result("xid", Status.PASS, "ok"), Result("ecc", Status.WARN, "corrected")]
    left = unjudged(passive, active_ids())
    assert {"burn-in", "gpu-speed"} <= left and not {"xid", "ecc"} & left
    d = decide(n, Verdict.PASS, None, m, NOW, S, unjudged_checks=left)
    assert d.act is Act.KEEP and "held for burn-in, an active check this run does not judge" in d.why
    assert d.memory.passes == 50  # no pass counted
    bootstrap = unjudged([*passive, Result("burn-in", Status.PASS, "checksums agree")], active_ids())
    assert decide(n, Verdict.PASS, None, m, NOW, S, unjudged_checks=bootstrap).act is Act.RESUME
    # A burn-in that could not judge (ERROR) is no verdict of health.
    assert unjudged_hold(reason, unjudged([Result("burn-in", Status.ERROR, "worker died")], active_ids())) == "burn-in"
    # Passive holds are the health check's to rejudge (rejudge()), even a check disabled since.
    assert unjudged_hold(OURS, left) is None and unjudged_hold("gpuhc: RETIRED burn-in gpu5", left) is None
    assert decide(node("drained", "gpuhc-same"), Verdict.PASS, None, m, NOW, S, unjudged_checks=left).act is Act.RESUME


def test_quarantined_and_retired_nodes_are_not_resumed_by_the_health_check():
    for reason in ("gpuhc: xid79 gpu3 [q1]", "gpuhc: RETIRED xid79 gpu3"):
        n = Node("n1", "IDLE", frozenset({"DRAIN"}), reason, "root", NOW - 9999, ("gpu",), "IDLE+DRAIN")
        d = decide(n, Verdict.PASS, None, Memory(drained_at=NOW - 9999, reason=reason, passes=50), NOW, S)
        assert d.act is Act.KEEP


def test_flapping_node_gets_doubling_capped_cooldown():
    m = Memory()
    t = NOW
    cooldowns = []
    for _ in range(6):
        d = decide(node("idle"), Verdict.FAIL, OURS, m, t, S)
        assert d.act is Act.DRAIN
        cooldowns.append(d.memory.cooldown_s)
        m = d.memory
        # heal: passes until the resume
        while True:
            t += 60
            h = run_healthy(m, t)
            m = h.memory
            if h.act is Act.RESUME:
                break
        t += 60  # fails again a minute after the resume: a flap
    assert cooldowns == [600, 1200, 2400, 4800, 4800, 4800]


def test_flap_count_resets_after_a_quiet_window():
    m = Memory(last_resume=NOW - 3601, flaps=3)
    d = decide(node("idle"), Verdict.FAIL, OURS, m, NOW, S)
    assert d.memory.flaps == 0 and d.memory.cooldown_s == 600


def test_intermittent_failure_never_resumes():
    m = Memory()
    acts = []
    pattern = [Verdict.FAIL, Verdict.PASS, Verdict.PASS] * 20  # two passes between failures
    for i, v in enumerate(pattern):
        n = node("idle") if not m.holding else node("drained", "gpuhc-same")
        d = decide(n, v, OURS if v is Verdict.FAIL else None, m, NOW + 600 * i, S)
        acts.append(d.act)
        m = d.memory
    assert acts.count(Act.DRAIN) == 1 and Act.RESUME not in acts


def test_resume_is_not_sent_where_slurm_refuses_it():
    for state in ("idle", "alloc", "mixed", "not-responding"):
        d = run_healthy(Memory(drained_at=NOW - 9999, reason=OURS, passes=9), NOW, state=state)
        assert d.act is Act.NONE and not d.memory.holding


# ------------------------------------------------------------------ small helpers


@pytest.mark.parametrize("verdict,holding,want", [
    (Verdict.PASS, False, False), (Verdict.WARN, False, False), (Verdict.ERROR, False, False),
    (Verdict.FAIL, False, True), (Verdict.PASS, True, True), (Verdict.WARN, True, True),
    (Verdict.ERROR, True, False), (Verdict.FAIL, True, True),
])
def test_slurm_is_asked_only_when_there_is_something_to_decide(verdict, holding, want):
    m = Memory(drained_at=NOW, reason=OURS) if holding else Memory()
    assert needs_slurm(verdict, m) is want


def test_verdict_of_results():
    r = lambda s: Result("x", s, "m")  # noqa: E731
    assert verdict_of([]) is Verdict.PASS
    assert verdict_of([r(Status.PASS), r(Status.NA)]) is Verdict.PASS
    assert verdict_of([r(Status.PASS), r(Status.WARN)]) is Verdict.WARN
    assert verdict_of([r(Status.WARN), r(Status.ERROR)]) is Verdict.ERROR
    assert verdict_of([r(Status.ERROR), r(Status.FAIL)]) is Verdict.FAIL


def test_memory_round_trip_and_tolerance():
    m = Memory(drained_at=NOW, reason=OURS, passes=2, flaps=1, cooldown_s=1200.0, last_resume=NOW - 5)
    assert Memory.from_dict(m.to_dict()) == m
    assert Memory.from_dict(None) == Memory()
    assert Memory.from_dict({"drained_at": "yesterday", "passes": True, "reason": 5}) == Memory()


def test_fail_needs_a_reason():
    with pytest.raises(ValueError):
        decide(node(), Verdict.FAIL, None, Memory(), NOW, S)


# ------------------------------------------------------------------ states in flux


def test_pending_reboot_keeps_the_hold_until_the_boot_time_retest():
    m = Memory(drained_at=NOW - 9999, reason=OURS, passes=9, cooldown_s=0)
    for state in ("reboot-requested", "reboot-issued", "reboot-requested-in-service"):
        d = run_healthy(m, NOW, state=state)
        assert d.act is Act.KEEP and d.memory == m and "reboot pending" in d.why


def test_not_responding_node_is_decided_once_slurmctld_hears_from_it():
    m = Memory(drained_at=NOW - 9999, reason=OURS, passes=2, cooldown_s=0)
    d = run_healthy(m, NOW, state="drained*")
    assert d.act is Act.NONE and d.memory == m  # the run at slurmd's start neither counts nor resumes
    assert run_healthy(d.memory, NOW + 60, state="drained").act is Act.RESUME


def test_stale_quarantine_or_retired_reason_on_a_node_in_service_is_forgotten():
    for owner in ("gpuhc-q1", "gpuhc-retired"):
        d = run_healthy(Memory(drained_at=NOW - 9999, reason=OURS, passes=9), NOW, state="idle", owner=owner)
        assert d.act is Act.NONE and not d.memory.holding


# ---------------------------------------------------------------------------- rejudge


@pytest.mark.parametrize("state", sorted(STATES))
@pytest.mark.parametrize("owner", sorted(OWNERS))
def test_the_health_check_rejudges_the_check_that_holds_a_node_only_while_gpuhc_holds_it_out(state, owner):
    """A node held for a check the health-check stage does not run (occupancy: a stray process)
    is judged by that check too, so that a pass of the other checks cannot resume it onto the
    stray. Only gpuhc's own hold, not retired, and only out of service: on a node in service a
    process on a GPU is a running job's."""
    n = node(state, owner)
    got = rejudge(n)
    held = owner.startswith("gpuhc") and owner != "gpuhc-retired" and state in OUT_OF_SERVICE
    assert got == ((parse_reason(n.reason).check,) if held else ()), (state, owner, got)
    if held:
        # the check id: the first word after "gpuhc:", without its code (xid79)
        assert got == ("pcie",) if owner == "gpuhc-different" else got == ("xid",)


def test_an_occupancy_hold_names_the_occupancy_check():
    n = node("drained", "none")
    from dataclasses import replace

    n = replace(n, reason="gpuhc: occupancy gpu1 holds 1 compute process: pid 48213 (python3, 20.0 GiB) [q1]")
    assert rejudge(n) == ("occupancy",)
    assert rejudge(None) == ()  # the handover read nothing: gpuhc holds nothing
