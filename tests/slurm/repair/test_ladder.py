"""The remediation ladder's pure decisions (gpuhc/slurm/repair/ladder.py) and its reason tags."""

from __future__ import annotations

import pytest

from gpuhc.model.result import Action
from gpuhc.slurm.repair.ladder import Do, Finding, LadderMemory, LadderSettings, next_step
from gpuhc.slurm.read.nodes import Node
from gpuhc.slurm.policy.drain import Verdict
from gpuhc.slurm.policy.reason import format_reason, parse_reason

BODY = "ecc gpu1 row remap pending"
S = LadderSettings(enabled=True, ladders={Action.RESET_GPU: ("reset", "reboot"), Action.DRAIN_REBOOT: ("reboot",),
                                          Action.DRAIN_TICKET: ()},
                   reset_attempts=2, reset_timeout_s=30, reboot_timeout_s=600, max_cycles=3)
RESET_FINDING = Finding(Action.RESET_GPU, (1,))


def node(reason: str | None, state: str = "IDLE", flags=("DRAIN",)) -> Node:
    return Node("n1", state, frozenset(flags), reason, "root", 1000.0, ("gpu",), f"{state}+DRAIN")


def step(n: Node, memory=LadderMemory(), verdict=Verdict.FAIL, finding=RESET_FINDING, busy=None, now=5000.0, s=S,
         resets_closed=None):
    return next_step(n, verdict, finding, busy, memory, now, s, resets_closed=resets_closed)


def test_reset_then_reset_then_reboot_then_retire():
    st = step(node(format_reason(BODY)))
    assert (st.do, st.label, st.memory.resets) == (Do.RESET, "reset 1/2", 1)
    assert st.reason == f"gpuhc: {BODY} [reset 1/2]"
    assert st.memory.deadline == 5030.0
    st = step(node(st.reason), st.memory)
    assert (st.do, st.label, st.reason) == (Do.RESET, "reset 2/2", f"gpuhc: {BODY} [reset 2/2]")
    st = step(node(st.reason), st.memory)
    assert (st.do, st.reason) == (Do.REBOOT, f"gpuhc: {BODY} [reboot]")
    assert st.memory.step == "reboot" and st.memory.deadline == 5600.0
    # The boot-time retest failed: [q1] without the tag; the resets are spent: reboot again.
    st = step(node(format_reason(BODY, 1)), st.memory, now=5300.0)
    assert (st.do, st.reason) == (Do.REBOOT, f"gpuhc: {BODY} [q1] [reboot]")
    st = step(node(format_reason(BODY, 3)), st.memory, now=5400.0)
    assert (st.do, st.reason) == (Do.RETIRE, f"gpuhc: RETIRED {BODY}")


def test_never_touches_a_node_it_did_not_drain():
    for reason in ("admin: PSU swap", "Not responding", None, "GPUHC check later"):
        st = step(node(reason), LadderMemory(resets=1, step="reset"))
        assert st.do is Do.NONE and st.reason is None, reason
    assert "never touched" in step(node("admin: PSU swap")).why


def test_in_service_retired_off_and_healthy_do_nothing():
    assert step(node(format_reason(BODY), state="IDLE", flags=())).do is Do.NONE
    assert step(node(format_reason(BODY, retired=True))).do is Do.NONE
    off = LadderSettings(**{**S.__dict__, "enabled": False})
    assert step(node(format_reason(BODY)), s=off).do is Do.NONE
    for v in (Verdict.PASS, Verdict.WARN, Verdict.ERROR):
        assert step(node(format_reason(BODY)), verdict=v).do is Do.NONE


def test_busy_waits_and_keeps_the_count():
    mem = LadderMemory(resets=1)
    st = step(node(format_reason(BODY)), mem, busy="job 42")
    assert (st.do, st.memory) == (Do.WAIT, mem) and "job 42" in st.why


def test_a_closed_reset_rung_goes_to_the_reboot_and_spends_the_episodes_resets():
    # The climb says why the rung is closed (a stray, NVML hung, the procedure failed) instead of
    # passing a made-up count; the ladder records the resets as spent so the next run reboots too.
    tagged = node(format_reason(BODY))
    assert step(tagged, LadderMemory(resets=1)).do is Do.RESET  # open: the second reset
    st = step(tagged, LadderMemory(resets=1), resets_closed="a stray process holds a GPU")
    assert (st.do, st.reason, st.memory.resets, st.memory.step) == (Do.REBOOT, f"gpuhc: {BODY} [reboot]", 2, "reboot")
    # After the reboot's failed retest ([q1]), the rung stays spent: a reboot again, no reset.
    again = step(node(format_reason(BODY, 1)), st.memory, now=5300.0)
    assert (again.do, again.memory.resets) == (Do.REBOOT, 2)
    # A ladder without a reboot rung: nothing left, said, and the resets spent in the memory.
    only_reset = LadderSettings(**{**S.__dict__, "ladders": {Action.RESET_GPU: ("reset",)}})
    st = step(tagged, LadderMemory(resets=0, step="reset", since=4000.0, deadline=4030.0), s=only_reset,
              resets_closed="NVML timed out in this run")
    assert st.do is Do.NONE and "exhausted" in st.why
    assert st.memory == LadderMemory(resets=2, step="reset", since=4000.0, deadline=4030.0)
    # A count past the setting (reset_attempts lowered since) is never lowered by a closed rung.
    assert step(tagged, LadderMemory(resets=5), resets_closed="stray").memory.resets == 5
    # Everything before the rungs decides as it did: busy, retirement, a node not gpuhc's.
    assert step(tagged, busy="job 7", resets_closed="stray").do is Do.WAIT
    assert step(node(format_reason(BODY, 3)), resets_closed="stray").do is Do.RETIRE
    assert step(node("admin: PSU swap"), resets_closed="stray").do is Do.NONE


