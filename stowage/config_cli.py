"""``stowage config``: show the effective settings, or check a config file before deploying it."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import yaml

from stowage.config import as_dict, load_settings
from stowage.errors import ConfigError

__all__ = ["config"]


@click.group()
def config() -> None:
    """Show or check Stowage settings (defaults ← YAML file ← STOWAGE_* environment)."""


@config.command("show")
@click.option("--config", "path", type=click.Path(dir_okay=False, path_type=Path), help="YAML settings file.")
def show(path: Path | None) -> None:
    """Print the effective settings as YAML (a valid --config file)."""
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    yaml.safe_dump(as_dict(settings), sys.stdout, sort_keys=False)


@config.command("check")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def check(path: Path) -> None:
    """Validate PATH; list every problem and exit 1 if any."""
    try:
        load_settings(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{path}: ok")
