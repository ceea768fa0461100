"""``gpuhc sweep analyze [--apply]``: judge a finished round, start the next, drain culprits.

Runs from cron before ``submit``. Each call does at most one step of the current sweep:

1. if the round's jobs are still queued or running: say so and judge nothing (pending drains are
   still applied with ``--apply``, and what earlier rounds named is still reported);
2. judge every group of the round (:func:`gpuhc.sweep.campaign.judge_round`), remember per-node
   probe times and verdicts, and let the localizer plan the next round; submit it right away
   (``sweep.localize.auto_submit``), choosing known-good helpers among the nodes idle now;
3. remember every node culprit as a pending drain in the sweep index;
4. with ``--apply``, drain the pending culprits (this sweep's and earlier ones') through the
   drain policy (:mod:`gpuhc.slurm.policy.drain`): reason ``gpuhc: nccl-sweep <node> <evidence>
   [qN]``, never over a reason gpuhc did not write, not past the circuit breaker, and with the
   same post-drain recount as the health check. The ``[qN]`` quarantine tag matters: a node's
   own health check cannot see the fabric, so it must not resume the node after a few clean
   local runs; a ``gpuhc quarantine retest`` (or an admin's release) does. A node drained by
   sweeps again and again moves up the cycles and is RETIRED at ``slurm.quarantine.max_cycles``.
   A drain withheld or not verified stays pending and is retried next time. Link culprits (a
   pair or group that is only slow together) are reported, never drained: there is no single
   node to blame. Results made with the test-only fault hook never drain (unless a test says
   ``allow_fault_hook``).

Privileges: reading results needs nothing special; ``--apply`` needs a Slurm operator (or root)
to run ``scontrol update``. The probe jobs themselves never need any.
"""

from __future__ import annotations

import time
from typing import Any

from gpuhc.errors import EXIT_BREAKER, EXIT_INTERNAL, EXIT_UNHEALTHY, SlurmError
from gpuhc.sweep.campaign import advance, count_status, current_round, groups_of, judge_round, note_nodes, summary_lines
from gpuhc.sweep.judge import ERROR, Verdict
from gpuhc.sweep.slurmcli import SlurmCli
from gpuhc.sweep.store import SweepStore, SweepStoreError
from gpuhc.sweep.submit import submit_groups
from gpuhc.config.topology import parse_topology

CHECK_ID = "nccl-sweep"


def analyze_sweep(section: dict, store: SweepStore, apply: bool = False, submit: bool = True, config: Any = None,
                  cli: SlurmCli | None = None, scontrol: Any = None, now: float | None = None,
                  allow_fault_hook: bool = False) -> dict[str, Any]:
    cli = cli or (SlurmCli.from_config(config) if config is not None else SlurmCli())
    now = time.time() if now is None else now
    with store.locked() as index:
        sweep_id = index.get("current")
        record = store.load_sweep(sweep_id) if sweep_id else None
        if record is None:
            return {"lines": ["no sweep to analyze (run `gpuhc sweep submit` first)"]}
        out: dict[str, Any] = {"sweep_id": sweep_id, "lines": []}
        rnd = current_round(record)
        judged = True
        if rnd.get("judged_at") is None:
            judged = _judge(section, store, index, record, cli, submit, out, now)
        elif record["state"] != "done" and submit:
            # A planned round that was never submitted (--no-submit, or auto_submit off).
            unsent = [g for g in groups_of(rnd) if not g.job_id and not g.submit_error]
            if unsent:
                _submit_round(section, store, record, cli, out)
        findings = record.get("findings") or {}
        if judged:
            out["state"] = record["state"]
            remember_culprits(index, record, now)
        out["lines"] += summary_lines(record)
        # What this sweep has named so far: also while a follow-up round still runs, so that the
        # exit status (exit_status below) does not depend on how fast the probe jobs finish.
        out["round"] = current_round(record)["round"]
        out["culprits"] = findings.get("culprits", [])
        out["unresolved"] = findings.get("unresolved", [])
        if apply:
            # Also while a round is still running: drains held back earlier are retried.
            out["applied"] = apply_pending(index, record, store, config, scontrol, now, out["lines"], allow_fault_hook)
        store.save_sweep(record)
        return out


