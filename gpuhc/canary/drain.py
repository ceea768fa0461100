"""Drain the nodes of GPUs with confirmed silent data corruption, through the one gate.

The reason is ``gpuhc: RETIRED canary <gpu> <finding>``: RETIRED because a GPU that computes
wrong numbers, again on an immediate retest, is a part to replace; a reset does not make its
results trustworthy, so neither the health check's clean runs nor the repair ladder may resume
the node (gpuhc/slurm/policy/drain.py leaves RETIRED nodes alone). The act goes through the
actuator (gpuhc/slurm/act/actuator.py) with the health check's drain policy: observe mode, the
circuit breaker, read-after-write verification and the audit log all see it. A drain withheld or
not verified stays pending in the fleet state and is tried again next time.
"""

from __future__ import annotations

from typing import Any

from gpuhc.errors import SlurmError

SETTLED = ("drain", "keep")


def reason(entry: dict) -> str:
    from gpuhc.slurm.policy.reason import format_reason

    return format_reason(f"canary {entry['gpu']} {entry.get('finding') or 'silent data corruption'}", retired=True)


def apply_pending(doc: dict, config: Any, scontrol: Any, now: float, lines: list[str]) -> list[dict]:
    """Drain every node of the fleet state's ``pending`` (the admin side's step); a node whose
    drain settled leaves it, the others are tried again next time."""
    pending = doc.get("pending") or {}
    done = []
    for node in sorted(pending, key=lambda n: (pending[n]["since"], n)):
        result = drain_node(node, pending[node], config, scontrol, now, lines)
        if result["act"] in SETTLED:
            del pending[node]
        done.append(result)
    return done


def drain_node(node: str, entry: dict, config: Any, scontrol: Any, now: float, lines: list[str]) -> dict:
    """Drain ``node`` RETIRED for ``entry`` (``gpu``, ``finding``) through the actuator; what was
    done (``act``: drain, keep, observed, unverified, blocked, error) and why."""
    from gpuhc.slurm.act.actuator import Actuator
    from gpuhc.slurm.act.scontrol import Scontrol
    from gpuhc.slurm.policy.breaker import BreakerSettings
    from gpuhc.slurm.policy.drain import Memory, PolicySettings, Verdict, decide

    slurm = config.section("slurm") if config is not None else {}
    sc = scontrol or Scontrol.from_section(slurm)
    settings = PolicySettings.from_section(slurm)
    gate = BreakerSettings.from_section(slurm.get("breaker", {}))
    observe = slurm.get("mode") == "observe"
    why_text = reason(entry)
    result: dict[str, Any] = {"node": node, "gpu": entry["gpu"], "reason": why_text}
    log = lambda text, loud=False: lines.append(f"{node}: {text}")  # noqa: E731
    try:
        got = Actuator(sc, gate, log, spread=False, observe=observe).apply(
            node, lambda nd, open_: decide(nd, Verdict.FAIL, why_text, Memory(), now, settings, breaker_open=open_))
    except SlurmError as e:
        result.update(act="error", why=str(e))
    else:
        d = got.decision
        result.update(act=d.act.value, why=d.why)
        if got.observed:
            result.update(act="observed", why=f"observe mode, nothing sent: would {d.act.value}: {d.why}")
        elif d.act.touches_slurm and not got.verified:
            result["act"] = "unverified"
        if got.undone:
            result.update(act="blocked", why="concurrent drains past the circuit breaker's cap: drain undone")
        if got.precount is not None and got.precount.open:
            result["breaker"] = got.precount.message
    lines.append(f"{node}: {result['act']}: {result['why']}")
    return result
