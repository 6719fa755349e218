"""``stowage simulate``: what would each scheduler do with this workload?

With no arguments it runs the embedded default workload under every preset,
prints a comparison table (ratios to kube-default) and writes
``stowage-report/`` (``report.json`` and PNG plots) in the current folder.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import click

from stowage.errors import InvalidInput, StowageError
from stowage.sim.presets import PRESETS
from stowage.sim.usage import UsageModel

__all__ = ["parse_usage", "simulate"]


def parse_usage(spec: str) -> UsageModel:
    """``key=value,...`` over :class:`UsageModel`'s defaults; ``none`` clears ``io_fraction``."""
    from dataclasses import fields

    known = {f.name for f in fields(UsageModel)}
    values: dict[str, float | None] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise InvalidInput("--usage", item, f"KEY=VALUE with KEY one of {', '.join(sorted(known))}")
        if raw.strip().lower() == "none" and key == "io_fraction":
            values[key] = None
            continue
        try:
            values[key] = float(raw)
        except ValueError:
            raise InvalidInput(f"--usage {key}", raw, "a number") from None
    return UsageModel(**values)  # type: ignore[arg-type]


def _announce(name: str, result: object, wall_s: float) -> None:
    summary = getattr(result, "summary", {})
    click.echo(f"  {name}: {summary.get('tasks_started', 0)} task starts in {wall_s:.1f}s", err=True)


@click.command("simulate")
@click.option("--workload", "workload_spec", default="embedded", show_default=True, metavar="SPEC",
              help="embedded | synthetic | swim | swim:PATH | openb:PODS[,NODES] | FILE (.yaml/.json).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(PRESETS),
              help="Preset to run (repeatable). Default: all of them.")
@click.option("--nodes", type=int, default=None, help="Number of nodes (default: the workload's own).")
@click.option("--node-shape", default=None, metavar="SHAPE",
              help="Node capacity, e.g. cpu=16,memory=64Gi,disk=200Mi,network=1250Mi.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random draw.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Stowage knobs YAML (same file the cluster components read).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default="stowage-report",
              show_default=True, help="Folder for report.json and the plots.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the JSON report here ('-' for stdout).")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the PNG plots (default: the report folder).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--usage", "usage_spec", default="", metavar="KEY=VALUE,...",
              help="Usage model parameters, e.g. mean_fraction=0.6,burst_rate_per_s=0.02,io_fraction=none "
                   "(see docs/simulator.md).")
@click.option("--arrivals", type=click.Choice(["trace", "batch"]), default="trace", show_default=True,
              help="trace: jobs arrive when the workload says; batch: every job at t=0, the way Tetris §5.2 "
                   "measures makespan.")
@click.option("--check", is_flag=True, help="Check the simulator's invariants at every event (slow).")
def simulate(
    workload_spec: str,
    policies: tuple[str, ...],
    nodes: int | None,
    node_shape: str | None,
    seed: int,
    config_path: str | None,
    report_dir: str,
    json_path: str | None,
    plots_dir: str | None,
    no_plots: bool,
    usage_spec: str,
    arrivals: str,
    check: bool,
) -> None:
    """Replay a workload under each scheduling policy and compare them.

    Presets: kube-default, binpack, drf, load-aware, tetris, ubis, stowage.
    The same seed gives the same numbers.
    """
    from stowage.config import load_settings
    from stowage.sim.compare import run_all
    from stowage.sim.engine import SimConfig
    from stowage.sim.report import build_report, format_table
    from stowage.sim.traces import resolve_workload

    if not no_plots and importlib.util.find_spec("matplotlib") is None:
        # Say so before the runs, not after minutes of simulation.
        from stowage.sim.plots import MISSING_MATPLOTLIB

        raise click.ClickException(MISSING_MATPLOTLIB)
    started = time.perf_counter()
    try:
        settings = load_settings(config_path)
        workload = resolve_workload(workload_spec, nodes=nodes, node_shape=node_shape, seed=seed)
    except StowageError as exc:
        raise click.ClickException(str(exc)) from exc
    if arrivals == "batch":
        workload = workload.with_batch_arrivals()
    chosen = list(policies) or list(PRESETS)
    try:
        usage = parse_usage(usage_spec)
    except StowageError as exc:
        raise click.ClickException(str(exc)) from exc
    config = SimConfig(settings=settings, usage=usage, check=check)
    click.echo(f"workload: {workload.name}: {len(workload.nodes)} nodes, {len(workload.jobs)} jobs, "
               f"{workload.task_count} tasks; seed {seed}", err=True)
    try:
        results, wall = run_all(workload, chosen, config=config, seed=seed, on_done=_announce)
    except StowageError as exc:
        raise click.ClickException(str(exc)) from exc
    report = build_report(workload, results, shown=chosen, settings=settings, usage=usage, seed=seed)
    text = json.dumps(report, indent=2)  # insertion order: deterministic, policies as asked

    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(text + "\n")
    if json_path == "-":
        click.echo(text)
    elif json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text + "\n")
    written: list[Path] = []
    if not no_plots:
        from stowage.sim.plots import write_plots

        written = write_plots({p: results[p] for p in chosen}, plots_dir or out)

    click.echo(format_table(report), err=json_path == "-")
    click.echo(f"report: {out / 'report.json'}" + (f"; plots: {', '.join(str(p) for p in written)}" if written
                                                     else ""), err=True)
    per_run = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in wall.items())
    click.echo(f"wall time {time.perf_counter() - started:.1f}s ({per_run})", err=True)
    sys.stderr.flush()