def exit_status(out: dict[str, Any]) -> int:
    """What a cron job or an admin's script learns from ``analyze`` (docs/sweep.md, "Exit codes"):
    did this call find a failure, act on it, or fail to act. Never how far the round has got:
    the same findings give the same status whether the next round is still running or not.

    4 a drain withheld by the circuit breaker (it stays pending); else 3 a drain that Slurm
    refused or that could not be verified (it stays pending); else 1 a culprit named in the
    current sweep (by any round judged so far) or a node drained by this call (a pending culprit
    of an earlier sweep too); else 0: nothing named, nothing done."""
    acts = {a.get("act") for a in out.get("applied", [])}
    if "blocked" in acts:
        return EXIT_BREAKER
    if acts & {"error", "unverified"}:
        return EXIT_INTERNAL
    if out.get("culprits") or "drain" in acts:
        return EXIT_UNHEALTHY
    return 0


def _judge(section: dict, store: SweepStore, index: dict, record: dict, cli: SlurmCli, submit: bool,
           out: dict, now: float) -> bool:
    """Step 2 above; False when the round is not finished yet."""
    rnd = current_round(record)
    groups = groups_of(rnd)
    ids = [g.job_id for g in groups if g.job_id]
    active = cli.active_jobs(section["job"]["name_prefix"], ids) if ids else {}
    mine = [j for j in ids if j in active]
    if mine:
        out["state"] = "waiting"
        out["lines"].append(f"sweep {record['id']} round {rnd['round']}: {len(mine)} of {len(ids)} jobs still queued or running")
        return False
    results, bad = store.round_results(record["id"], [g.id for g in groups])
    verdicts = judge_round(record, results, section, index.setdefault("history", {}))
    for gid, why in bad.items():
        # Not "no results": the job did write something, and the admin must hear what.
        verdicts[gid] = Verdict(ERROR, [why])
        rnd["verdicts"][gid] = verdicts[gid].to_dict()
        out.setdefault("warnings", []).append(f"{gid}: {why}")
    index.pop("stalled", None)  # the round is judged: whatever `submit` saw waiting is cleared
    note_nodes(index, record, verdicts, now)
    out["lines"] += drop_cleared(index, record, verdicts)
    counts = count_status(verdicts)
    out["verdicts"] = {gid: v.to_dict() for gid, v in verdicts.items()}
    out["lines"].append(f"sweep {record['id']} round {rnd['round']}: {counts['pass']} passed, {counts['fail']} failed, "
                        f"{counts['error']} could not be judged")
    for g in groups:
        v = verdicts[g.id]
        if v.status != "pass":
            out["lines"].append(f"  {g.id} {v.status} {','.join(g.nodes)}: {v.evidence}")
    try:
        idle, _ = cli.idle_nodes(section["partitions"])
        leaf_of = parse_topology(cli.topology())
    except SlurmError as e:
        out["lines"].append(f"sinfo failed ({e}): helpers chosen among all nodes of the sweep")
        idle, leaf_of = sorted({n for r in record["rounds"] for g in r["groups"] for n in g["nodes"]}), {}
    plan = advance(record, section, idle, leaf_of)
    if plan is not None and submit and section["localize"]["auto_submit"]:
        _submit_round(section, store, record, cli, out)
    elif plan is not None:
        out["lines"].append(f"round {current_round(record)['round']} planned ({len(plan.groups)} groups), not submitted")
    return True


def _submit_round(section: dict, store: SweepStore, record: dict, cli: SlurmCli, out: dict) -> None:
    rnd = current_round(record)
    groups = groups_of(rnd)
    _, part_of = _partitions(cli, section)
    out["lines"] += submit_groups(section, record, groups, store, cli, part_of)
    rnd["groups"] = [g.to_dict() for g in groups]
    rnd["submitted_at"] = time.time()


