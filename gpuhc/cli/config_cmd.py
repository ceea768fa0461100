"""`gpuhc config validate|show|checks`."""

from __future__ import annotations

import click

from gpuhc.cli import CONTEXT
from gpuhc.cli.common import node_name
from gpuhc.cli.tables import Table, asked, table_options


@click.group(context_settings=CONTEXT)
def config() -> None:
    """Validate or show the configuration."""


@config.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="File to validate (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).")
@click.option("--json", "json_mode", is_flag=True, help="One JSON document: valid, and each error's file, line, key "
              "and message (for config pipelines).")
def validate(config_path: str | None, json_mode: bool) -> None:
    """Check the file as a run loads it (the same loader, the same messages); every error is
    listed, each naming file, line and key. Exit 0 when valid, 2 when not."""
    from gpuhc.errors import ConfigErrors

    path, errors = problems(config_path)
    if json_mode:
        import json

        click.echo(json.dumps({"file": path, "valid": not errors, "errors": [
            {"file": e.file, "line": e.line, "key": e.key, "message": getattr(e, "message", str(e))} for e in errors]},
            indent=2))
        raise SystemExit(2 if errors else 0)
    if len(errors) > 1:  # each printed on its own line, then how many
        from gpuhc.errors import ConfigError

        raise ConfigErrors([*errors, ConfigError(f"{len(errors)} errors", errors[0].file)])
    if errors:
        raise errors[0]
    click.echo(f"{path or 'built-in defaults (no config file)'}: valid")


def problems(config_path: str | None) -> tuple[str | None, list]:
    """(the file, its errors): what a run refuses (load_config, then the recorded sources every
    ``hosts:`` entry names, by the run's own test), and a node.baseline that does not load."""
    from gpuhc.config.load import default_path, load_config
    from gpuhc.errors import ConfigError, ConfigErrors

    try:
        cfg = load_config(config_path, node_name())
    except ConfigErrors as e:
        return e.file, list(e.errors)
    except ConfigError as e:
        return e.file or config_path or default_path(), [e]
    errors = missing_sources(cfg)
    baseline = cfg.section("node").get("baseline")
    if baseline:
        # A run only notes a broken baseline and falls back to the profile: say it here, where
        # an admin asks whether the setup is right.
        from gpuhc.state.baseline import load
        from gpuhc.text.yamlpos import line_of

        try:
            load(baseline)
        except ConfigError as e:
            errors.insert(0, ConfigError(str(e), cfg.path, line_of(cfg.lines, ("node", "baseline")),
                                         "node.baseline"))
    return cfg.path, errors


def missing_sources(cfg) -> list:
    """The recorded files and trees the config's ``sources`` name (top level and every
    ``hosts:`` entry, whichever node this is) that a run on a node using them would refuse
    (gpuhc.cli.common.source_problem, the run's own test), at the entry's own line."""
    from gpuhc.cli.common import source_problem
    from gpuhc.errors import ConfigError
    from gpuhc.text.yamlpos import line_of

    places = [((), cfg.top.get("sources") or {})]
    places += [(("hosts", i), settings.get("sources") or {}) for i, (_p, settings) in enumerate(cfg.overrides)]
    out = []
    for where, sources in places:
        for key in ("nvml_scenario", "test_scenario", "kernel_log", "sysfs_root"):
            path = sources.get(key)
            problem = source_problem(key, path)
            if problem is not None:
                dotted = ".".join(str(p) for p in (*where, "sources", key))
                out.append(ConfigError(f"{path}: {problem}", cfg.path, line_of(cfg.lines, (*where, "sources", key)),
                                       dotted))
    return out


@config.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--node", "hostname", help="Show the effective config for this node (per-host overrides applied).")
@click.option("--json", "json_mode", is_flag=True)
def show(config_path: str | None, hostname: str | None, json_mode: bool) -> None:
    """Print the effective config: defaults, the file, and the overrides for this node."""
    from gpuhc.config.load import load_config

    cfg = load_config(config_path, node_name(hostname))
    if json_mode:
        import json

        click.echo(json.dumps(cfg.data, indent=2, sort_keys=True))
    else:
        import yaml

        click.echo(f"# effective config for {cfg.hostname} from {cfg.path or 'built-in defaults'}")
        click.echo(yaml.safe_dump(cfg.data, sort_keys=True, default_flow_style=False).rstrip())


ACTS = Table({"act": 18, "on": 3, "what": 60, "switch": 0}, default=("act", "on", "what"))


