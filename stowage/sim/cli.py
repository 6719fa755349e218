"""``stowage simulate``: what would each scheduler do with this workload?

With no arguments it runs the embedded default workload under every preset, prints a comparison table (ratios to
kube-default) and writes ``stowage-report/`` (``report.json`` and PNG plots) in the current folder.

Exit codes: 0 all runs complete; 1 refused before any work (bad input, size limits); 2 a usage error (click); 3
results incomplete (a run stopped at the simulated-time cap or left tasks unfinished; the report is written and says
so); 130 interrupted by Ctrl-C (the presets that finished are in a partial report).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import click

from stowage.errors import InvalidInput, StowageError
from stowage.policy.dispatch import PASS_DELAY_S
from stowage.sim.engine import MAX_SIM_S
from stowage.sim.metrics import RunResult
from stowage.sim.presets import DEFAULT_PRESETS, PRESETS
from stowage.sim.sizing import DEFAULT_MAX_NODES, DEFAULT_MAX_TASKS
from stowage.sim.usage import UsageModel

pass_delay_option = click.option(
    "--pass-delay", "pass_delay_s", type=click.FloatRange(min=0), default=PASS_DELAY_S, show_default=True,
    metavar="SECONDS",
    help="Every preset decides at most once per this many seconds, as the operator's dispatcher does: a change "
         "after a quiet spell is decided at once, the changes within the delay of a decision share the next one. "
         "0: a decision at every event (slower: tasks started apart finish apart; on the FB-2009 batch day 4x "
         "the events).")

oracle_option = click.option(
    "--oracle-durations", "oracle_durations", is_flag=True,
    help="tetris and stowage read each task's true duration from the workload instead of estimating it from what "
         "a cluster knows (stated expectedDuration, finished tasks, elapsed time, earlier runs, the queue's prior). "
         "An upper bound no cluster reaches; the report says which was used.")

__all__ = ["EXIT_INCOMPLETE", "EXIT_INTERRUPTED", "parse_hours", "parse_usage", "report_folder", "simulate"]

EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
_PLOTS = ("jct_cdf.png", "utilization.png", "queue_shares.png")


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


def parse_hours(spec: str) -> tuple[float, float]:
    """``A-B`` (hours of the trace's clock, A < B) as a pair; ``-B`` is ``0-B``."""
    lo, sep, hi = spec.strip().partition("-")
    try:
        window = (float(lo) if lo.strip() else 0.0, float(hi))
    except ValueError:
        raise InvalidInput("--hours", spec, "A-B, hours of the trace's clock, e.g. 2-4") from None
    if not sep or not 0.0 <= window[0] < window[1]:
        raise InvalidInput("--hours", spec, "A-B with 0 <= A < B, e.g. 2-4")
    return window


def _quantity_bytes(spec: str | None) -> float | None:
    if spec is None:
        return None
    from stowage.resources import parse_quantity

    value = parse_quantity(spec, "--max-memory")
    if value <= 0:
        raise InvalidInput("--max-memory", spec, "a positive size, e.g. 8Gi")
    return value


def report_folder(wanted: Path, names: tuple[str, ...], force: bool) -> Path:
    """``wanted`` unless it already holds one of ``names`` (then ``wanted-2``, ``-3``, …); ``force`` keeps it."""
    if force or not any((wanted / name).exists() for name in names):
        return wanted
    n = 2
    while any((wanted.with_name(f"{wanted.name}-{n}") / name).exists() for name in names):
        n += 1
    return wanted.with_name(f"{wanted.name}-{n}")


def _say(text: str) -> None:
    """Everything but the table (and ``--json -``) goes to stderr."""
    click.echo(text, err=True)


@click.command("simulate")
@click.option("--workload", "workload_spec", default="embedded", show_default=True, metavar="SPEC",
              help="embedded | synthetic | swim | swim:PATH | openb:PODS[,NODES] | random[:SEED] | FILE (.yaml/.json: "
                   "a workload file, or Stowage Job and Queue manifests with --nodes and --node-shape).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(PRESETS),
              help="Preset to run (repeatable). Default: all but stowage-regular and stowage-ungated, which take "
                   "stowage apart (harvesting off; no classifier gate).")
@click.option("--nodes", type=int, default=None, help="Number of nodes (default: the workload's own).")
@click.option("--node-shape", default=None, metavar="SHAPE",
              help="Node capacity, e.g. cpu=16,memory=64Gi,disk=200Mi,network=1250Mi.")
@click.option("--source-nodes", type=int, default=None, metavar="N",
              help="SWIM only: machines of the cluster the trace was recorded on (FB-2009: 600, FB-2010: 3000); "
                   "bytes scale by --nodes / N. Default: read from SWIM's file name.")
@click.option("--first-jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Replay only the first N jobs by arrival.")
@click.option("--hours", "hours_spec", default=None, metavar="A-B",
              help="Replay only the jobs arriving between hour A and hour B of the trace's clock.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of every random draw.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Stowage knobs YAML (same file the cluster components read).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default="stowage-report",
              show_default=True, help="Folder for report.json and the plots; if it holds a report already, "
                                      "the next free FOLDER-2, FOLDER-3, ... (see --force).")
@click.option("--force", is_flag=True, help="Overwrite the report and plots in --report / --plots.")
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
@click.option("--jobs", "processes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Presets run in N processes at once (default: one per core; 1 = one after another). "
                   "The numbers do not depend on N.")
@click.option("--max-sim-time", "max_sim_s", type=click.FloatRange(min=0, min_open=True), default=MAX_SIM_S,
              show_default=True, metavar="SECONDS",
              help="Stop a run this long after the first arrival (90 days); a run that reaches it exits 3.")
@click.option("--max-tasks", type=click.IntRange(min=1), default=DEFAULT_MAX_TASKS, show_default=True, metavar="N",
              help="Refuse workloads with more tasks.")
@click.option("--max-nodes", type=click.IntRange(min=1), default=DEFAULT_MAX_NODES, show_default=True, metavar="N",
              help="Refuse clusters with more nodes.")
@click.option("--max-memory", "max_memory_spec", default=None, metavar="SIZE",
              help="Memory the runs may use together, e.g. 16Gi (default: what is available at the start).")
@click.option("--progress-every", type=click.FloatRange(min=0), default=10.0, show_default=True, metavar="SECONDS",
              help="When stderr is not a terminal, a progress line this often (0: none). A terminal gets a bar.")
@click.option("--check", is_flag=True, help="Check the simulator's invariants at every event (slow).")
@pass_delay_option
@oracle_option
def simulate(
    workload_spec: str,
    policies: tuple[str, ...],
    nodes: int | None,
    node_shape: str | None,
    source_nodes: int | None,
    first_jobs: int | None,
    hours_spec: str | None,
    seed: int,
    config_path: str | None,
    report_dir: str,
    force: bool,
    json_path: str | None,
    plots_dir: str | None,
    no_plots: bool,
    usage_spec: str,
    arrivals: str,
    processes: int | None,
    max_sim_s: float,
    max_tasks: int,
    max_nodes: int,
    max_memory_spec: str | None,
    progress_every: float,
    check: bool,
    pass_delay_s: float,
    oracle_durations: bool,
) -> None:
    """Replay a workload under each scheduling policy and compare them.

    Presets: kube-default, binpack, drf, load-aware, tetris, ubis, stowage.
    The same seed gives the same numbers. Exit 3: a run stopped at --max-sim-time or left
    tasks unfinished (the report says which); 130: interrupted, partial report written.
    """
    from stowage.config import load_settings
    from stowage.sim import compare, report, sizing
    from stowage.sim.engine import SimConfig
    from stowage.sim.traces import resolve_workload

    if not no_plots and importlib.util.find_spec("matplotlib") is None:
        # Say so before the runs, not after minutes of simulation.
        from stowage.sim.plots import MISSING_MATPLOTLIB

        raise click.ClickException(MISSING_MATPLOTLIB)
    started = time.perf_counter()
    try:
        settings = load_settings(config_path)
        usage = parse_usage(usage_spec)
        hours = parse_hours(hours_spec) if hours_spec is not None else None
        limits = sizing.Limits(max_tasks=max_tasks, max_nodes=max_nodes, max_memory=_quantity_bytes(max_memory_spec))
        workload = resolve_workload(workload_spec, nodes=nodes, node_shape=node_shape, seed=seed,
                                    source_nodes=source_nodes, max_nodes=limits.max_nodes)
        workload = workload.sliced(first_jobs=first_jobs, hours=hours)
        if arrivals == "batch":
            workload = workload.with_batch_arrivals()
        chosen = list(dict.fromkeys(policies)) or list(DEFAULT_PRESETS)
        config = SimConfig(settings=settings, usage=usage, check=check, max_sim_s=max_sim_s, pass_delay_s=pass_delay_s,
                           oracle_durations=oracle_durations)
        plan = sizing.plan_runs(workload, chosen, config=config, processes=processes, limits=limits)
    except StowageError as exc:
        raise click.ClickException(str(exc)) from exc

    out = report_folder(Path(report_dir), ("report.json", *(() if no_plots or plots_dir else _PLOTS)), force)
    plots_out = None if no_plots else (report_folder(Path(plots_dir), _PLOTS, force) if plots_dir else out)
    _say(f"workload: {workload.name}: {len(workload.nodes)} nodes, {len(workload.jobs)} jobs, "
         f"{workload.task_count} tasks; seed {seed}")
    _say(plan.describe())
    _say("durations: " + ("the workload's true durations (--oracle-durations: an upper bound no cluster reaches)"
                          if oracle_durations else "estimated from what a cluster knows (--oracle-durations for "
                          "the upper bound)"))
    skipped = workload.model.get("skipped")
    if isinstance(skipped, dict) and any(skipped.values()):
        # What a reader leaves out is said here, not only in the report's model.
        counts = ", ".join(f"{why} {n:,}" for why, n in skipped.items() if n)
        _say(f"note: the reader skipped {sum(skipped.values()):,} entries ({counts}); see workload.model.skipped")
    if plan.references:
        _say(f"also running {' and '.join(plan.references)} as reference (ratios to {report.RATIO_BASELINE}, "
             f"slowdown against {report.SLOWDOWN_REFERENCE}): not asked for, shown as '(ref)' below the table")
    for wanted, got in ((Path(report_dir), out), (Path(plots_dir) if plots_dir else None, plots_out)):
        if wanted is not None and got is not None and got != wanted:
            _say(f"{wanted}/ holds an earlier report: writing to {got}/ instead (--force overwrites)")

    def announce(name: str, result: RunResult, wall_s: float) -> None:
        _say(f"  {name}: {result.summary['tasks_started']} task starts in {wall_s:.1f}s")

    progress = compare.Progress(plan.runs, workload.task_count, bar=sys.stderr.isatty(), every_s=progress_every)
    try:
        runs = compare.run_all(workload, chosen, config=config, seed=seed, processes=plan.processes,
                               progress=progress, on_done=announce)
    except StowageError as exc:
        raise click.ClickException(str(exc)) from exc

    problems = [p for name, r in runs.results.items() for p in report.run_problems(name, r, config.max_sim_s)]
    if runs.interrupted:
        problems.append(f"interrupted (Ctrl-C): finished {', '.join(runs.results) or 'none'}; "
                        f"not finished {', '.join(runs.unfinished)}")
    doc = report.build_report(workload, runs.results, shown=chosen, settings=settings, usage=usage, seed=seed,
                              problems=problems, pass_delay_s=pass_delay_s, oracle_durations=oracle_durations)
    text = json.dumps(doc, indent=2)  # insertion order: deterministic, policies as asked
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(text + "\n")
    if json_path == "-":
        click.echo(text)
    elif json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(text + "\n")
    written: list[Path] = []
    shown = [p for p in chosen if p in runs.results]
    if plots_out is not None and shown:
        from stowage.sim.plots import write_plots

        written = write_plots({p: runs.results[p] for p in shown}, plots_out)

    if doc["policies"] or doc["reference_runs"]:
        click.echo(report.format_table(doc), err=json_path == "-")
    _say(f"report: {out / 'report.json'}" + (f"; plots: {', '.join(str(p) for p in written)}" if written else ""))
    per_run = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in runs.wall.items())
    _say(f"wall time {time.perf_counter() - started:.1f}s ({per_run})")
    if problems:
        kind = "partial report" if runs.interrupted else "results incomplete"
        _say(f"error: {kind}, {out / 'report.json'} says so (status.problems):\n  " + "\n  ".join(problems))
        sys.stderr.flush()
        click.get_current_context().exit(EXIT_INTERRUPTED if runs.interrupted else EXIT_INCOMPLETE)
