"""`gpuhc quarantine list|retest|release|retire`: the admin's handle on nodes gpuhc holds.

NODES is a Slurm hostlist (``gpu[001-004,010]``). The quarantine state lives in the drain
reason (see :mod:`gpuhc.slurm.repair.quarantine`), so these commands work from any machine that can
run scontrol — except ``retest`` of a node other than this one, which can only ask Slurm to
reboot it (``--reboot``): the bootstrap checks need the node's GPUs.
"""

from __future__ import annotations

import json
import os
import sys

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.tables import Table, asked, table_options
from gpuhc.cli.common import SourceArgs, load, node_name, source_options
from gpuhc.text.logtext import escape


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
    from gpuhc.model.deadline import Deadline
    from gpuhc.slurm.act.scontrol import Scontrol

    s = config.section("slurm")
    return Scontrol.from_section(s, deadline=Deadline.after(float(s["deadline_s"][stage])))


def _actuator(config):
    """Every drain and resume goes through the actuator (read, act, verify)."""
    from gpuhc.slurm.act.actuator import Actuator
    from gpuhc.slurm.policy.breaker import BreakerSettings

    s = config.section("slurm")
    return Actuator(_scontrol(config), BreakerSettings.from_section(s["breaker"]), observe=s["mode"] == "observe")


def _report(results, json_mode: bool) -> int:
    if json_mode:
        click.echo(json.dumps([{"node": r.node, "ok": r.ok, "message": r.message} for r in results], indent=2))
    else:
        for r in results:
            click.echo(escape(f"{r.node}: {'ok' if r.ok else 'FAILED'}: {r.message}"))
    return 0 if all(r.ok for r in results) else 1


@click.group(context_settings=CONTEXT)
def quarantine() -> None:
    """Nodes gpuhc drained: list, retest, release, retire; the GPU reset's plan.

    The cycle count lives in the reason (`gpuhc: ... [q2]`, `gpuhc: RETIRED ...`), so it survives
    reboots and is the same on every machine. A node is retired after
    slurm.quarantine.max_cycles failed retests and is never resumed automatically.
    """


LIST = Table({"node": 12, "phase": 10, "cycle": 5, "state": 16, "since": 19, "reason": 0}, times=frozenset({"since"}))


@quarantine.command("list")
@click.argument("nodes", required=False)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml.")
@click.option("--json", "json_mode", is_flag=True, help="JSON instead of a table.")
@table_options(LIST)
def list_cmd(nodes: str | None, config_path: str | None, json_mode: bool, fmt: str | None, parsable: bool,
             noheader: bool) -> None:
    """Nodes held by gpuhc (all, or those in NODES): drained, quarantine cycle, retired."""
    from gpuhc.slurm.repair.quarantine import listing

    config = load(SourceArgs(config_path=config_path))
    held = _scontrol(config).show_nodes()
    wanted = set(_expand(nodes))
    if wanted:
        held = [n for n in held if n.name in wanted]
    rows = listing(held)
    if json_mode:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    if not rows and not asked(fmt, parsable, noheader):
        click.echo("no node is held by gpuhc")
        return
    for line in LIST.lines([r.to_dict() for r in rows], fmt, parsable, noheader):
        click.echo(line)


@quarantine.command()
@click.argument("nodes", required=False)
@click.option("--reboot", is_flag=True, help="For nodes other than this one: ask Slurm to reboot them "
              "(needs RebootProgram); their boot-time retest decides.")
@source_options
def retest(src: SourceArgs, nodes: str | None, reboot: bool) -> None:
    """Retest NODES (default: this node) with the bootstrap stage; resume, re-quarantine or retire.

    Only this node can be retested here (the checks need its GPUs). A retest is the admin's word
    that the cause was dealt with (a GPU reset, a reseated cable): kernel-log incidents held
    from before it no longer count; new ones do. Exit 0 when every node retested here was
    resumed (or there was nothing to retest), 1 when one was re-quarantined, retired or could
    not be verified, 3 when gpuhc could not judge.
    """
    me = node_name(src.hostname)
    names = _expand(nodes) or [me]
    others = [n for n in names if n != me]
    config = load(src)
    code = 0
    if others:
        if not (reboot or config.section("slurm")["quarantine"]["reboot"]):
            raise click.UsageError(
                f"{','.join(others)} is not this node ({me}): a retest needs the node's GPUs. Run "
                "`gpuhc quarantine retest` on it (clush/pdsh), or pass --reboot to have Slurm reboot it "
                "and let its boot-time retest decide.")
        from gpuhc.slurm.repair.admin import reboot_for_retest

        s = config.section("slurm")
        code = _report(reboot_for_retest(_actuator(config), others, s["quarantine"]["reboot_nextstate"]),
                       src.json_mode)
    if me in names:
        code = max(code, _retest_here(src, config))
    sys.exit(code)


