"""``gpuhc doctor``: is gpuhc wired into Slurm as it should be, on this node and on the admin host?

It reads slurm.conf locally (gpuhc/slurm/read/slurmconf.py) and judges each setting gpuhc depends on
(gpuhc/slurm/policy/wiring.py), then what only this machine can say: its own name, Slurm's GPU count for
it, the ``hosts:`` entry it gets, the textfile directory. With the Slurm clients it also asks
``sinfo`` for every node, to show which ``hosts:`` entry and which expected GPU count each one
gets; on the admin host (``--admin-host``, or where install.sh made the sweep's user) the sweep
account's rights (``sacctmgr``) and ``sweep.results_dir``. Read only: it changes nothing.

Exit 0 when nothing blocks, 1 on a blocker, 2 on a usage or config error (docs/slurm.md,
"gpuhc doctor").
"""

from __future__ import annotations

import json
import os
import pwd

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.common import node_name

SWEEP_USER = "gpuhc"  # the system user install.sh --admin-host makes


def _sh(argv: list[str], slurm: dict, timeout: float = 20.0) -> tuple[str | None, str | None]:
    """(output, None) or (None, why): a Slurm client through the one wrapper."""
    from gpuhc.errors import SlurmError, SlurmUnreachable
    from gpuhc.slurm.act.command import SlurmCommand

    try:
        return SlurmCommand.from_section(slurm, timeout_s=timeout).call(argv), None
    except (SlurmError, SlurmUnreachable) as e:
        return None, str(e)


def release(slurm: dict) -> str | None:
    """The Slurm release of this machine's clients (``sinfo --version``: no controller call)."""
    out, _ = _sh(["sinfo", "--version"], slurm, 10.0)
    parts = (out or "").split()
    return parts[1] if len(parts) >= 2 else None


def expected_rows(names: list[str], conf, overrides: list, top_count) -> list[dict]:
    """Per node: the ``hosts:`` entries that match it, Slurm's GPU count, the config's, and the
    count gpu-count holds it to (docs/slurm.md, "Expected GPUs"; a baseline, being the node's
    own file, is not seen from here)."""
    from gpuhc.config.hosts import host_matches
    from gpuhc.slurm.read.slurmconf import gpus_in

    rows = []
    for name in names:
        line = conf.node(name) if conf is not None else None
        try:
            slurm = gpus_in(line.settings.get("gres")) if line is not None else None
        except ValueError:
            slurm = None
        entries, count, replayed = [], top_count, False
        for i, (pattern, settings) in enumerate(overrides):
            if host_matches(name, pattern):
                entries.append(f"hosts[{i}] {pattern}")
                count = (settings.get("node") or {}).get("expected_gpus", count)
                sources = settings.get("sources") or {}
                replayed = replayed or bool(sources.get("test_scenario") or sources.get("nvml_scenario"))
        if replayed and count is not None:
            # Site test mode (README, "Try it under Slurm without GPUs"): the node plays a recorded
            # GPU node, and a run holds it to the config's count, not to Slurm's (it has no GPUs).
            expected, source = count, "config (a recorded node: site test mode)"
        elif slurm is not None:
            expected, source = slurm, "slurm.conf"
        elif count is not None:
            expected, source = count, "config"
        else:
            expected, source = None, "none: a node with NVIDIA GPUs on its PCI bus must have them all in NVML"
        status = "ok"
        if slurm is not None and count is not None and count != slurm and not replayed:
            status = "warn"  # the config says otherwise; Slurm's count wins
        rows.append({"node": name, "hosts_entries": entries, "slurm_gpus": slurm, "config_gpus": count,
                     "expected": expected, "from": source, "status": status})
    return rows


def _fstype(path: str) -> str | None:
    """The file system type ``path`` is on (/proc/self/mounts, longest mount point), None when
    ``path`` is not a directory."""
    if not os.path.isdir(path):
        return None
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3:
                    mnt = fields[1].replace("\\040", " ")
                    if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, kind = mnt, fields[2]
    except OSError:
        pass
    return kind


def _owner(path: str) -> str | None:
    try:
        return pwd.getpwuid(os.stat(path).st_uid).pw_name
    except (OSError, KeyError):
        return None


def _textfile_problem(path: str | None) -> str | None:
    if not path:
        return None
    from gpuhc.errors import GpuhcError
    from gpuhc.files.fsutil import check_dir_chain

    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return "its directory does not exist (node_exporter's textfile collector reads it)"
    try:
        check_dir_chain(directory, "textfile directory", leaf="any")
    except (GpuhcError, OSError) as e:
        return str(e)
    return None


def is_admin_host() -> bool:
    try:
        pwd.getpwnam(SWEEP_USER)
    except KeyError:
        return False
    return True


