"""One actuator for every drain path: every ``scontrol update``/``reboot`` gpuhc sends, on every path
that changes a node (health check, prolog, epilog, ``sweep analyze --apply``, the quarantine
commands, the breaker's undo), is sent from inside :class:`gpuhc.slurm.act.actuator.Actuator`.

The proof watches the wire: the scontrol runner looks up its own call stack for every update it
is asked to send and records whether the actuator's code is on it. The node table behind it is
the same small one the flow tests use (``test_policy_entry.MiniSlurm``); real Slurm behaviour is
proven in tests/slurm_real/test_e2e.py.
"""

from __future__ import annotations

import ast
import sys

import pytest
from click.testing import CliRunner

from gpuhc.slurm.act.actuator import Actuator
from gpuhc.slurm.policy.drain import Act
from gpuhc.slurm.act.scontrol import Scontrol
from tests.helpers.minislurm import OK, XID, MiniSlurm, config, run
from tests.helpers.sweep_apply import SLURM, Config, FakeScontrol, idle, record
from tests.helpers.paths import REPO

ACTUATOR_CODE = {Actuator.carry_out.__code__, Actuator.reboot.__code__}
GPUHC = REPO / "gpuhc"


class Watch:
    """Wraps a runner; for each update or reboot it is asked to send, records (argv, sent from
    inside the actuator?)."""

    def __init__(self, inner):
        self.inner = inner
        self.sent: list[tuple[list[str], bool]] = []

    def __call__(self, argv, timeout):
        if argv[1] in ("update", "reboot"):
            frame, inside = sys._getframe(1), False
            while frame is not None:
                inside = inside or frame.f_code in ACTUATOR_CODE
                frame = frame.f_back
            self.sent.append((list(argv), inside))
        if argv[1] == "reboot":  # the node tables here know no reboots; Slurm accepts the request
            return 0, "", ""
        return self.inner(argv, timeout)

    def outside(self):
        return [argv for argv, inside in self.sent if not inside]


def watched_flow(tmp_path, monkeypatch, stage, slurm, results, **kw):
    w = Watch(slurm)
    monkeypatch.setattr("gpuhc.slurm.flows.entry.Flow.scontrol", lambda self: Scontrol(run=w, deadline=self.deadline))
    return w, run(tmp_path, monkeypatch, stage, None, results, **kw)


def test_the_watch_sees_an_update_sent_around_the_actuator():
    w = Watch(MiniSlurm({"n1": ("IDLE", None)}))
    Scontrol(run=w).drain("n1", "gpuhc: x")
    Actuator(Scontrol(run=w)).drain("n1", "gpuhc: y", "test")
    assert [inside for _, inside in w.sent] == [False, True]


def test_the_walk_from_the_actuator_to_scontrol_stays_short():
    """Issue 22: the walk of a drain, from ``Actuator.apply`` to the Slurm runner, stays as short
    as it was before the structure pass (5 calls in 3 modules: apply, carry_out, Scontrol.drain,
    Scontrol._call, SlurmCommand.call), so the dangerous path reads in one sitting."""
    from gpuhc.slurm.policy.drain import Decision, Memory

    walks = []

    def runner(argv, timeout):
        if argv[1] == "update" and "State=DRAIN" in argv:
            frame, walk = sys._getframe(1), []
            while frame.f_code is not Actuator.apply.__code__:
                walk.append((frame.f_globals["__name__"], frame.f_code.co_name))
                frame = frame.f_back
            walks.append([("gpuhc.slurm.act.actuator", "apply"), *reversed(walk)])
        return slurm(argv, timeout)

    slurm = MiniSlurm({"n1": ("IDLE", None)})
    Actuator(Scontrol(run=runner), spread=False).apply(
        "n1", lambda node, open_: Decision(Act.BLOCKED if open_ else Act.DRAIN, "x", Memory(), "gpuhc: xid x",
                                          uses_capacity=not open_))
    [walk] = walks
    assert len(walk) <= 5 and len({module for module, _ in walk}) <= 3, walk


