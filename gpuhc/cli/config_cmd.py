"""`gpuhc config validate|show|checks`."""

from __future__ import annotations

import click

from gpuhc.cli.common import node_name


@click.group()
def config() -> None:
    """Validate or show the configuration."""


@config.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="File to validate (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).")
def validate(config_path: str | None) -> None:
    """Check the file; every error is listed, each naming file, line and key. Exit 0 when
    valid, 2 when not."""
    from gpuhc.config import load_config
    from gpuhc.errors import ConfigError, ConfigErrors

    try:
        cfg = load_config(config_path, node_name())
    except ConfigErrors as e:  # each printed on its own line, then how many
        raise ConfigErrors([*e.errors, ConfigError(f"{len(e.errors)} errors", e.file)]) from None
    baseline = cfg.section("node").get("baseline")
    if baseline:
        # A run only notes a broken baseline and falls back to the profile: say it here, where
        # an admin asks whether the setup is right.
        from gpuhc.baseline import load
        from gpuhc.yamlpos import line_of

        try:
            load(baseline)
        except ConfigError as e:
            raise ConfigError(str(e), cfg.path, line_of(cfg.lines, ("node", "baseline")), "node.baseline") from None
    click.echo(f"{cfg.path or 'built-in defaults (no config file)'}: valid")


@config.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--node", "hostname", help="Show the effective config for this node (per-host overrides applied).")
@click.option("--json", "json_mode", is_flag=True)
def show(config_path: str | None, hostname: str | None, json_mode: bool) -> None:
    """Print the effective config: defaults, the file, and the overrides for this node."""
    from gpuhc.config import load_config

    cfg = load_config(config_path, node_name(hostname))
    if json_mode:
        import json

        click.echo(json.dumps(cfg.data, indent=2, sort_keys=True))
    else:
        import yaml

        click.echo(f"# effective config for {cfg.hostname} from {cfg.path or 'built-in defaults'}")
        click.echo(yaml.safe_dump(cfg.data, sort_keys=True, default_flow_style=False).rstrip())


@config.command("checks")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--node", "hostname", help="Apply this node's per-host overrides.")
@click.option("--profile", "profile_name", help="Thresholds of this GPU profile (default: generic, or node.profile).")
@click.option("--json", "json_mode", is_flag=True)
def list_checks(config_path: str | None, hostname: str | None, profile_name: str | None, json_mode: bool) -> None:
    """List the passive checks: id, stages, timeout and effective thresholds.

    These are the names `checks.<id>.thresholds` in gpuhc.yaml accepts.
    """
    from gpuhc.checks import all_checks
    from gpuhc.config import load_config
    from gpuhc.profiles import profile_names, select_profile

    if profile_name is not None and profile_name not in profile_names():
        raise click.BadParameter(f"unknown GPU profile {profile_name!r} (known: {', '.join(profile_names())})",
                                 param_hint="--profile")
    cfg = load_config(config_path, node_name(hostname))
    profile = select_profile(None, profile_name or cfg.section("node").get("profile"))
    rows = []
    for check in all_checks():
        settings = cfg.check_settings(check.id)
        thresholds = {**check.defaults, **profile.thresholds.get(check.id, {}), **(settings.get("thresholds") or {})}
        rows.append({
            "id": check.id,
            "enabled": settings["enabled"],
            "stages": list(check.stages),
            "timeout_s": settings["timeout_s"] or check.timeout_s,
            "needs": list(check.needs),
            "thresholds": thresholds,
        })
    if json_mode:
        import json

        click.echo(json.dumps({"profile": profile.name, "checks": rows}, indent=2, default=str))
        return
    click.echo(f"# passive checks, thresholds of profile {profile.name}")
    for row in rows:
        state = "" if row["enabled"] else " (disabled)"
        click.echo(f"{row['id']}{state}: stages {','.join(row['stages'])}; timeout {row['timeout_s']:g}s; "
                   f"reads {','.join(row['needs'])}")
        for key, value in row["thresholds"].items():
            click.echo(f"    {key}: {value}")
