"""The one ``stowage`` command; each part adds a subcommand, imported only when used.

Lazy loading keeps ``stowage --help`` fast and lets ``stowage simulate`` run
without importing FastAPI, kopf or the Kubernetes client.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from stowage import __version__

__all__ = ["main"]

#: subcommand name → "module:attribute" of a click command.
SUBCOMMANDS: dict[str, str] = {
    "bench": "stowage.bench:bench",
    "config": "stowage.config_cli:config",
    "simulate": "stowage.sim.cli:simulate",
    "extender": "stowage.extender.cli:extender",
    "node-monitor": "stowage.node_monitor.cli:node_monitor",
    "operator": "stowage.operator.cli:operator",
    "queue": "stowage.operator.queue_cli:queue",
}


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        # A part whose module is not installed (e.g. a slim image) is simply not listed.
        present = {name for name, ref in SUBCOMMANDS.items() if _module_exists(ref.split(":")[0])}
        return sorted({*super().list_commands(ctx), *present})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS:
            module, attr = SUBCOMMANDS[cmd_name].split(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stowage")
def main() -> None:
    """Stowage: batch scheduling for Kubernetes.

    Packs pods by all their resources, shares the cluster between queues by
    weighted DRF, harvests reserved-but-idle capacity for opportunistic pods,
    and evicts those first when regular pods need their resources back.

    Start with `stowage simulate`: it compares schedulers on a bundled trace.
    """
