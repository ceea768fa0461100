"""``gpuhc sweep analyze [--apply]``: judge a finished round, start the next, drain culprits.

Runs from cron before ``submit``. Each call does at most one step of the current sweep:

1. if the round's jobs are still queued or running: say so, change nothing;
2. judge every group of the round (:func:`gpuhc.sweep.campaign.judge_round`), remember per-node
   probe times and verdicts, and let the localizer plan the next round; submit it right away
   (``sweep.localize.auto_submit``), choosing known-good helpers among the nodes idle now;
3. with ``--apply``, drain every node culprit through the drain policy
   (:mod:`gpuhc.slurm.policy`): reason ``gpuhc: nccl-sweep <node> <evidence> [q1]``, never over
   a reason gpuhc did not write, and not past the circuit breaker. The ``[q1]`` quarantine tag
   matters: a node's own health check cannot see the fabric, so it must not resume the node
   after a few clean local runs; a ``gpuhc quarantine retest`` (or an admin's release) does.
   Link culprits (a pair or group that is only slow together) are reported, never drained:
   there is no single node to blame.

Privileges: reading results needs nothing special; ``--apply`` needs a Slurm operator (or root)
to run ``scontrol update``. The probe jobs themselves never need any.
"""

from __future__ import annotations

import time
from typing import Any

from gpuhc.errors import SlurmError
from gpuhc.sweep.campaign import advance, count_status, current_round, groups_of, judge_round, note_nodes, summary_lines
from gpuhc.sweep.plan import parse_topology
from gpuhc.sweep.slurmcli import SlurmCli
from gpuhc.sweep.store import SweepStore, SweepStoreError
from gpuhc.sweep.submit import submit_groups

CHECK_ID = "nccl-sweep"


def analyze_sweep(section: dict, store: SweepStore, apply: bool = False, submit: bool = True, config: Any = None,
                  cli: SlurmCli | None = None, scontrol: Any = None, now: float | None = None) -> dict[str, Any]:
    cli = cli or SlurmCli()
    now = time.time() if now is None else now
    with store.locked() as index:
        sweep_id = index.get("current")
        record = store.load_sweep(sweep_id) if sweep_id else None
        if record is None:
            return {"lines": ["no sweep to analyze (run `gpuhc sweep submit` first)"]}
        out: dict[str, Any] = {"sweep_id": sweep_id, "lines": []}
        rnd = current_round(record)
        if rnd.get("judged_at") is None:
            if not _judge(section, store, index, record, cli, submit, out, now):
                return out
        elif record["state"] != "done" and submit:
            # A planned round that was never submitted (--no-submit, or auto_submit off).
            unsent = [g for g in groups_of(rnd) if not g.job_id and not g.submit_error]
            if unsent:
                _submit_round(section, store, record, cli, out)
        out["state"] = record["state"]
        out["round"] = current_round(record)["round"]
        out["culprits"] = record["findings"].get("culprits", [])
        out["unresolved"] = record["findings"].get("unresolved", [])
        out["lines"] += summary_lines(record)
        if apply:
            out["applied"] = apply_culprits(record, config, scontrol, now, out["lines"])
        store.save_sweep(record)
        return out


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
    results: dict[str, dict | None] = {}
    for g in groups:
        try:
            results[g.id] = store.group_result(record["id"], g.id)
        except SweepStoreError as e:
            out["lines"].append(f"{g.id}: {e}")
            results[g.id] = None
    verdicts = judge_round(record, results, section, index.setdefault("history", {}))
    note_nodes(index, record, verdicts, now)
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


def drain_reason(node: str, evidence: str, sweep_id: str) -> str:
    """The first piece of evidence (wrong sums and hangs come first) and the sweep id: a 255-byte reason
    has no room for all of them; ``gpuhc sweep report`` has the rest."""
    from gpuhc.slurm.reason import format_reason

    first = evidence.split("; ")[0] or "failed its probes"
    return format_reason(f"{CHECK_ID} {node} {first} (sweep {sweep_id})", cycle=1)


def apply_culprits(record: dict, config: Any, scontrol: Any, now: float, lines: list[str]) -> list[dict]:
    """Drain node culprits not drained before by this sweep; returns what was done per node."""
    from gpuhc.slurm.breaker import BreakerSettings, evaluate
    from gpuhc.slurm.entry import carry_out
    from gpuhc.slurm.policy import Act, Memory, PolicySettings, Verdict, decide
    from gpuhc.slurm.scontrol import Scontrol

    slurm = config.section("slurm") if config is not None else {}
    sc = scontrol or Scontrol(binary=slurm.get("scontrol", "scontrol"), timeout_s=float(slurm.get("timeout_s", 10.0)))
    settings = PolicySettings.from_section(slurm)
    breaker_settings = BreakerSettings.from_section(slurm.get("breaker", {}))
    applied = record.setdefault("applied", {})
    done = []
    for c in record["findings"].get("culprits", []):
        if c["kind"] != "node":
            continue
        name = c["nodes"][0]
        if applied.get(name, {}).get("act") in ("drain", "keep"):
            continue
        reason = drain_reason(name, c["evidence"], record["id"])
        entry: dict[str, Any] = {"node": name, "reason": reason}
        try:
            node = sc.show_node(name)
            decision = decide(node, Verdict.FAIL, reason, Memory(), now, settings)
            if decision.act is Act.DRAIN and decision.uses_capacity:
                breaker = evaluate(sc.show_nodes(), name, breaker_settings)
                if breaker.open:
                    decision = decide(node, Verdict.FAIL, reason, Memory(), now, settings, breaker_open=True)
                    entry["breaker"] = breaker.message
            entry.update(act=decision.act.value, why=decision.why)
            if decision.act.touches_slurm:
                entry["verified"] = carry_out(sc, name, decision, lambda text, loud=False: lines.append(text))
                if not entry["verified"]:
                    entry["act"] = "unverified"
        except SlurmError as e:
            entry.update(act="error", why=str(e))
        lines.append(f"{name}: {entry['act']}: {entry['why']}" + (f" ({entry['breaker']})" if "breaker" in entry else ""))
        applied[name] = {k: v for k, v in entry.items() if k != "node"}
        done.append(entry)
    return done
