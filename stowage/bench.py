"""``stowage bench``: benchmarks of each part, reported as ratios measured in the same run."""

from __future__ import annotations

import importlib

import click

__all__ = ["bench"]

#: benchmark name → "module:attribute" of a click command.
BENCHMARKS: dict[str, str] = {
    "dispatcher": "stowage.operator.bench:bench_dispatcher",
    "gangs": "stowage.operator.bench:bench_gangs",
    "extender": "stowage.extender.bench:bench_extender",
    "simulator": "stowage.sim.bench:bench_simulator",
    "forecast": "stowage.sim.bench:bench_forecast",
    "node-monitor": "stowage.node_monitor.bench:bench_node_monitor",
}


class _LazyBenchGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCHMARKS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in BENCHMARKS:
            return None
        module, attr = BENCHMARKS[cmd_name].split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=_LazyBenchGroup)
def bench() -> None:
    """Measure a part of Stowage on this machine (latency, throughput, footprint)."""