def test_action_picks_the_ladder():
    assert step(node(format_reason(BODY)), finding=Finding(Action.DRAIN_TICKET, (1,))).do is Do.NONE
    st = step(node(format_reason(BODY)), finding=Finding(Action.DRAIN_REBOOT, (1,)))
    assert st.do is Do.REBOOT
    # A finding of no GPU in particular cannot be reset: straight to the reboot.
    assert step(node(format_reason(BODY)), finding=Finding(Action.RESET_GPU, ())).do is Do.REBOOT
    assert step(node(format_reason(BODY)), finding=None).do is Do.NONE
    only_reset = LadderSettings(**{**S.__dict__, "ladders": {Action.RESET_GPU: ("reset",)}})
    st = step(node(format_reason(BODY)), LadderMemory(resets=2), s=only_reset)
    assert st.do is Do.NONE and "exhausted" in st.why


def test_reboot_waits_until_its_deadline_then_counts_a_failed_cycle():
    mem = LadderMemory(resets=2, step="reboot", since=5000.0, deadline=5600.0)
    pending = node(format_reason(BODY, 1, step="reboot"), state="IDLE", flags=("DRAIN", "REBOOT_REQUESTED"))
    st = step(pending, mem, now=5100.0)
    assert (st.do, st.why) == (Do.WAIT, "reboot pending")
    # Rebooted, the boot-time retest has not answered: healthy or not, still waiting.
    down = node(format_reason(BODY, 1, step="reboot") + " : reboot issued : reboot complete", state="DOWN", flags=())
    assert step(down, mem, now=5200.0, verdict=Verdict.PASS).do is Do.WAIT
    st = step(down, mem, now=5601.0)
    assert (st.do, st.reason, st.memory.step) == (Do.FAIL_CYCLE, f"gpuhc: {BODY} [q2]", None)
    last = node(format_reason(BODY, 2, step="reboot"), state="DOWN", flags=())
    st = step(last, mem, now=5601.0)
    assert (st.do, st.reason) == (Do.RETIRE, f"gpuhc: RETIRED {BODY}")


def test_a_reboot_tag_without_memory_starts_the_clock():
    st = step(node(format_reason(BODY, step="reboot"), state="DOWN", flags=()), LadderMemory(), now=7000.0)
    assert st.do is Do.WAIT and st.memory.deadline == 7600.0


def test_memory_round_trip_and_garbage():
    mem = LadderMemory(resets=2, step="reboot", since=1.0, deadline=2.0)
    assert LadderMemory.from_dict(mem.to_dict()) == mem
    for bad in (None, [], "x", {"resets": "many"}, {"resets": None, "since": "x"}):
        assert LadderMemory.from_dict(bad).resets == 0


def test_step_tags_parse_and_never_come_from_evidence():
    r = parse_reason(f"gpuhc: {BODY} [q2] [reset 1/2]")
    assert (r.body, r.cycle, r.step) == (BODY, 2, "reset 1/2")
    r = parse_reason(f"gpuhc: {BODY} [reboot] : reboot issued : reboot complete")
    assert (r.body, r.cycle, r.step) == (BODY, 0, "reboot")
    assert parse_reason(f"gpuhc: {BODY}").step is None
    # Kernel text cannot forge a tag: its brackets become parentheses.
    forged = format_reason("xid message [reboot] [reset 1/2]")
    assert parse_reason(forged).step is None and "(reboot)" in forged
    with pytest.raises(ValueError):
        format_reason(BODY, step="rm -rf")
    # The tag survives truncation of a long body.
    long = format_reason("x " * 200, 1, step="reset 2/2")
    assert long.endswith(" [q1] [reset 2/2]") and len(long.encode()) <= 255


def test_config_refuses_a_ladder_out_of_order(tmp_path):
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError

    p = tmp_path / "gpuhc.yaml"
    p.write_text("slurm:\n  remediation:\n    enabled: true\n    actions:\n      reset_gpu: [reboot, reset]\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert "gpuhc.yaml:5" in str(e.value) and "reset_gpu" in str(e.value)
    p.write_text("slurm:\n  remediation:\n    enabled: true\n    actions:\n      drain_ticket: [reboot]\n")
    cfg = load_config(str(p))
    assert LadderSettings.from_section(cfg.section("slurm")).ladders[Action.DRAIN_TICKET] == ("reboot",)


def test_policy_keeps_a_tagged_reason_as_the_same_evidence():
    from gpuhc.slurm.policy.drain import Act, Memory, PolicySettings, decide

    for held in (format_reason(BODY, step="reset 1/2"), format_reason(BODY, 1, step="reboot") + " : reboot issued",
                 format_reason(BODY, 2)):
        d = decide(node(held), Verdict.FAIL, format_reason(BODY), Memory(), 5000.0, PolicySettings())
        assert (d.act, d.why) == (Act.KEEP, "already drained by gpuhc (same reason)"), held
    d = decide(node(format_reason(BODY, 1)), Verdict.FAIL, format_reason("xid other"), Memory(), 5000.0,
               PolicySettings())
    assert d.act is Act.KEEP and "keeping the first reason" in d.why


def test_the_schema_offers_exactly_the_ladders():
    from gpuhc.slurm import settings
    from gpuhc.slurm.repair.ladder import LADDERS

    assert [list(x) for x in LADDERS] == list(settings._LADDERS)
