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
@click.option("--config", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="YAML settings file (as every component and `config show` take it).")
@click.argument("old_path", metavar="[PATH]", required=False, type=click.Path(dir_okay=False, path_type=Path))
def check(path: Path | None, old_path: Path | None) -> None:
    """Validate the --config file; list every problem and exit 1 if any."""
    if old_path is not None:
        if path is not None:
            raise click.UsageError("give the file once: --config FILE")
        # The first form: kept working, said once, so scripts can move to the one spelling.
        click.echo(f"warning: `stowage config check PATH` is deprecated: use `stowage config check --config "
                   f"{old_path}`", err=True)
        path = old_path
    if path is None:
        raise click.UsageError("which file? stowage config check --config FILE")
    try:
        load_settings(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{path}: ok")