@pytest.mark.parametrize("stage", ["passive", "prolog", "epilog"])
def test_health_check_prolog_and_epilog_drain_through_the_actuator(tmp_path, monkeypatch, stage):
    w, out = watched_flow(tmp_path, monkeypatch, stage, MiniSlurm({"n1": ("IDLE", None)}), [XID])
    assert out.acted and out.decision.act is Act.DRAIN
    assert [a[3] for a, _ in w.sent] == ["State=DRAIN"] and not w.outside()


def test_health_check_resume_goes_through_the_actuator(tmp_path, monkeypatch):
    slurm = MiniSlurm({"n1": ("IDLE", None)})
    cfg = config(tmp_path, resume_after=1)
    run(tmp_path, monkeypatch, "passive", slurm, [XID], cfg=cfg)
    w, out = watched_flow(tmp_path, monkeypatch, "passive", slurm, [OK], cfg=cfg)
    assert out.acted and out.decision.act is Act.RESUME
    assert [a[3] for a, _ in w.sent] == ["State=RESUME"] and not w.outside()


def test_breaker_undo_goes_through_the_actuator(tmp_path, monkeypatch):
    # Two other nodes drained by gpuhc in the same second as ours, with names ranked before
    # n3: over a cap of 2, n3 undoes its own drain.
    slurm = MiniSlurm({"a1": ("IDLE", None), "a2": ("IDLE", None), "n3": ("IDLE", None)})
    real_apply = slurm.apply

    def concurrent(argv):
        answer = real_apply(argv)
        if argv[1] == "update" and argv[3] == "State=DRAIN" and argv[2] == "NodeName=n3":
            slurm.nodes["a1"] = ["IDLE+DRAIN", "gpuhc: xid other"]
            slurm.nodes["a2"] = ["IDLE+DRAIN", "gpuhc: xid other"]
        return answer

    slurm.apply = concurrent
    cfg = config(tmp_path, breaker={"max_drained": 2})
    w, out = watched_flow(tmp_path, monkeypatch, "passive", slurm, [XID], cfg=cfg, node="n3")
    assert out.decision.act is Act.BLOCKED and not out.acted
    assert [a[3] for a, _ in w.sent] == ["State=DRAIN", "State=RESUME"] and not w.outside()


def test_sweep_apply_drains_through_the_actuator():
    from gpuhc.sweep.analyze import apply_culprits

    w = Watch(FakeScontrol(idle("n1", "n2", "n3", "n4")))
    lines: list[str] = []
    done = apply_culprits(record("s1", "n2"), Config(SLURM), Scontrol(run=w), 1000.0, lines)
    assert done[0]["act"] == "drain" and done[0]["verified"]
    assert [a[3] for a, _ in w.sent] == ["State=DRAIN"] and not w.outside()


def test_quarantine_commands_act_through_the_actuator(tmp_path, monkeypatch):
    from gpuhc.cli.quarantine_cmd import quarantine

    slurm = MiniSlurm({"n1": ("IDLE+DRAIN", "gpuhc: xid79 [q1]"), "n2": ("IDLE", None),
                       "n3": ("IDLE+DRAIN", "gpuhc: xid48")})
    w = Watch(slurm)
    monkeypatch.setattr("gpuhc.cli.quarantine_cmd._scontrol", lambda config, stage="bootstrap": Scontrol(run=w))
    cfg = tmp_path / "gpuhc.yaml"
    cfg.write_text("slurm:\n  syslog: false\n")
    cfg.chmod(0o600)
    for args in (["release", "n1"], ["retire", "n2"], ["retest", "--reboot", "n3", "--node", "elsewhere"]):
        res = CliRunner().invoke(quarantine, [*args, "--config", str(cfg)])
        assert res.exit_code == 0, res.output
    kinds = [a[1] if a[1] == "reboot" else a[3] for a, _ in w.sent]
    assert kinds == ["State=RESUME", "State=DRAIN", "reboot"] and not w.outside()


