"""`gpuhc config validate|show`."""

from __future__ import annotations

import click

from gpuhc.cli.common import node_name


@click.group()
def config() -> None:
    """Validate or show the configuration."""


@config.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="File to validate (default $GPUHC_CONFIG or /etc/gpuhc/gpuhc.yaml).")
def validate(config_path: str | None) -> None:
    """Check the file; errors name file, line and key. Exit 0 when valid, 2 when not."""
    from gpuhc.config import load_config

    cfg = load_config(config_path, node_name())
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