def _retest_here(src: SourceArgs, config) -> int:
    from gpuhc.cli.common import run_options_from
    from gpuhc.slurm.flows.frame import Flow
    from gpuhc.slurm.repair.retest import retest as do_retest

    opts = run_options_from(src, "bootstrap", config=config)
    return do_retest(Flow.for_command(opts, "gpuhc quarantine retest")).code


@quarantine.command()
@click.argument("nodes")
@click.option("--force", is_flag=True, help="Also resume nodes whose reason gpuhc did not set.")
@click.option("--retest", is_flag=True, help="First run the bootstrap checks on this node; resume only on a pass. "
              "Run it on the node (clush/pdsh) or as a short Slurm job (docs/repair.md).")
@source_options
def release(src: SourceArgs, nodes: str, force: bool, retest: bool) -> None:
    """Resume NODES held by gpuhc, retired ones included, and clear their quarantine.

    With --retest, NODES must be this node: the bootstrap checks run first (minutes), and the
    node is resumed only when they pass. A failure leaves it as it was (exit 1); a retest that
    could not judge leaves it too (exit 3). Inside a Slurm job on a node an admin put back in
    service behind a maintenance reservation, a failure drains it again with gpuhc's reason.
    """
    from gpuhc.slurm.repair.admin import release as do_release

    config = load(src)
    names = _expand(nodes)
    if retest:
        sys.exit(_release_after_retest(src, config, names, force))
    results = do_release(_actuator(config), names, force)
    code = _report(results, src.json_mode)
    from gpuhc.slurm.repair.retest import after_release

    after_release(results, config, names, node_name(None))
    sys.exit(code)


def _release_after_retest(src: SourceArgs, config, names: list[str], force: bool) -> int:
    from gpuhc.cli.common import run_options_from
    from gpuhc.slurm.flows.frame import Flow
    from gpuhc.slurm.repair.retest import release_after_retest

    me = node_name(src.hostname)
    if names != [me]:
        raise click.UsageError(f"--retest runs the checks on the node's own GPUs: {','.join(names)} is not this node "
                               f"({me}). Run `gpuhc quarantine release --retest {names[0]}` on it (clush/pdsh), or as "
                               "a short Slurm job there (docs/repair.md).")
    opts = run_options_from(src, "bootstrap", config=config)
    results, least = release_after_retest(Flow.for_command(opts, "gpuhc quarantine release --retest"), force)
    return max(least, _report(results, src.json_mode) if results else 0)


