"""`gpuhc quarantine list|retest|release|retire`: the admin's handle on nodes gpuhc holds.

NODES is a Slurm hostlist (``gpu[001-004,010]``). The quarantine state lives in the drain
reason (see :mod:`gpuhc.slurm.quarantine`), so these commands work from any machine that can
run scontrol — except ``retest`` of a node other than this one, which can only ask Slurm to
reboot it (``--reboot``): the bootstrap checks need the node's GPUs.
"""

from __future__ import annotations

import json
import sys

import click

from gpuhc.cli.common import load, node_name, passthrough, source_options
from gpuhc.logtext import escape


def _expand(text: str | None) -> list[str]:
    if not text:
        return []
    import hostlist

    try:
        names = hostlist.expand_hostlist(text)
    except hostlist.BadHostlist as e:
        raise click.BadParameter(f"{text!r}: {e}", param_hint="NODES") from None
    return list(dict.fromkeys(names))


def _scontrol(config, stage: str = "bootstrap"):
    import time

    from gpuhc.slurm.scontrol import Scontrol

    s = config.section("slurm")
    return Scontrol(binary=s["scontrol"], sinfo=s["sinfo"], timeout_s=float(s["timeout_s"]),
                    deadline=time.monotonic() + float(s["deadline_s"][stage]))


def _actuator(config):
    """Every drain and resume goes through the actuator (read, act, verify)."""
    from gpuhc.slurm.actuator import Actuator
    from gpuhc.slurm.breaker import BreakerSettings

    return Actuator(_scontrol(config), BreakerSettings.from_section(config.section("slurm")["breaker"]))


def _report(results, json_mode: bool) -> int:
    if json_mode:
        click.echo(json.dumps([{"node": r.node, "ok": r.ok, "message": r.message} for r in results], indent=2))
    else:
        for r in results:
            click.echo(escape(f"{r.node}: {'ok' if r.ok else 'FAILED'}: {r.message}"))
    return 0 if all(r.ok for r in results) else 1


@click.group()
def quarantine() -> None:
    """Nodes gpuhc drained: list, retest, release, retire.

    The cycle count lives in the reason (`gpuhc: ... [q2]`, `gpuhc: RETIRED ...`), so it survives
    reboots and is the same on every machine. A node is retired after
    slurm.quarantine.max_cycles failed retests and is never resumed automatically.
    """


@quarantine.command("list")
@click.argument("nodes", required=False)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml.")
@click.option("--json", "json_mode", is_flag=True, help="JSON instead of a table.")
@passthrough
def list_cmd(kw: dict) -> None:
    """Nodes held by gpuhc (all, or those in NODES): drained, quarantine cycle, retired."""
    from gpuhc.slurm.quarantine import listing

    config = load(kw)
    nodes = _scontrol(config).show_nodes()
    wanted = set(_expand(kw.get("nodes")))
    if wanted:
        nodes = [n for n in nodes if n.name in wanted]
    rows = listing(nodes)
    if kw["json_mode"]:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    if not rows:
        click.echo("no node is held by gpuhc")
        return
    import time

    click.echo(f"{'NODE':12} {'PHASE':10} {'CYCLE':5} {'STATE':16} {'SINCE':19} REASON")
    for r in rows:
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r.since)) if r.since else "-"
        click.echo(escape(f"{r.node:12} {r.phase:10} {r.cycle:<5} {r.state:16} {since:19} {r.reason}"))


@quarantine.command()
@click.argument("nodes", required=False)
@click.option("--reboot", is_flag=True, help="For nodes other than this one: ask Slurm to reboot them "
              "(needs RebootProgram); their boot-time retest decides.")
@source_options
@passthrough
def retest(kw: dict) -> None:
    """Retest NODES (default: this node) with the bootstrap stage; resume, re-quarantine or retire.

    Only this node can be retested here (the checks need its GPUs). A retest is the admin's word
    that the cause was dealt with (a GPU reset, a reseated cable): kernel-log incidents held
    from before it no longer count; new ones do. Exit 0 when every node retested here was
    resumed (or there was nothing to retest), 1 when one was re-quarantined, retired or could
    not be verified, 3 when gpuhc could not judge.
    """
    me = node_name(kw.get("hostname"))
    names = _expand(kw.get("nodes")) or [me]
    others = [n for n in names if n != me]
    config = load(kw)
    code = 0
    if others:
        if not (kw["reboot"] or config.section("slurm")["quarantine"]["reboot"]):
            raise click.UsageError(
                f"{','.join(others)} is not this node ({me}): a retest needs the node's GPUs. Run "
                "`gpuhc quarantine retest` on it (clush/pdsh), or pass --reboot to have Slurm reboot it "
                "and let its boot-time retest decide.")
        from gpuhc.slurm.admin import reboot_for_retest

        s = config.section("slurm")
        code = _report(reboot_for_retest(_actuator(config), others, s["quarantine"]["reboot_nextstate"]),
                       kw["json_mode"])
    if me in names:
        code = max(code, _retest_here(kw, config))
    sys.exit(code)


