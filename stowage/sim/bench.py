"""``stowage bench simulator``: how fast the simulator replays a big trace, per preset.

Default: the bundled FB-2009 day (SWIM, about 430 thousand tasks) on 600 nodes. Reports, per preset: wall and CPU
seconds, events (loop iterations of the engine: arrivals, finishes, monitor ticks), CPU microseconds per event,
tasks placed per wall second, and CPU time as a multiple of ``kube-default``'s in the same run (the speed target is
a ratio: timings on a shared machine are not comparable across runs). Timing is measured here and printed; it never
enters a simulation's results.

``stowage bench forecast``: CPU seconds of one ``stowage.forecast.predict`` on a busy synthetic cluster.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import click
import numpy as np

from stowage.model import JobOrder
from stowage.sim.cli import oracle_option, pass_delay_option
from stowage.sim.presets import DEFAULT_PRESETS, PRESETS

if TYPE_CHECKING:
    from stowage import forecast

__all__ = ["bench_forecast", "bench_simulator", "busy_snapshot"]


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


def busy_snapshot(*, jobs: int = 1000, nodes: int = 500, seed: int = 0) -> forecast.Snapshot:
    """A cluster whose every node runs tasks part-way through, with ``jobs`` pending Jobs in three queues (FIFO,
    SRTF, FSP; weights 1, 2, 1): one or two groups (the second behind a barrier), 1–20 tasks of 60 s–1 h each,
    estimates from every source. Seeded: the same arguments give the same snapshot."""
    from stowage.forecast import Group, Job, Node, Queue, RunningTask, Snapshot
    from stowage.policy.estimates import Source
    from stowage.resources import ResourceVector

    rng = np.random.default_rng(seed)
    now = 1.8e9
    shapes = [ResourceVector({"cpu": c, "memory": m * 2**30}) for c, m in ((1, 2), (2, 4), (4, 8), (8, 32))]
    node_list = tuple(Node(f"node-{i}", ResourceVector({"cpu": 32, "memory": 128 * 2**30})) for i in range(nodes))
    queues = (Queue("etl", 1.0, JobOrder.FIFO), Queue("ml", 2.0, JobOrder.SRTF), Queue("adhoc", 1.0, JobOrder.FSP))
    out: list[Job] = []
    running: list[RunningTask] = []
    sources = list(Source)
    for i in range(nodes):  # one running job per node, filling about 7/8 of it
        tasks = 7
        group = Group("work", shapes[2], tasks + 3, float(rng.uniform(300, 3600)), Source.PHASE, finished=3)
        key = f"team/running-{i}"
        out.append(Job(key, queues[i % 3].name, (group,), now - 4000.0))
        running += [RunningTask(key, "work", f"node-{i}", float(rng.uniform(0, group.estimate_s)))
                    for _ in range(tasks)]
    for j in range(jobs):
        first = Group("map", shapes[int(rng.integers(4))], int(rng.integers(1, 21)), float(rng.uniform(60, 3600)),
                      sources[int(rng.integers(len(sources)))])
        groups = [first]
        if rng.random() < 0.5:
            groups.append(Group("reduce", shapes[int(rng.integers(2))], int(rng.integers(1, 5)),
                                float(rng.uniform(60, 600)), Source.PRIOR, depends_on=("map",)))
        out.append(Job(f"team/job-{j}", queues[j % 3].name, tuple(groups), now - 3600.0 + j))
    return Snapshot(now, node_list, queues, tuple(out), tuple(running))


@click.command("forecast")
@click.option("--jobs", type=int, default=1000, show_default=True, help="Pending Jobs.")
@click.option("--nodes", type=int, default=500, show_default=True, help="Nodes (each running tasks already).")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True, help="Predictions timed.")
@click.option("--grid", "grid_s", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Finish grid (ForecastOptions.grid_s; default its default; 0: exact finishes, slow).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
def bench_forecast(jobs: int, nodes: int, repeat: int, grid_s: float | None, seed: int) -> None:
    """CPU seconds of one `stowage.forecast.predict` on a busy cluster (issue #36 §1's target: ≤ 1 s for 1,000
    pending Jobs on 500 nodes)."""
    from stowage.config import StowageSettings
    from stowage.forecast import ForecastOptions, predict

    snap = busy_snapshot(jobs=jobs, nodes=nodes, seed=seed)
    tasks = sum(g.tasks - g.finished for j in snap.jobs for g in j.groups)
    click.echo(f"{len(snap.nodes)} nodes, {len(snap.jobs)} jobs ({jobs} pending), {len(snap.running)} running "
               f"tasks, {tasks} tasks left")
    options = ForecastOptions() if grid_s is None else ForecastOptions(grid_s=grid_s)
    click.echo(f"finish grid {options.grid_s:g}s, pass delay {options.pass_delay_s:g}s, preset {options.preset}")
    cpus = []
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        f = predict(snap, StowageSettings(), options)
        cpus.append(time.process_time() - cpu)
        wall = time.perf_counter() - wall
        last = max((j.finish_s for j in f.jobs if j.finish_s is not None), default=snap.now) - snap.now
        click.echo(f"predict: {cpus[-1]:.3f}s cpu {wall:.3f}s wall; last predicted finish +{last / 3600:.1f}h, "
                   f"horizon reached: {f.horizon_reached}")
    click.echo(f"median {sorted(cpus)[len(cpus) // 2]:.3f}s cpu per prediction")