def _partitions(cli: SlurmCli, section: dict) -> tuple[list[str], dict[str, str]]:
    try:
        return cli.idle_nodes(section["partitions"])
    except SlurmError:
        return [], {}


def drain_reason(node: str, evidence: str, sweep_id: str, cycle: int = 1, retire: bool = False) -> str:
    """The first piece of evidence (wrong sums and hangs come first) and the sweep id: a 255-byte reason
    has no room for all of them; ``gpuhc sweep report`` has the rest. Tagged with the node's
    quarantine cycle, or RETIRED (the same formats as the health check's quarantine)."""
    from gpuhc.slurm.policy.reason import format_reason

    first = evidence.split("; ")[0] or "failed its probes"
    body = f"{CHECK_ID} {node} {first} (sweep {sweep_id})"
    return format_reason(body, retired=True) if retire else format_reason(body, cycle=cycle)


def remember_culprits(index: dict, record: dict, now: float) -> None:
    """Every node culprit of the sweep becomes a pending drain in the index, so that a drain that
    is withheld (circuit breaker), fails or is never applied is retried by a later ``analyze
    --apply``, whichever sweep is current by then. Nodes already handled are left alone."""
    pending = index.setdefault("pending_drains", {})
    applied = record.get("applied", {})
    for c in record["findings"].get("culprits", []):
        if c["kind"] != "node":
            continue
        name = c["nodes"][0]
        if applied.get(name, {}).get("act") in DONE or name in pending:
            continue
        pending[name] = {"sweep": record["id"], "evidence": c["evidence"], "group": c["group"], "since": now,
                         "fault_hook": bool(record.get("fault_hook"))}


DONE = ("drain", "keep")  # acts after which a pending drain is settled


def drop_cleared(index: dict, record: dict, verdicts: dict) -> list[str]:
    """A node with a pending drain from an earlier sweep that now passed a probe is fine by the
    newer evidence: its drain is dropped."""
    pending = index.get("pending_drains", {})
    lines = []
    for g in groups_of(current_round(record)):
        v = verdicts.get(g.id)
        if v is None or v.status != "pass":
            continue
        for n in g.nodes:
            entry = pending.get(n)
            if entry and entry["sweep"] != record["id"]:
                del pending[n]
                lines.append(f"{n}: pending drain from sweep {entry['sweep']} dropped: passed {g.id} in sweep {record['id']}")
    return lines


def apply_pending(index: dict, record: dict, store: SweepStore | None, config: Any, scontrol: Any, now: float,
                  lines: list[str], allow_fault_hook: bool = False) -> list[dict]:
    """Drain every pending culprit (this sweep's and earlier ones'); returns what was done per node.

    Drained or left alone (an admin's reason, already held): settled. Withheld by the circuit
    breaker, refused by Slurm, or not verified: stays pending, retried next time. Results made
    with the test-only fault hook never drain without ``allow_fault_hook``."""
    from gpuhc.slurm.policy.breaker import BreakerSettings
    from gpuhc.slurm.policy.drain import PolicySettings
    from gpuhc.slurm.act.scontrol import Scontrol

    pending = index.setdefault("pending_drains", {})
    if not pending:
        return []
    slurm = config.section("slurm") if config is not None else {}
    sc = scontrol or Scontrol.from_section(slurm)
    ctx = _DrainContext(sc, PolicySettings.from_section(slurm), BreakerSettings.from_section(slurm.get("breaker", {})),
                        int((slurm.get("quarantine") or {}).get("max_cycles", 3)), now,
                        observe=slurm.get("mode") == "observe")
    nodes_mem = index.setdefault("nodes", {})
    done = []
    for name in sorted(pending, key=lambda n: (pending[n]["since"], n)):
        entry = pending[name]
        if entry.get("fault_hook") and not allow_fault_hook:
            if entry["sweep"] != record["id"]:
                del pending[name]  # fake evidence from an old test sweep: forget it
                continue
            result = {"node": name, "act": "refused", "sweep": entry["sweep"],
                      "why": "this sweep's results were made with the test-only fault hook (GPUHC_SWEEP_FAULT): "
                             "not draining (`analyze --apply --allow-fault-hook` is for tests only)"}
        else:
            cycle = int(nodes_mem.get(name, {}).get("sweep_cycle", 0)) + 1
            result = ctx.apply(name, entry, cycle, lines)
            if result.get("act") == "drain" and result.get("verified"):
                nodes_mem.setdefault(name, {})["sweep_cycle"] = cycle
        lines.append(f"{name}: {result['act']}: {result['why']}" + (f" ({result['breaker']})" if "breaker" in result else ""))
        if result["act"] in DONE:
            del pending[name]
        _note_applied(record, store, entry["sweep"], name, result)
        done.append(result)
    return done


