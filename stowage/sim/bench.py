"""``stowage bench simulator``: how fast the simulator replays a big trace, per preset.

Default: the bundled FB-2009 day (SWIM, about 430 thousand tasks) on 600 nodes. Reports, per preset: wall and CPU
seconds, events (loop iterations of the engine: arrivals, finishes, monitor ticks), CPU microseconds per event,
tasks placed per wall second, and CPU time as a multiple of ``kube-default``'s in the same run (the speed target is
a ratio: timings on a shared machine are not comparable across runs). Timing is measured here and printed; it never
enters a simulation's results.
"""

from __future__ import annotations

import json
import time

import click

from stowage.sim.cli import oracle_option, pass_delay_option
from stowage.sim.presets import DEFAULT_PRESETS, PRESETS

__all__ = ["bench_simulator"]


@click.command("simulator")
@click.option("--workload", "workload_spec", default="swim", show_default=True, metavar="SPEC",
              help="Workload spec as for `stowage simulate` (default: the bundled FB-2009 day).")
@click.option("--nodes", type=int, default=None, help="Nodes (default: 600 for SWIM).")
@click.option("--arrivals", type=click.Choice(["trace", "batch"]), default="trace", show_default=True,
              help="batch: every job at t=0 (the speed target's run: --arrivals batch on the FB-2009 day).")
@click.option("--first-jobs", type=int, default=None, help="Only the first N jobs by arrival.")
@click.option("--max-sim-time", "max_sim_s", type=float, default=None, metavar="SECONDS",
              help="Stop each run this many simulated seconds after the first arrival (a timing slice).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(PRESETS),
              help="Preset to time (repeatable). Default: all.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the timings and each run's summary as JSON.")
@pass_delay_option
@oracle_option
def bench_simulator(workload_spec: str, nodes: int | None, arrivals: str, first_jobs: int | None,
                    max_sim_s: float | None, policies: tuple[str, ...], seed: int, json_path: str | None,
                    pass_delay_s: float, oracle_durations: bool) -> None:
    """Time the simulator on a large trace: wall and CPU seconds, events and tasks per second, per preset."""
    from stowage.sim import presets
    from stowage.sim.engine import MAX_SIM_S, SimConfig, Simulation
    from stowage.sim.traces import resolve_workload

    t0 = time.perf_counter()
    workload = resolve_workload(workload_spec, nodes=nodes, node_shape=None, seed=seed)
    workload = workload.sliced(first_jobs=first_jobs)
    if arrivals == "batch":
        workload = workload.with_batch_arrivals()
    load_s = time.perf_counter() - t0
    click.echo(f"{workload.name}: {len(workload.nodes)} nodes, {len(workload.jobs)} jobs, "
               f"{workload.task_count} tasks (loaded in {load_s:.1f}s)")
    config = SimConfig(pass_delay_s=pass_delay_s, max_sim_s=MAX_SIM_S if max_sim_s is None else max_sim_s,
                       oracle_durations=oracle_durations)
    rows = []
    for name in policies or DEFAULT_PRESETS:
        start, cpu = time.perf_counter(), time.process_time()
        sim = Simulation(workload, presets.make(name), config, seed)
        result = sim.run()
        cpu = time.process_time() - cpu
        wall = time.perf_counter() - start
        s = result.summary
        rate = s["tasks_started"] / wall if wall > 0 else float("inf")
        rows.append({"policy": name, "wall_s": wall, "cpu_s": cpu, "events": sim.events,
                     "cpu_us_per_event": 1e6 * cpu / max(sim.events, 1), "tasks_per_second": rate, "summary": s})
    base = next((r["cpu_s"] for r in rows if r["policy"] == "kube-default"), None)
    for r in rows:
        r["cpu_vs_kube_default"] = r["cpu_s"] / base if base else None
        s = r["summary"]
        ratio = f"  {r['cpu_vs_kube_default']:.2f}x kube-default" if base else ""
        outcome = ("stopped at --max-sim-time (a timing slice)" if s["time_cap_reached"]
                   else f"makespan {s['makespan_s'] / 3600:.2f}h  lost {s['lost_tasks']}")
        click.echo(f"{r['policy']:13s} {r['wall_s']:8.1f}s wall {r['cpu_s']:8.1f}s cpu {r['events']:8d} events "
                   f"{r['cpu_us_per_event']:7.0f} us/event {r['tasks_per_second']:8.0f} tasks/s{ratio}  {outcome}")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"workload": workload.name, "tasks": workload.task_count, "runs": rows}, fh, indent=2,
                      default=float)