def _retest_here(kw: dict, config) -> int:
    from gpuhc.cli.common import run_options_from
    from gpuhc.slurm import entry
    from gpuhc.slurm.policy import Memory, verdict_of
    from gpuhc.slurm.admin import apply_plan
    from gpuhc.slurm.quarantine import phase, plan_retest
    from gpuhc.slurm.reason import build_reason

    opts = run_options_from(kw, "bootstrap", config=config)
    s = config.section("slurm")
    log = entry.Log(f"gpuhc quarantine retest {opts.hostname}", s.get("log_file"), bool(s.get("syslog", True)))
    flow = entry.Flow(stage="bootstrap", opts=opts, log=log)
    act = entry.actuator(flow)
    sc = act.sc
    node = sc.node(opts.hostname)  # before minutes of checks: is there anything to retest?
    if phase(node) is None:
        log(f"not held by gpuhc (state {node.raw_state}, reason {node.reason!r}): nothing to retest")
        return 0
    from gpuhc.slurm.handover import acknowledge_kernel_log

    acknowledge_kernel_log(opts.state_dir, flow.now())
    report = entry.run_checks(flow)
    if report is None:
        return 3
    verdict = verdict_of(report.results)
    log(entry.summary_line(report, verdict))
    node = sc.node(opts.hostname)  # re-read: an admin may have acted during the checks
    evidence = build_reason(report.results) if verdict.value == "fail" else None
    plan = plan_retest(node, verdict, evidence, int(s["quarantine"]["max_cycles"]))
    log(plan.why + (f": {plan.reason}" if plan.reason else ""), loud=plan.act != "resume")
    if plan.act == "none":
        return report.exit_code
    ok = apply_plan(act, node, plan)
    if ok and plan.act in ("retire", "resume"):  # the hooks (docs/slurm.md, "Remediation ladder")
        from gpuhc.slurm.remediate import fire

        fire(plan.act, {"node": opts.hostname, "reason": plan.reason, "why": plan.why}, config, log)
    if ok and plan.act == "resume":
        old = entry.load_memory(flow)
        entry.save_memory(flow, Memory(flaps=old.flaps, last_resume=flow.now()), None)
    if ok and plan.act == "requarantine" and s["quarantine"]["reboot"]:
        act.reboot(opts.hostname, plan.reason, s["quarantine"]["reboot_nextstate"])
        log("reboot requested for the next retest")
    if not ok:
        log(f"{plan.act} not verified: Slurm shows {sc.node(opts.hostname).reason!r}", loud=True)
        return 1
    return 0 if plan.act == "resume" else 1


@quarantine.command()
@click.argument("nodes")
@click.option("--force", is_flag=True, help="Also resume nodes whose reason gpuhc did not set.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml.")
@click.option("--json", "json_mode", is_flag=True)
@passthrough
def release(kw: dict) -> None:
    """Resume NODES held by gpuhc, retired ones included, and clear their quarantine."""
    from gpuhc.slurm.admin import release as do_release

    config = load(kw)
    names = _expand(kw["nodes"])
    code = _report(do_release(_actuator(config), names, kw["force"]), kw["json_mode"])
    _forget_here(names, config)
    sys.exit(code)


@quarantine.command()
@click.argument("nodes")
@click.option("--note", default="", help="Text for the reason instead of gpuhc's last evidence.")
@click.option("--force", is_flag=True, help="Also replace reasons gpuhc did not set.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml.")
@click.option("--json", "json_mode", is_flag=True)
@passthrough
def retire(kw: dict) -> None:
    """Mark NODES RETIRED (`gpuhc: RETIRED ...`): drained, never resumed automatically."""
    from gpuhc.slurm.admin import retire as do_retire

    config = load(kw)
    sys.exit(_report(do_retire(_actuator(config), _expand(kw["nodes"]), kw["note"], kw["force"]), kw["json_mode"]))


def _forget_here(names: list[str], config) -> None:
    """Released on this very node: drop the local hold so the health check starts afresh, and
    acknowledge the held kernel-log incidents (the release is the admin's word that they were
    dealt with; without this the next health check would drain again for the same old Xid).
    Elsewhere the node's own next health check notices the resume and does the same."""
    me = node_name(None)
    if me not in names:
        return
    import time

    from gpuhc.slurm.handover import acknowledge_kernel_log
    from gpuhc.slurm.policy import Memory
    from gpuhc.state import StateStore, default_state_dir

    state_dir = default_state_dir(config.data.get("state_dir"))
    try:
        acknowledge_kernel_log(state_dir, time.time())
        with StateStore(state_dir).transaction() as doc:
            nodes = doc.setdefault("slurm", {}).setdefault("nodes", {})
            old = Memory.from_dict(nodes.get(me))
            nodes[me] = Memory(flaps=old.flaps, last_resume=old.last_resume).to_dict()
    except Exception as e:
        click.echo(f"gpuhc: warning: local state not cleared: {e}", err=True)