def _note_applied(record: dict, store: SweepStore | None, sweep_id: str, name: str, result: dict) -> None:
    """What was done goes into the culprit's own sweep record (shown by ``report``)."""
    keep = {k: v for k, v in result.items() if k != "node"}
    if sweep_id == record["id"] or store is None:
        record.setdefault("applied", {})[name] = keep
        return
    try:
        other = store.load_sweep(sweep_id)
    except SweepStoreError:
        other = None
    if other is not None:
        other.setdefault("applied", {})[name] = keep
        store.save_sweep(other)


class _DrainContext:
    """One node's drain through the health check's policy, carried out by the actuator: decide,
    circuit breaker, act with read-after-write verification, then the same post-drain recount."""

    def __init__(self, sc: Any, settings: Any, breaker: Any, max_cycles: int, now: float, observe: bool = False):
        self.sc, self.settings, self.breaker, self.max_cycles, self.now = sc, settings, breaker, max_cycles, now
        self.observe = observe  # slurm.mode: observe (docs/repair.md): decide and log, send nothing

    def apply(self, name: str, entry: dict, cycle: int, lines: list[str]) -> dict:
        from gpuhc.slurm.act.actuator import Actuator
        from gpuhc.slurm.policy.drain import Act, Memory, Verdict, decide

        retire = cycle >= self.max_cycles
        reason = drain_reason(name, entry["evidence"], entry["sweep"], cycle, retire)
        result: dict[str, Any] = {"node": name, "reason": reason, "sweep": entry["sweep"], "cycle": cycle}
        log = lambda text, loud=False: lines.append(f"{name}: {text}")  # noqa: E731
        try:
            done = Actuator(self.sc, self.breaker, log, spread=False, observe=self.observe).apply(
                name, lambda node, open_: decide(node, Verdict.FAIL, reason, Memory(), self.now, self.settings,
                                                 breaker_open=open_))
        except SlurmError as e:
            return {**result, "act": "error", "why": str(e)}
        decision = done.decision
        if done.precount is not None and done.precount.open:
            result["breaker"] = done.precount.message
        why = decision.why
        if decision.act is Act.DRAIN:
            why = (f"retired after {cycle} sweep drains (slurm.quarantine.max_cycles {self.max_cycles})" if retire
                   else f"quarantine cycle {cycle} of {self.max_cycles}") + f": {why}"
        result.update(act=decision.act.value, why=why)
        if done.observed:  # observe mode: stays pending, so going live drains it then
            result.update(act="observed", why=f"observe mode, nothing sent: would {decision.act.value}: {why}")
            return result
        if decision.act.touches_slurm:
            result["verified"] = done.verified
            if not done.verified:
                result["act"] = "unverified"
        if done.error:
            result["recount_error"] = done.error
        state = done.recount
        if state is not None and (state.open or done.undone):
            result["breaker"] = state.message
        if done.undone:
            result.update(act="blocked", verified=False,
                          why=f"concurrent drains: {state.drained} nodes held by gpuhc > cap {state.cap}, "
                              "this one ranked past it: drain undone")
        return result


def apply_culprits(record: dict, config: Any, scontrol: Any, now: float, lines: list[str],
                   allow_fault_hook: bool = False) -> list[dict]:
    """Drain this record's node culprits (no index: for a caller without the sweep store)."""
    index: dict = {}
    remember_culprits(index, record, now)
    return apply_pending(index, record, None, config, scontrol, now, lines, allow_fault_hook)
