"""``stowage bench dispatcher``: how many tasks ``Dispatcher.decide`` releases per CPU second, and its latency.

The cluster (default: 5,000 nodes of 32 cores / 128 GiB / 500 MB/s disk / 1.25 GB/s network, each already
65–97 % requested by one regular pod, with a usage sample at about half of the requests) and the work
(default: 10,000 pending tasks in 1,000 jobs over 50 queues; demand shapes from a Tetris-like mix; intents
``false``/``auto``/``true``; queues SRTF/FIFO/FSP, weights 1–3, one in five denying harvesting) are built from
a seed. Then, round after round: ``decide(view)``; every released task starts on its node hint; a share of
the running tasks finishes (freeing capacity, teaching the classifier); until every task is released or the
rounds run out.

Reported, all from this one run, CPU seconds of this process (pinned to one core when it can be):

* tasks released per CPU second of ``decide`` (the issue's target: ≥ 1,000/s on one core);
* ``decide`` latency: p50/p99 over every call, the first call (the whole backlog) alone, and p50/p99 of the
  later calls (a few tasks each, the dispatcher's every-second case);
* the ratio of ``decide`` to the policy core alone making the same decisions: ``dispatch.pack`` on the very
  ``PassInput`` s the dispatcher built, called as the simulator's ``stowage`` preset calls it (each pass is
  re-run and must place exactly the same tasks). The difference is the dispatcher's adapter work: records to
  arrays, harvestable capacity, the classifier, FSP, job ranks.

``stowage bench gangs`` (``gang_pass``): one ``decide`` over a backlog of all-or-nothing jobs (default: 1,000
pending gangs of 4 tasks on 500 nodes of the cluster above) against the same pass with the same jobs as ordinary
groups, each timed as the median of a few fresh dispatchers' first call; the ratio is the cost of gangs (the
target: at most 2x).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import click
import numpy as np
from stowage.operator.dispatcher import (
    Dispatcher,
    DispatchView,
    NodeRecord,
    PendingGroup,
    QueueRecord,
    RunningPod,
)

from stowage.config import StowageSettings
from stowage.labels import Opportunistic
from stowage.model import JobOrder, Pool
from stowage.policy import classifier, dispatch, estimates
from stowage.resources import ResourceVector

__all__ = ["BenchResult", "GangResult", "Scenario", "bench_dispatcher", "bench_gangs", "gang_pass", "run"]

GI = 2.0**30
_NODE = {"cpu": 32.0, "memory": 128 * GI, "disk": 500e6, "network": 1.25e9}
#: (cpu cores, memory GiB, disk MB/s, network MB/s) per task: the Tetris §5.1 spread of shapes, coarsely.
_SHAPES = [(c, m, d, n) for c in (0.5, 1.0, 2.0, 4.0, 8.0) for m in (1.0, 4.0, 16.0) for d, n in ((0, 0), (50, 20))]


@dataclass(frozen=True, slots=True)
class BenchResult:
    nodes: int
    jobs: int
    tasks: int
    queues: int
    calls: int
    released: int
    released_opportunistic: int
    decide_cpu_s: float
    tasks_per_cpu_s: float
    first_call_ms: float
    first_call_released: int
    p50_ms: float
    p99_ms: float
    later_p50_ms: float
    later_p99_ms: float
    """p50/p99 of the calls after the first (the dispatcher's every-second case: a few tasks each)."""
    core_cpu_s: float
    ratio_to_core: float
    pinned_cpu: int | None


class Scenario:
    """The bench's cluster and work, and how they move between rounds (see the module docstring)."""

    def __init__(self, n_nodes: int, n_jobs: int, n_tasks: int, n_queues: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        fill = rng.uniform(0.65, 0.97, size=n_nodes)
        alloc = ResourceVector(_NODE)
        self.nodes = []
        self.background = []
        for i in range(n_nodes):
            name = f"node-{i:05d}"
            req = ResourceVector({k: v * fill[i] for k, v in _NODE.items() if k in ("cpu", "memory")})
            self.background.append(RunningPod(name, req, queue=None, bound_at_s=0.0))  # long bound: its usage is in U
            self.nodes.append(NodeRecord(name, alloc, harvest=True, usage=req * float(rng.uniform(0.3, 0.7))))
        orders = (JobOrder.SRTF, JobOrder.FIFO, JobOrder.FSP)
        self.queues = [QueueRecord(f"queue-{q:02d}", weight=float(rng.integers(1, 4)), opportunistic=q % 5 != 4,
                                   job_order=orders[q % 3]) for q in range(n_queues)]
        per_job = np.full(n_jobs, n_tasks // n_jobs)
        per_job[: n_tasks - int(per_job.sum())] += 1
        intents = (Opportunistic.FALSE, Opportunistic.AUTO, Opportunistic.TRUE)
        self.groups: dict[str, PendingGroup] = {}
        self.tasks: dict[str, int] = {}
        for j in range(n_jobs):
            c, m, d, n = _SHAPES[int(rng.integers(len(_SHAPES)))]
            key = f"batch/job-{j:04d}/main"
            demand = ResourceVector({"cpu": c, "memory": m * GI, "disk": d * 1e6, "network": n * 1e6})
            self.groups[key] = PendingGroup(
                key=key, queue=self.queues[j % n_queues].name, demand=demand, releasable=int(per_job[j]),
                namespace="batch", job=f"batch/job-{j:04d}", group="main", intent=intents[j % 3],
                expected_duration_s=float(rng.choice([20.0, 45.0, 300.0, 1800.0])), arrival_s=float(j),
                remaining_tasks=int(per_job[j]), finished_fraction=0.0)
            self.tasks[key] = int(per_job[j])
        self.running: list[tuple[RunningPod, str]] = []  # (pod, group key)
        self.done: dict[str, int] = dict.fromkeys(self.groups, 0)

    def view(self) -> DispatchView:
        return DispatchView(self.nodes, [*self.background, *(p for p, _ in self.running)], self.queues,
                            [g for g in self.groups.values() if g.remaining_tasks > 0])

    def start(self, releases: list[Any], now: float) -> None:
        for r in releases:
            g = self.groups[r.group_key]
            pod = RunningPod(r.node_hint, g.demand, queue=g.queue, opportunistic=r.pod_class.value == "opportunistic",
                             bound_at_s=now)
            self.running += [(pod, r.group_key)] * r.count
            self.groups[r.group_key] = dataclasses.replace(g, releasable=g.releasable - r.count)

    def finish(self, fraction: float, dispatcher: Dispatcher) -> None:
        if not self.running:
            return
        k = max(1, int(len(self.running) * fraction))
        gone = set(self.rng.choice(len(self.running), size=min(k, len(self.running)), replace=False).tolist())
        for i in sorted(gone):
            _, key = self.running[i]
            g = self.groups[key]
            self.done[key] += 1
            frac = self.done[key] / self.tasks[key]
            self.groups[key] = dataclasses.replace(g, remaining_tasks=g.remaining_tasks - 1, finished_fraction=frac,
                                                   job_progress=frac)
            job = estimates.recurring_key(g.namespace, key.split("/")[1])  # as the dispatcher asks
            features = classifier.task_features(g.queue, job, g.group, {"cpu": g.demand["cpu"]}, {"cpu": 32.0}, frac)
            dispatcher.observe_finished(features, (g.expected_duration_s,), queue=g.queue, group_key=key, group=g.group)
        self.running = [x for i, x in enumerate(self.running) if i not in gone]


def _pin() -> tuple[int | None, set[int] | None]:
    """Run on one core when the OS lets us (the target is per core); returns it and the affinity to restore."""
    try:
        before = set(os.sched_getaffinity(0))
        cpu = max(before)
        os.sched_setaffinity(0, {cpu})
        return cpu, before
    except (AttributeError, OSError):
        return None, None


def run(n_nodes: int = 5000, n_jobs: int = 1000, n_tasks: int = 10000, n_queues: int = 50, *, rounds: int = 40,
        finish_fraction: float = 0.05, seed: int = 7, pin: bool = True) -> BenchResult:
    """Build the scenario, run the rounds, measure (module docstring)."""
    pinned, before = _pin() if pin else (None, None)
    try:
        return _run(n_nodes, n_jobs, n_tasks, n_queues, rounds, finish_fraction, seed, pinned)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def _run(n_nodes: int, n_jobs: int, n_tasks: int, n_queues: int, rounds: int, finish_fraction: float, seed: int,
         pinned: int | None) -> BenchResult:
    scenario = Scenario(n_nodes, n_jobs, n_tasks, n_queues, seed)
    now = [1000.0]
    passes: list[tuple[Pool, dispatch.PassInput, dispatch.PassResult]] = []
    settings = StowageSettings()
    dispatcher = Dispatcher(settings, clock=lambda: now[0], on_pass=lambda *x: passes.append(x))
    latencies: list[float] = []
    core = 0.0
    released = opportunistic = first_released = 0
    for _ in range(rounds):
        view = scenario.view()
        if not view.groups or not any(g.releasable > 0 for g in view.groups):
            break
        passes.clear()
        t0 = time.process_time()
        releases = dispatcher.decide(view)
        latencies.append(time.process_time() - t0)
        for _pool, passed, result in passes:  # the same passes, the policy core alone
            t1 = time.process_time()
            again = dispatch.pack(passed, settings.packing)
            core += time.process_time() - t1
            if again.placements != result.placements:
                raise click.ClickException("the policy core alone placed different tasks: not the same decisions")
        count = sum(r.count for r in releases)
        if len(latencies) == 1:
            first_released = count
        released += count
        opportunistic += sum(r.count for r in releases if r.pod_class.value == "opportunistic")
        scenario.start(releases, now[0])
        now[0] += 1.0
        scenario.finish(finish_fraction, dispatcher)
    lat = np.array(latencies) if latencies else np.zeros(1)
    later = lat[1:] if lat.size > 1 else lat
    total = float(lat.sum())
    return BenchResult(
        nodes=n_nodes, jobs=n_jobs, tasks=n_tasks, queues=n_queues, calls=len(latencies), released=released,
        released_opportunistic=opportunistic, decide_cpu_s=total,
        tasks_per_cpu_s=released / total if total > 0 else float("inf"),
        first_call_ms=float(lat[0] * 1e3), first_call_released=first_released,
        p50_ms=float(np.percentile(lat, 50) * 1e3), p99_ms=float(np.percentile(lat, 99) * 1e3),
        later_p50_ms=float(np.percentile(later, 50) * 1e3), later_p99_ms=float(np.percentile(later, 99) * 1e3),
        core_cpu_s=core, ratio_to_core=total / core if core > 0 else float("inf"), pinned_cpu=pinned)


@click.command("dispatcher", context_settings={"show_default": True})
@click.option("--nodes", "n_nodes", type=click.IntRange(min=1), default=5000, help="Nodes in the cluster.")
@click.option("--jobs", "n_jobs", type=click.IntRange(min=1), default=1000, help="Pending jobs.")
@click.option("--tasks", "n_tasks", type=click.IntRange(min=1), default=10000, help="Pending tasks over all jobs.")
@click.option("--queues", "n_queues", type=click.IntRange(min=1), default=50, help="Queues the jobs are spread over.")
@click.option("--rounds", type=click.IntRange(min=1), default=40, help="decide() calls at most.")
@click.option("--finish", "finish_fraction", type=click.FloatRange(0.0, 1.0), default=0.05,
              help="Share of the running tasks that finish between two calls.")
@click.option("--seed", type=int, default=7, help="Seed of the cluster and the work.")
@click.option("--no-pin", is_flag=True, help="Do not pin the process to one CPU.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_dispatcher(n_nodes: int, n_jobs: int, n_tasks: int, n_queues: int, rounds: int, finish_fraction: float,
                     seed: int, no_pin: bool, as_json: bool) -> None:
    """Tasks the dispatcher releases per CPU second, decide() latency, and its ratio to the policy core alone."""
    if n_tasks < n_jobs:
        raise click.BadParameter(f"must be at least --jobs ({n_jobs}), got {n_tasks}", param_hint="--tasks")
    r = run(n_nodes, n_jobs, n_tasks, n_queues, rounds=rounds, finish_fraction=finish_fraction, seed=seed,
            pin=not no_pin)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(r), indent=2))
        return
    click.echo(f"{r.nodes} nodes, {r.tasks} pending tasks in {r.jobs} jobs over {r.queues} queues; "
               + (f"pinned to CPU {r.pinned_cpu}" if r.pinned_cpu is not None else "not pinned"))
    click.echo(f"released {r.released} tasks ({r.released_opportunistic} opportunistic) in {r.calls} decide() calls, "
               f"{r.decide_cpu_s:.2f} CPU s: {r.tasks_per_cpu_s:,.0f} tasks/s")
    click.echo(f"decide() latency: p50 {r.p50_ms:,.1f} ms, p99 {r.p99_ms:,.1f} ms over all calls; "
               f"first call {r.first_call_ms:,.0f} ms ({r.first_call_released} released); "
               f"later calls p50 {r.later_p50_ms:,.1f} ms, p99 {r.later_p99_ms:,.1f} ms")
    click.echo(f"policy core alone (dispatch.pack, as the simulator's stowage preset calls it), same decisions: "
               f"{r.core_cpu_s:.2f} CPU s; decide() / core = {r.ratio_to_core:.2f}x")


@dataclass(frozen=True, slots=True)
class GangResult:
    nodes: int
    gangs: int
    gang_size: int
    repeats: int
    plain_ms: float
    """Median ``decide`` of the backlog as ordinary groups."""
    gang_ms: float
    """Median ``decide`` of the same backlog, every job a gang."""
    plain_released: int
    gang_released: int
    ratio: float
    pinned_cpu: int | None


def gang_pass(n_nodes: int = 500, n_gangs: int = 1000, gang_size: int = 4, n_queues: int = 50, *, repeats: int = 5,
              seed: int = 7, pin: bool = True) -> GangResult:
    """Time one pass over ``n_gangs`` pending gangs against the same pass without gangs (module docstring)."""
    pinned, before = _pin() if pin else (None, None)
    try:
        scenario = Scenario(n_nodes, n_gangs, n_gangs * gang_size, n_queues, seed)
        plain = scenario.view()
        gangs = dataclasses.replace(plain, groups=[dataclasses.replace(g, gang=g.releasable) for g in plain.groups])
        out: dict[str, tuple[float, int]] = {}
        for name, view in (("plain", plain), ("gang", gangs)):
            times, released = [], 0
            for _ in range(repeats):
                dispatcher = Dispatcher(StowageSettings(), clock=lambda: 1000.0)
                t0 = time.process_time()
                releases = dispatcher.decide(view)
                times.append(time.process_time() - t0)
                released = sum(r.count for r in releases)
            out[name] = (float(np.median(times)), released)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    (plain_s, plain_n), (gang_s, gang_n) = out["plain"], out["gang"]
    return GangResult(nodes=n_nodes, gangs=n_gangs, gang_size=gang_size, repeats=repeats, plain_ms=plain_s * 1e3,
                      gang_ms=gang_s * 1e3, plain_released=plain_n, gang_released=gang_n,
                      ratio=gang_s / plain_s if plain_s > 0 else float("inf"), pinned_cpu=pinned)


@click.command("gangs", context_settings={"show_default": True})
@click.option("--nodes", "n_nodes", type=click.IntRange(min=1), default=500, help="Nodes in the cluster.")
@click.option("--gangs", "n_gangs", type=click.IntRange(min=1), default=1000, help="Pending all-or-nothing jobs.")
@click.option("--gang-size", type=click.IntRange(min=1), default=4, help="Tasks in each gang.")
@click.option("--queues", "n_queues", type=click.IntRange(min=1), default=50, help="Queues the jobs are spread over.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Passes timed per case (the median counts).")
@click.option("--seed", type=int, default=7, help="Seed of the cluster and the work.")
@click.option("--no-pin", is_flag=True, help="Do not pin the process to one CPU.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_gangs(n_nodes: int, n_gangs: int, gang_size: int, n_queues: int, repeats: int, seed: int, no_pin: bool,
                as_json: bool) -> None:
    """One dispatcher pass over pending gangs against the same pass without gangs, and their ratio."""
    r = gang_pass(n_nodes, n_gangs, gang_size, n_queues, repeats=repeats, seed=seed, pin=not no_pin)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(r), indent=2))
        return
    click.echo(f"{r.nodes} nodes, {r.gangs} pending jobs of {r.gang_size} tasks over {n_queues} queues; "
               + (f"pinned to CPU {r.pinned_cpu}" if r.pinned_cpu is not None else "not pinned"))
    click.echo(f"one pass without gangs: {r.plain_ms:,.1f} ms ({r.plain_released} tasks released); every job a gang: "
               f"{r.gang_ms:,.1f} ms ({r.gang_released} released); median of {r.repeats}")
    click.echo(f"gangs / without = {r.ratio:.2f}x")
