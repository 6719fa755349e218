"""``stowage bench simulator``: how fast the simulator replays a big trace, per preset.

Default: the bundled FB-2009 day (SWIM, about 430 thousand tasks) on 600
nodes. Reports wall seconds and tasks placed per second for each preset (wall
time is measured here and printed; it never enters a simulation's results).
"""

from __future__ import annotations

import json
import time

import click

from stowage.sim.presets import PRESETS

__all__ = ["bench_simulator"]


@click.command("simulator")
@click.option("--workload", "workload_spec", default="swim", show_default=True, metavar="SPEC",
              help="Workload spec as for `stowage simulate` (default: the bundled FB-2009 day).")
@click.option("--nodes", type=int, default=None, help="Nodes (default: 600 for SWIM).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(PRESETS),
              help="Preset to time (repeatable). Default: all.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the timings and each run's summary as JSON.")
def bench_simulator(workload_spec: str, nodes: int | None, policies: tuple[str, ...], seed: int,
                    json_path: str | None) -> None:
    """Time the simulator on a large trace: wall seconds and tasks placed per second, per preset."""
    from stowage.sim.engine import simulate
    from stowage.sim.traces import resolve_workload

    t0 = time.perf_counter()
    workload = resolve_workload(workload_spec, nodes=nodes, node_shape=None, seed=seed)
    load_s = time.perf_counter() - t0
    click.echo(f"{workload.name}: {len(workload.nodes)} nodes, {len(workload.jobs)} jobs, "
               f"{workload.task_count} tasks (loaded in {load_s:.1f}s)")
    rows = []
    for name in policies or PRESETS:
        start = time.perf_counter()
        result = simulate(workload, name, seed=seed)
        wall = time.perf_counter() - start
        s = result.summary
        rate = s["tasks_started"] / wall if wall > 0 else float("inf")
        rows.append({"policy": name, "wall_s": wall, "tasks_per_second": rate, "summary": s})
        click.echo(f"{name:13s} {wall:8.1f}s  {rate:9.0f} tasks/s  makespan {s['makespan_s'] / 3600:.2f}h  "
                   f"mean JCT {s['jct_mean_s']:.0f}s  lost {s['lost_tasks']}")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"workload": workload.name, "tasks": workload.task_count, "runs": rows}, fh, indent=2,
                      default=float)