@quarantine.command()
@click.argument("nodes")
@click.option("--note", default="", help="Text for the reason instead of gpuhc's last evidence.")
@click.option("--force", is_flag=True, help="Also replace reasons gpuhc did not set.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="gpuhc.yaml.")
@click.option("--json", "json_mode", is_flag=True)
def retire(nodes: str, note: str, force: bool, config_path: str | None, json_mode: bool) -> None:
    """Mark NODES RETIRED (`gpuhc: RETIRED ...`): drained, never resumed automatically."""
    from gpuhc.slurm.repair.admin import after_retire
    from gpuhc.slurm.repair.admin import retire as do_retire

    config = load(SourceArgs(config_path=config_path))
    results = do_retire(_actuator(config), _expand(nodes), note, force)
    code = _report(results, json_mode)

    def flow_here():
        from gpuhc.cli.common import run_options_from
        from gpuhc.slurm.flows.frame import Flow

        opts = run_options_from(SourceArgs(config_path=config_path), "bootstrap", config=config)
        return Flow.for_command(opts, "gpuhc quarantine retire")

    for line in after_retire(results, config, node_name(None), flow_here):
        click.echo(line)
    sys.exit(code)


@quarantine.command("reset")
@click.option("--plan", "plan_only", is_flag=True, help="Print what would be stopped, reset and restarted; change "
              "nothing (required: the reset itself is the remediation ladder's, slurm.remediation).")
@click.option("--gpus", help="GPU indices to reset, e.g. 1,3 (default: every GPU NVML lists).")
@source_options
def reset_cmd(src: SourceArgs, plan_only: bool, gpus: str | None) -> None:
    """The GPU reset procedure on this node, NVIDIA's way (docs/repair.md "The GPU reset procedure").

    Lists what holds the GPUs (processes with /dev/nvidia* open, the configured services), the
    GPUs that must reset together by NVIDIA's rule, every step in order, and the path the
    ladder takes here (reset, or reboot first and why: slurmd holding the GPUs, MIG mode).
    Reads only: no service is stopped, no setting changed, no GPU reset. Exit 0 when the reset
    could go ahead, 1 when something blocks it (Slurm showing a job on the node included).
    """
    from gpuhc.cli.common import parse_gpu_list, run_options_from
    from gpuhc.slurm.repair.reset_probe import plan_now
    from gpuhc.sources import build_sources

    if not plan_only:
        raise click.UsageError("only --plan is offered here: the reset itself runs from the remediation ladder "
                               "(slurm.remediation.enabled), where a failure falls to the reboot rung")
    config = load(src)
    remediation = config.section("slurm")["remediation"]
    only = parse_gpu_list(gpus)
    reading = build_sources(run_options_from(src, "passive", config=config).sources).nvml.read()
    wanted = tuple(only) if only else tuple(g.index for g in reading.gpus)
    from gpuhc.model.deadline import Deadline
    from gpuhc.slurm.repair.remediate import gpu_processes, jobs_of, mig_gpus

    sources = build_sources(run_options_from(src, "passive", config=config).sources)
    try:  # what Slurm shows on this node: a reset with a job there kills it
        jobs = jobs_of(_scontrol(config).node(node_name(src.hostname)))
    except Exception as e:  # unknown is not idle
        jobs = f"Slurm could not be asked about this node ({escape(str(e))[:200]})"
    plan = plan_now(remediation, wanted, reading, Deadline.after(float(remediation["reset"]["command_timeout_s"])),
                    mig_gpus(sources), jobs, run_options_from(src, "passive", config=config).state_dir,
                    lambda: gpu_processes(sources))
    from gpuhc.slurm.repair.gpureset import run_argv
    from gpuhc.slurm.repair.reset_plan import slurm_note

    slurm = config.section("slurm")  # which release, from the configured scontrol: `slurm 24.11.1`
    got = run_argv([slurm.get("scontrol") or "scontrol", "--version"], float(slurm.get("timeout_s") or 10.0))
    note = slurm_note(got.output.strip() if got.ok else None)
    if src.json_mode:
        click.echo(json.dumps({**plan.to_dict(), "slurm": note}, indent=2))
    else:
        for line in [note, *plan.lines()]:
            click.echo(escape(line))
    sys.exit(0 if plan.ok else 1)



@quarantine.command("forget")
@click.argument("node")
@source_options
def forget_cmd(src: SourceArgs, node: str) -> None:
    """Forget NODE's lemon history on purpose: its drains so far no longer count toward the lemon
    rule (docs/repair.md "Lemon memory"). Logged in the decision log. Runs on the node itself
    (the history is in its state): `clush -w NODE gpuhc quarantine forget NODE`. A release or an
    admin's resume does the same by itself.
    """
    import getpass

    from gpuhc.cli.common import run_options_from
    from gpuhc.slurm.flows.frame import Flow
    from gpuhc.slurm.repair.lemon_memory import forget

    me = node_name(src.hostname)
    if node != me:
        raise click.UsageError(f"{node} is not this node ({me}): the lemon history is in the node's own state. "
                               f"Run it there: clush -w {node} gpuhc quarantine forget {node}")
    config = load(src)
    flow = Flow.for_command(run_options_from(src, "bootstrap", config=config), "gpuhc quarantine forget")
    try:
        who = getpass.getuser()
    except Exception:  # no passwd entry for the uid: the number says it
        who = f"uid {os.getuid()}"
    forget(flow, who)
    click.echo(escape(f"{node}: lemon history forgotten (drains before now no longer count)"))