@config.command("acts")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--node", "hostname", help="Apply this node's per-host overrides.")
@click.option("--markdown", is_flag=True, help="A Markdown table (the README's is this, for the shipped config).")
@click.option("--json", "json_mode", is_flag=True)
@table_options(ACTS)
def list_acts(config_path: str | None, hostname: str | None, markdown: bool, json_mode: bool, fmt: str | None,
              parsable: bool, noheader: bool) -> None:
    """Every act gpuhc can take on its own (drain, resume, retire, reboot, GPU reset, requeue,
    active checks, bundles, writes into jobs, hooks, sweeps): on or off in this config, when it
    happens, what it costs, and the setting that turns it on or off."""
    from gpuhc.catalog.acts import acts, table
    from gpuhc.config.load import load_config

    cfg = load_config(config_path, node_name(hostname))
    rows = acts(cfg)
    if json_mode:
        import json

        click.echo(json.dumps({"config": cfg.path, "node": cfg.hostname, "mode": cfg.section("slurm").get("mode"),
                               "acts": [a.to_dict() for a in rows]}, indent=2))
        return
    if asked(fmt, parsable, noheader):
        for line in ACTS.lines([dict(a.to_dict(), on="on" if a.on else "off") for a in rows], fmt, parsable, noheader):
            click.echo(line)
        return
    if not markdown:
        click.echo(f"# what gpuhc does by itself on {cfg.hostname}, from {cfg.path or 'built-in defaults'} "
                   f"(slurm.mode {cfg.section('slurm').get('mode')})")
    for line in table(rows, markdown):
        click.echo(line)


@config.command("checks")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--node", "hostname", help="Apply this node's per-host overrides.")
@click.option("--profile", "profile_name", help="Thresholds of this GPU profile (default: node.profile, else generic).")
@click.option("--json", "json_mode", is_flag=True)
def list_checks(config_path: str | None, hostname: str | None, profile_name: str | None, json_mode: bool) -> None:
    """List every check, passive and active: stages, timeout, what it reads or needs, and the
    thresholds a run would use (defaults, then the GPU profile, then the config).

    These are the names `checks.<id>.thresholds` in gpuhc.yaml accepts. A run picks the profile
    from the GPUs' names unless node.profile forces one. An active check's timeout is sized
    from its stage's workload unless `checks.<id>.timeout_s` sets one (JSON: timeout_s null).
    """
    from gpuhc.checks import all_checks
    from gpuhc.config.load import load_config
    from gpuhc.config.profiles import profile_names, select_profile

    if profile_name is not None and profile_name not in profile_names():
        raise click.BadParameter(f"unknown GPU profile {profile_name!r} (known: {', '.join(profile_names())})",
                                 param_hint="--profile")
    cfg = load_config(config_path, node_name(hostname))
    forced = profile_name or cfg.section("node").get("profile")
    profile = select_profile(None, forced)
    checks = all_checks()
    rows = [_check_row(check, cfg, profile) for check in checks]
    if json_mode:
        import json

        click.echo(json.dumps({"node": cfg.hostname, "config": cfg.path, "profile": profile.name, "checks": rows},
                              indent=2, default=str))
        return
    picked = "" if forced else " (a run picks the profile from the GPUs' names; --profile shows another)"
    click.echo(f"# checks for {cfg.hostname} from {cfg.path or 'built-in defaults'}, "
               f"thresholds of profile {profile.name}{picked}")
    for kind in ("passive", "active"):
        click.echo(f"\n# {kind} checks" + (" (GPU work, epilog and bootstrap)" if kind == "active" else ""))
        for check, row in zip(checks, rows):
            if row["kind"] == kind:
                click.echo("\n".join(_check_lines(row, check.nested_thresholds)))


def _check_row(check, cfg, profile) -> dict:
    """One check as a run would see it: its settings resolved as the runner resolves them."""
    from gpuhc.checks.base import Check
    from gpuhc.run.plan import resolve

    eff = resolve(check, cfg)
    passive = isinstance(check, Check)
    return {
        "id": check.id,
        "kind": "passive" if passive else "active",
        "enabled": eff.enabled,
        "stages": list(check.stages) if passive else _active_stages(check.id, cfg, eff.enabled),
        "timeout_s": eff.timeout_s or None,  # 0: sized from the stage's workload
        "needs": list(check.needs),
        "optional": list(getattr(check, "optional", ())),
        "thresholds": eff.thresholds(check, profile),
    }


def _active_stages(check_id: str, cfg, enabled: bool) -> list[str]:
    """The stages whose plan runs this active check (``active.<stage>.checks``, ``active.enabled``,
    DCGM only at a level above 0), as the runner's plan decides it."""
    from gpuhc.active.plan import build
    from gpuhc.active.registry import STAGES

    return [stage for stage in STAGES
            if check_id in build(stage, cfg.section("active"), lambda cid: cid != check_id or enabled).checks]


def _check_lines(row: dict, nested: bool) -> list[str]:
    """A check's line, then one line per threshold as gpuhc.yaml spells it. A nested table's
    keys are listed one by one only where the config overrides them key by key."""
    import json

    state = "" if row["enabled"] else " (disabled)"
    timeout = f"{row['timeout_s']:g}s" if row["timeout_s"] else "sized from the workload"
    verb = "reads" if row["kind"] == "passive" else "needs"
    uses = f"{verb} {','.join(row['needs']) or 'nothing'}"
    if row["optional"]:
        uses += f" (and {','.join(row['optional'])} when there)"
    lines = [f"{row['id']}{state}: stages {','.join(row['stages']) or 'none'}; timeout {timeout}; {uses}"]
    pairs = _flat(row["thresholds"]) if nested else row["thresholds"].items()
    lines += [f"    {key}: {json.dumps(value, default=str)}" for key, value in pairs]
    return lines


def _flat(thresholds: dict, prefix: str = ""):
    """Nested tables (an active check's per-precision speeds) as dotted keys."""
    for key, value in thresholds.items():
        if isinstance(value, dict) and value:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