def test_no_module_but_the_actuator_sends_updates():
    """The static side: only the actuator calls scontrol's drain/resume/reboot; everybody else
    holds an Actuator (whose methods of the same names are the verified ones)."""
    offenders = []
    for path in sorted(GPUHC.rglob("*.py")):
        if path.name in ("actuator.py", "scontrol.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr in ("drain", "resume", "reboot") and not _is_actuator(node.func.value):
                offenders.append(f"{path.relative_to(GPUHC)}:{node.lineno}")
            if node.func.attr in ("carry_out", "undo_if_past_cap") and not _is_actuator(node.func.value):
                offenders.append(f"{path.relative_to(GPUHC)}:{node.lineno}")
    assert offenders == []


def _is_actuator(expr: ast.expr) -> bool:
    """``act.x``, ``actuator(...).x``, ``Actuator(...).x``, ``self.act.x``: names the code uses
    for an Actuator."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Attribute):
        return expr.attr in ("act", "actuator")
    return isinstance(expr, ast.Name) and expr.id in ("act", "actuator", "Actuator")


# ---------------------------------------------------------------------------- re-tags under the cap


def retag_setup(n3_reason: str, n3_state: str = "IDLE+DRAIN"):
    """Four nodes, a cap of 1: n1 held by gpuhc already (the cap reached); n3 as given."""
    from gpuhc.slurm.policy.breaker import BreakerSettings

    fake = FakeScontrol({**idle("n2", "n4"), "n1": ("IDLE+DRAIN", "gpuhc: xid79 gpu0"), "n3": (n3_state, n3_reason)})
    said: list[str] = []
    act = Actuator(Scontrol(run=fake), BreakerSettings(max_drained=1, max_drained_percent=None, settle_s=0.0),
                   log=lambda m, **k: said.append(m))
    return fake, act, said


def test_a_retag_that_would_make_a_node_count_passes_the_breaker():
    """Issue 45: a re-tag is sent as a drain that "takes no new capacity", but a retired node
    tagged ``[q1]`` again counts under the cap where it did not: at the cap it is not sent."""
    fake, act, said = retag_setup("gpuhc: RETIRED xid79 gpu3")
    assert act.drain("n3", "gpuhc: xid79 gpu3 [q1]", "quarantine") is False
    assert fake.updates == [] and "NOT re-tagging n3" in said[-1] and "circuit breaker open" in said[-1]


def test_a_retag_below_the_cap_and_a_retag_of_a_counted_node_are_sent():
    fake, act, _ = retag_setup("gpuhc: RETIRED xid79 gpu3")
    fake.nodes["n1"] = ["IDLE", None, "2026-11-26T10:00:00"]  # the cap is free again
    assert act.drain("n3", "gpuhc: xid79 gpu3 [q1]", "quarantine") is True
    # A node gpuhc holds already (or Slurm drained for a failed prolog) takes no new place: no count.
    for before in ("gpuhc: xid79 gpu3", "Prolog error"):
        fake, act, _ = retag_setup(before)
        assert act.drain("n3", "gpuhc: xid79 gpu3 [q2]", "quarantine") is True
        assert fake.nodes["n3"][1] == "gpuhc: xid79 gpu3 [q2]"
    # Retiring takes no place under the drain cap (retirements have their own): sent at the cap.
    fake, act, _ = retag_setup("gpuhc: xid79 gpu3 [q2]")
    assert act.drain("n3", "gpuhc: RETIRED xid79 gpu3", "retire") is True


def test_slurms_drain_after_a_failed_prolog_takes_a_place_under_the_cap():
    """One cap for every way out: a node Slurm drained because the prolog exited non-zero counts,
    and ranks before gpuhc's own fresh drains (gpuhc cannot undo it)."""
    from gpuhc.slurm.policy.breaker import BreakerSettings, survey
    from gpuhc.slurm.read.nodes import parse_show_node

    fake = FakeScontrol({**idle("n2", "n4"), "n1": ("IDLE+DRAIN", "gpuhc: xid79 gpu0", "2026-11-26T09:00:00"),
                         "n3": ("IDLE+DRAIN", "Prolog error", "2026-11-26T10:00:00")})
    nodes = parse_show_node("".join(fake.line(n) for n in sorted(fake.nodes)))
    s = survey(nodes, "n1", BreakerSettings(max_drained=1, max_drained_percent=None))
    assert [n.name for n in s.held] == ["n3", "n1"] and s.state.hooks == 1 and s.state.open
    assert s.past_cap("n1") and "(1 by Slurm after a failed prolog or epilog)" in s.state.message
