"""Random workloads: seeded shapes nobody tuned the policy for (issue #21 §3).

One seed fixes everything below; each workload draws its own point in these ranges:

- **cluster**: ``n_nodes`` uniform in [4, 12] of the Facebook 2009 profile (12 cores, 32 GiB,
  200 MB/s disk, 1 Gbps) unless given: small, so that one run takes seconds;
- **job sizes** (heavy-tailed): each job is a row drawn with replacement from the bundled
  FB-2009 SWIM day and turned into map and reduce task counts and durations by SWIM's own
  recipe (:func:`stowage.sim.traces.swim.swim_jobs`, bytes scaled by ``n_nodes / 600``): median
  job one map task, the largest thousands. A job whose work alone exceeds half the workload's
  total is redrawn (the tail is cut there, so one job cannot be the whole workload);
- **task shapes**: each stage independently *cpu-heavy* (2–4 cores, 1–2 GiB, little I/O),
  *memory-heavy* (0.5–1 core, 6–12 GiB), or *bandwidth-heavy* (0.5 core, 1–2 GiB, disk 40–90
  MB/s and network 20–60 MB/s); its duration stays SWIM's;
- **DAG**: map-only jobs stay one stage; a job with reduces gets, with equal chance, the
  map → reduce barrier, a chain map → reduce → final (a tenth of the reduces, ≥ 1, half their
  duration), or a diamond: map, then reduce and a side stage (as many tasks as the reduces, half
  as long) both behind it, then a final stage behind both;
- **usage**: the workload draws a mean ``u`` in [0.5, 0.95]; each stage uses a fraction of its
  request uniform in [u − 0.05, u + 0.05], clipped to [0.5, 0.95] (``TaskGroup.usage``: the
  engine's usage model then only adds ramp-up and bursts);
- **offered load** uniform in [0.6, 1.2] on the busiest resource, as in the Tetris mix
  (``max_r Σ tasks × duration × demand_r / capacity_r`` over ``n_nodes × window_s``): jobs are
  drawn until it is reached; arrivals uniform over a window of 400 s;
- **queues**: one queue (``default``) for a third of the seeds, else 2–4 queues with weights
  from {1, 2, 4}, jobs assigned by Zipf shares; job order SRTF; opportunistic intent ``auto``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from stowage.errors import InvalidInput
from stowage.labels import Opportunistic
from stowage.model import JobOrder
from stowage.resources import CPU, DISK, MEMORY, NETWORK, ResourceVector
from stowage.sim.traces import shapes, swim
from stowage.sim.traces.synthetic import resource_work
from stowage.sim.workload import JobSpec, QueueSpec, TaskGroup, Workload

__all__ = ["LOAD_RANGE", "NODES_RANGE", "SHAPES", "USAGE_RANGE", "WINDOW_S", "random_mix"]

NODES_RANGE = (4, 12)
LOAD_RANGE = (0.6, 1.2)
USAGE_RANGE = (0.5, 0.95)
WINDOW_S = 400.0
#: Task shapes a stage draws from (uniform).
SHAPES = ("cpu-heavy", "memory-heavy", "bandwidth-heavy")
_GIB = 2**30
_MB = 1e6
_STREAM = 21  # this module's generator stream (issue #21), apart from the other readers'
_MAX_JOB_SHARE = 0.5


def _shape(rng: np.random.Generator, kind: str) -> dict[str, float]:
    if kind == "cpu-heavy":
        return {CPU: float(rng.uniform(2, 4)), MEMORY: float(rng.uniform(1, 2)) * _GIB,
                DISK: 5 * _MB, NETWORK: 2 * _MB}
    if kind == "memory-heavy":
        return {CPU: float(rng.uniform(0.5, 1)), MEMORY: float(rng.uniform(6, 12)) * _GIB,
                DISK: 10 * _MB, NETWORK: 5 * _MB}
    return {CPU: 0.5, MEMORY: float(rng.uniform(1, 2)) * _GIB,
            DISK: float(rng.uniform(40, 90)) * _MB, NETWORK: float(rng.uniform(20, 60)) * _MB}


def _dag(rng: np.random.Generator, sizes: tuple[TaskGroup, ...]) -> list[tuple[str, int, float, tuple[str, ...]]]:
    """(name, tasks, duration, depends_on) of each stage, from SWIM's map (and reduce) group."""
    m = sizes[0]
    stages = [("map", m.tasks, m.duration_s, ())]
    if len(sizes) == 1:
        return stages
    r = sizes[1]
    kind = int(rng.integers(3))
    stages.append(("reduce", r.tasks, r.duration_s, ("map",)))
    if kind == 1:
        stages.append(("final", max(1, r.tasks // 10), r.duration_s / 2, ("reduce",)))
    elif kind == 2:
        stages.append(("side", r.tasks, r.duration_s / 2, ("map",)))
        stages.append(("final", max(1, r.tasks // 10), r.duration_s / 2, ("reduce", "side")))
    return stages


def _queues(rng: np.random.Generator) -> tuple[QueueSpec, ...]:
    if rng.random() < 1 / 3:
        return (QueueSpec("default", 1.0, JobOrder.SRTF, True),)
    count = int(rng.integers(2, 5))
    weights = rng.choice([1.0, 2.0, 4.0], size=count)
    return tuple(QueueSpec(f"q{i + 1}", float(w), JobOrder.SRTF, True) for i, w in enumerate(weights))


def random_mix(seed: int, *, n_nodes: int | None = None, node_capacity: Mapping[str, float] | None = None) -> Workload:
    """The random workload of ``seed`` (module docstring); ``n_nodes``/``node_capacity`` override the drawn cluster."""
    if seed < 0:
        raise InvalidInput("random:SEED", seed, "a seed ≥ 0")
    rng = np.random.default_rng((seed, _STREAM))
    drawn_nodes = int(rng.integers(NODES_RANGE[0], NODES_RANGE[1] + 1))
    count = n_nodes or drawn_nodes
    capacity = ResourceVector(node_capacity) if node_capacity is not None else shapes.FB_2009_PROFILE
    load = float(rng.uniform(*LOAD_RANGE))
    usage_mean = float(rng.uniform(*USAGE_RANGE))
    queues = _queues(rng)
    rows = _swim_rows()
    target = load * count * WINDOW_S
    jobs_groups: list[tuple[TaskGroup, ...]] = []
    work = dict.fromkeys((r for r, c in capacity.items() if c > 0), 0.0)
    shape_counts = dict.fromkeys(SHAPES, 0)
    while max(work.values(), default=target) < target:
        row = rows[int(rng.integers(len(rows)))]
        sizes = swim.swim_jobs([row], n_nodes=count, seed=0, task_model=swim.SwimTaskModel(),
                               node_capacity=capacity)[0].groups
        groups = []
        for name, tasks, duration, deps in _dag(rng, sizes):
            kind = SHAPES[int(rng.integers(len(SHAPES)))]
            usage = float(np.clip(rng.uniform(usage_mean - 0.05, usage_mean + 0.05), *USAGE_RANGE))
            demand = shapes.fit_demand(_shape(rng, kind), capacity)
            groups.append((TaskGroup(name, tasks, demand, duration, usage, deps), kind))
        job_work = {r: sum(resource_work(g, capacity).get(r, 0.0) for g, _ in groups) for r in work}
        if max(job_work.values(), default=0.0) > _MAX_JOB_SHARE * target:
            continue  # the tail cut: redraw (module docstring)
        for r, w in job_work.items():
            work[r] += w
        for _, kind in groups:
            shape_counts[kind] += 1
        jobs_groups.append(tuple(g for g, _ in groups))
    arrivals = np.sort(rng.uniform(0.0, WINDOW_S, size=len(jobs_groups)))
    shares = 1.0 / np.arange(1, len(queues) + 1)
    picks = rng.choice(len(queues), size=len(jobs_groups), p=shares / shares.sum())
    width = len(str(len(jobs_groups)))
    jobs = tuple(
        JobSpec(f"r{seed}-{i + 1:0{width}d}", queues[int(q)].name, float(a), groups, Opportunistic.AUTO)
        for i, (groups, a, q) in enumerate(zip(jobs_groups, arrivals, picks, strict=True))
    )
    model: dict[str, Any] = {
        "source": "random mix (stowage.sim.traces.random_mix): SWIM FB-2009 job sizes, random shapes and DAGs",
        "seed": seed,
        "n_nodes": count,
        "node_capacity": capacity.as_quantities(),
        "load": load,
        "offered_load_per_resource": {r: round(w / (count * WINDOW_S), 3) for r, w in work.items()},
        "usage_mean": usage_mean,
        "window_s": WINDOW_S,
        "queues": {q.name: q.weight for q in queues},
        "jobs": len(jobs),
        "tasks": sum(j.task_count for j in jobs),
        "stages_per_shape": shape_counts,
    }
    return Workload(f"random:{seed} ({count} nodes, load {load:.2f}, usage {usage_mean:.2f})",
                    shapes.uniform_nodes(count, capacity), queues, jobs, model)


@functools.cache
def _swim_rows() -> tuple[swim.SwimRow, ...]:
    """The bundled FB-2009 day's rows, parsed once per process: the pool job sizes are drawn from."""

    with swim.bundled_swim_path() as path:
        return tuple(swim.parse_swim(path))