def acts_findings(config, now: float | None = None) -> list:
    """What this install does by itself (gpuhc/catalog/acts.py), and in observe mode what it would have
    done in the last 7 days, read from the event logs it can see."""
    from gpuhc.catalog.acts import acts
    from gpuhc.slurm.policy import wiring

    rows = acts(config)
    on = ", ".join(a.name for a in rows if a.on) or "nothing"
    off = ", ".join(a.name for a in rows if not a.on) or "nothing"
    out = [wiring.Finding("acts", wiring.INFO, f"on: {on}; off: {off}", "gpuhc config acts says when, what it "
                          "costs, and the setting of each")]
    if config.section("slurm").get("mode") != "observe":
        return out
    from gpuhc.errors import GpuhcError
    from gpuhc.fleet import observed

    try:
        seen, _notes = observed.gather(config, 7 * 86400.0, now=now)
    except GpuhcError as e:
        out.append(wiring.Finding("observed", wiring.INFO, f"what observe mode would have done: not read ({e})",
                                  "gpuhc fleet observed --event-log FILE, where the nodes' event logs are"))
        return out
    if not seen:
        found = "in the last 7 days no run decided anything"
    else:
        acts_seen: dict[str, set] = {}
        for r in seen:
            acts_seen.setdefault(r.act, set()).add(r.node)
        found = "in the last 7 days it would have " + "; ".join(
            f"{act} {len(nodes)} node(s) ({', '.join(sorted(nodes)[:5])}{', ...' if len(nodes) > 5 else ''})"
            for act, nodes in sorted(acts_seen.items()))
        from gpuhc.slurm.policy.reason import parse_reason

        causes = sorted({m.check for r in seen if (m := parse_reason(r.reason)) is not None and m.check})
        if causes:
            found += f"; causes: {', '.join(causes[:8])}"
    out.append(wiring.Finding("observed", wiring.INFO, found, "gpuhc drain-report --observed names each; "
                              "when they read right: slurm.mode: enforce (README, \"Observe, then enforce\")"))
    return out


def gather(config, conf, conf_error: str | None, admin: bool, ask_slurm: bool, node: str, first=()) -> dict:
    from gpuhc.slurm.policy import wiring
    from gpuhc.slurm.read.slurmconf import slurm_gpus

    slurm = config.section("slurm")
    rel = release(slurm) if ask_slurm else None
    findings = list(first)
    if conf is None:
        findings.append(wiring.Finding("slurm.conf", wiring.BLOCKER, conf_error or "not found",
                                       "run doctor where slurm.conf is, or name it: --slurm-conf FILE"))
    else:
        findings += wiring.judge(conf, config.data, rel)
    mine = slurm_gpus(node, conf.path) if conf is not None else None
    own = config.section("node").get("expected_gpus")
    if mine is not None:
        findings.append(wiring.Finding(f"this node ({node})", wiring.OK, f"Slurm gives it {mine[0]} GPU(s) "
                                       f"({mine[1]}): gpu-count holds it to that"))
    elif conf is not None:
        findings.append(wiring.Finding(f"this node ({node})", wiring.INFO, "slurm.conf does not define it: "
                                       f"expected GPUs from the baseline or the config ({own})"))
    findings += acts_findings(config)
    textfile = config.section("output").get("prometheus_textfile")
    findings.append(wiring.textfile(textfile, _textfile_problem(textfile)))
    rows: list[dict] = []
    if ask_slurm:
        out, err = _sh(["sinfo", "-N", "-h", "-o", "%N"], slurm)
        if err is not None:
            findings.append(wiring.Finding("sinfo", wiring.WARN, f"could not list the nodes ({err})",
                                           "run doctor where the Slurm clients reach slurmctld"))
        else:
            names = list(dict.fromkeys(n.strip() for n in out.split() if n.strip()))
            rows = expected_rows(names, conf, config.overrides, (config.top.get("node") or {}).get("expected_gpus"))
            for r in rows:
                if r["status"] == "warn":
                    findings.append(wiring.Finding(f"expected GPUs of {r['node']}", wiring.WARN,
                                                   f"slurm.conf gives {r['slurm_gpus']}, the config {r['config_gpus']} "
                                                   f"({', '.join(r['hosts_entries']) or 'node.expected_gpus'}): "
                                                   "Slurm's count is used", "drop the config's count for it"))
    if admin:
        sweep = config.section("sweep")
        answer, err = _sh(["sacctmgr", "-n", "-P", "show", "user", SWEEP_USER, "format=user,adminlevel"], slurm)
        findings.append(wiring.sweep_rights(SWEEP_USER, answer, err))
        path = sweep.get("results_dir")
        findings.append(wiring.results_dir(path, _fstype(path) if path else None, _owner(path) if path else None,
                                           SWEEP_USER))
    return {"node": node, "slurm_conf": conf.path if conf is not None else None, "release": rel,
            "admin_host": admin, "worst": wiring.worst(findings), "findings": [f.as_dict() for f in findings],
            "nodes": rows}


WIDE = 120  # columns below which the table's folded cells (paths over 3 or 4 lines) read worse than rows


def render(result: dict) -> None:
    import shutil
    import sys

    if not sys.stdout.isatty() or shutil.get_terminal_size((80, 24)).columns < WIDE:
        for line in plain(result):
            click.echo(line)
        return
    _render_table(result)


def plain(result: dict) -> list[str]:
    """One finding a line, its fix on the next: what a pipe, a log or an 80-column terminal gets
    (nothing folded; `--json` for a program)."""
    from gpuhc.text.logtext import escape

    where = f"slurm.conf {result['slurm_conf'] or '(none)'}, Slurm {result['release'] or 'release unknown'}"
    out = [escape(f"gpuhc doctor on {result['node']}: {where}")]
    for f in result["findings"]:
        out.append(escape(f"{f['status']:8} {f['setting']}: {f['found']}"))
        if f["fix"]:
            out.append(escape(f"{'':8} fix: {f['fix']}"))
    if result["nodes"]:
        out.append("expected GPUs of each node sinfo lists (nodes | hosts: entries | slurm.conf | config | expected | from):")
        out += [escape("  " + " | ".join(str(v) for v in group)) for group in _grouped(result["nodes"])]
    out.append(f"worst: {result['worst']}")
    return out


def _render_table(result: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(soft_wrap=False)
    style = {"ok": "green", "info": "cyan", "warn": "yellow", "blocker": "bold red"}
    where = f"slurm.conf {result['slurm_conf'] or '(none)'}, Slurm {result['release'] or 'release unknown'}"
    table = Table(title=f"gpuhc doctor on {escape(result['node'])}: {escape(where)}", title_justify="left")
    for col in ("setting", "status", "found", "fix"):
        table.add_column(col, overflow="fold")
    for f in result["findings"]:
        table.add_row(escape(f["setting"]), f"[{style[f['status']]}]{f['status']}[/]", escape(f["found"]),
                      escape(f["fix"]))
    console.print(table)
    if result["nodes"]:
        nodes = Table(title="expected GPUs of each node sinfo lists", title_justify="left")
        for col in ("nodes", "hosts: entries", "slurm.conf", "config", "expected", "from"):
            nodes.add_column(col, overflow="fold")
        for group in _grouped(result["nodes"]):
            nodes.add_row(*(escape(str(v)) for v in group))
        console.print(nodes)
    console.print(f"worst: [{style[result['worst']]}]{result['worst']}[/]")


def _grouped(rows: list[dict]) -> list[tuple]:
    """Nodes with the same answer on one line, as a hostlist (a thousand nodes in a few lines)."""
    import hostlist

    groups: dict[tuple, list[str]] = {}
    for r in rows:
        key = (", ".join(r["hosts_entries"]) or "-", "-" if r["slurm_gpus"] is None else r["slurm_gpus"],
               "-" if r["config_gpus"] is None else r["config_gpus"],
               "-" if r["expected"] is None else r["expected"], r["from"])
        groups.setdefault(key, []).append(r["node"])
    return [(hostlist.collect_hostlist(names), *key) for key, names in groups.items()]


@click.command("doctor", context_settings=CONTEXT)
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="gpuhc.yaml (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).")
@click.option("--slurm-conf", type=click.Path(dir_okay=False), help="slurm.conf (default $SLURM_CONF, "
              "/etc/slurm/slurm.conf, then a configless slurmd's copy).")
@click.option("--node", "hostname", help="This node's Slurm name (default $SLURMD_NODENAME, then the host name).")
@click.option("--admin-host/--no-admin-host", default=None, help="Also check the sweep's account and results_dir "
              "(default: where the user gpuhc exists, as install.sh --admin-host makes it).")
@click.option("--no-sinfo", is_flag=True, help="Ask Slurm nothing: slurm.conf and this machine only.")
@click.option("--json", "json_mode", is_flag=True, help="JSON instead of tables.")
def doctor(config_path, slurm_conf, hostname, admin_host, no_sinfo, json_mode) -> None:
    """Check how gpuhc is wired into Slurm: each setting, what it is, and the fix.

    Exit 0: nothing blocks; 1: a blocker; 2: a usage or config error.
    """
    from gpuhc.config.load import load_config
    from gpuhc.errors import ConfigError
    from gpuhc.slurm.read.slurmconf import SlurmConfError, read

    node = node_name(hostname)
    first = []
    try:
        config = load_config(config_path, node)
    except ConfigError as e:
        # What the hooks do with this file, said where an admin looks (gpuhc/state/config_guard.py);
        # the rest of the page judges the config they run on instead.
        from gpuhc.state.config_guard import stand_in
        from gpuhc.slurm.policy import wiring

        config, problem = stand_in(config_path, None, node, e)
        first.append(wiring.Finding("config", wiring.BLOCKER, f"does not load: {problem.error}; the Slurm hooks "
                                    f"judge this node on the {problem.using}",
                                    "fix the file (gpuhc config validate names every error); "
                                    "gpuhc fleet config-errors lists the nodes in this state"))
    try:
        conf, conf_error = read(slurm_conf), None
    except SlurmConfError as e:
        conf, conf_error = None, str(e)
    admin = is_admin_host() if admin_host is None else admin_host
    result = gather(config, conf, conf_error, admin, not no_sinfo, node, first)
    if json_mode:
        click.echo(json.dumps(result, indent=2))
    else:
        render(result)
    raise SystemExit(1 if result["worst"] == "blocker" else 0)
