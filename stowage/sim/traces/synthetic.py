"""The Tetris §5.1 synthetic workload: map/reduce jobs of four sizes with distinct resource profiles.

What the paper states (Tetris §5.1, "Workload"), and how we read it:

- each job picks, uniformly at random, one of four classes of size and selectivity
  (output : input): *large & highly-selective* (1 : 0.2, "a couple 1000 tasks": 1,500–2,500),
  *medium & inflating* (1 : 2, "1000": 800–1,200), *medium & selective* (1 : 0.5, 800–1,200),
  *small & selective* (1 : 0.5, "100s": 100–500); sizes uniform in the stated ranges;
- a job is a map stage and a reduce stage behind a barrier (``reduce.depends_on = ("map",)``).
  Ours: every task handles the same amount of data, so ``maps = round(T / (1 + s))`` and
  ``reduces = T − maps`` for selectivity ``s`` (inflating jobs have more reduces than maps);
- each stage independently has high-mem (8 GB) or low-mem (2 GB) tasks, and high-cpu or
  low-cpu tasks, "the former [doing] substantial computation per data read or written and
  hence [having] low peak I/O demands". Ours: high-cpu = 2 cores at 20 MiB/s of I/O,
  low-cpu = 0.5 core at 100 MiB/s (chosen so that cpu, memory and disk all come near
  saturation at load 1: no single resource is the bottleneck all the time);
- arrivals uniform in ``[0, duration_s]`` (paper: [0, 3600] s).

Our model of the rest (the paper gives no durations or bandwidths):

- a task processes ``data_per_task`` (4 GiB × a per-job factor, lognormal σ = 0.5, clipped
  to [0.25, 4]) at its stage's I/O rate, so duration = data / rate (low-cpu ≈ 41 s,
  high-cpu ≈ 205 s before the factor). At the defaults (250 nodes, load 1) this gives
  about 110 jobs and 115 thousand tasks an hour (the paper ran "over 100 jobs");
- map tasks read from disk at the rate, a ``remote_fraction`` (0.25) of it over the network;
  reduce tasks fetch their shuffle over the network and write to disk, both at the rate;
- no demand exceeds the node's capacity, and resources the node shape does not have
  (e.g. a ``--node-shape`` without disk) are dropped from demands;
- ``load`` is the offered load of the busiest resource: jobs are drawn until
  ``max_r Σ_tasks duration × demand_r / capacity_r`` reaches ``load × n_nodes × duration_s``
  (node-seconds of resource ``r`` demanded during the arrival window, against what the
  cluster has). ``load = 1`` (the default) demands all of the bottleneck resource for the
  whole window, which only a perfect packing could serve in time: the cluster is
  saturated and a backlog builds (high load). Below ~0.6 it is mostly idle;
- nodes: ``n_nodes`` of the Tetris deployment shape (32 cores, 96 GiB, 8 disks, 10 Gbps);
- queues: the tenant model; opportunistic intent ``auto``; usage: the engine's usage model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from stowage.errors import InvalidInput
from stowage.labels import Opportunistic
from stowage.resources import CPU, DISK, MEMORY, NETWORK, ResourceVector
from stowage.sim.traces import shapes, tenants
from stowage.sim.workload import JobSpec, TaskGroup, Workload

__all__ = ["JobClass", "TetrisMix", "resource_work", "tetris_jobs", "tetris_mix"]

_MIB = 2**20
_GIB = 2**30
#: Stream id for the mix's draws (the tenant draws use their own stream).
_STREAM = 4


@dataclass(frozen=True, slots=True)
class JobClass:
    name: str
    min_tasks: int
    max_tasks: int
    selectivity: float  # output bytes per input byte


@dataclass(frozen=True, slots=True)
class TetrisMix:
    """Every knob of the mix; defaults are the paper's where it states one, else ours (module docstring)."""

    classes: tuple[JobClass, ...] = (
        JobClass("large-highly-selective", 1500, 2500, 0.2),
        JobClass("medium-inflating", 800, 1200, 2.0),
        JobClass("medium-selective", 800, 1200, 0.5),
        JobClass("small-selective", 100, 500, 0.5),
    )
    high_mem: float = 8 * _GIB
    low_mem: float = 2 * _GIB
    high_cpu: float = 2.0
    low_cpu: float = 0.5
    high_cpu_io_rate: float = 20 * _MIB  # bytes/s: compute-heavy tasks have low peak I/O
    low_cpu_io_rate: float = 100 * _MIB
    data_per_task: float = 4 * _GIB
    job_factor_sigma: float = 0.5
    job_factor_range: tuple[float, float] = (0.25, 4.0)
    remote_fraction: float = 0.25
    size_scale: float = 1.0  # multiplies task counts (a smaller mix for small clusters)

    def as_model(self) -> dict[str, Any]:
        model = asdict(self)
        model["classes"] = [asdict(c) for c in self.classes]
        model["job_factor_range"] = list(self.job_factor_range)
        return model


def resource_work(group: TaskGroup, capacity: Mapping[str, float]) -> dict[str, float]:
    """Node-seconds the group demands of each resource: ``tasks × duration × d_r / C_r``."""
    return {r: group.tasks * group.duration_s * group.demand[r] / c for r, c in capacity.items() if c > 0}


def _stage(
    rng: np.random.Generator, mix: TetrisMix, name: str, tasks: int, data: float, capacity: Mapping[str, float],
    depends_on: tuple[str, ...] = (),
) -> tuple[TaskGroup, str]:
    high_mem, high_cpu = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    rate = mix.high_cpu_io_rate if high_cpu else mix.low_cpu_io_rate
    amounts = {CPU: mix.high_cpu if high_cpu else mix.low_cpu, MEMORY: mix.high_mem if high_mem else mix.low_mem}
    if name == "map":
        amounts |= {DISK: rate, NETWORK: mix.remote_fraction * rate}
    else:
        amounts |= {DISK: rate, NETWORK: rate}
    profile = f"{'high' if high_mem else 'low'}-mem/{'high' if high_cpu else 'low'}-cpu"
    return TaskGroup(name, tasks, shapes.fit_demand(amounts, capacity), data / rate, depends_on=depends_on), profile


def tetris_jobs(
    rng: np.random.Generator, mix: TetrisMix, capacity: Mapping[str, float], target_work: float
) -> tuple[list[tuple[tuple[TaskGroup, ...], str]], dict[str, float]]:
    """Draw jobs (groups, description) until the busiest resource's work reaches ``target_work``."""
    drawn: list[tuple[tuple[TaskGroup, ...], str]] = []
    work = dict.fromkeys((r for r, c in capacity.items() if c > 0), 0.0)
    lo, hi = mix.job_factor_range
    while max(work.values(), default=target_work) < target_work:
        cls = mix.classes[int(rng.integers(len(mix.classes)))]
        size = int(rng.integers(cls.min_tasks, cls.max_tasks + 1))
        total = max(2, round(size * mix.size_scale))
        maps = min(total - 1, max(1, round(total / (1 + cls.selectivity))))
        data = mix.data_per_task * float(np.clip(rng.lognormal(0.0, mix.job_factor_sigma), lo, hi))
        map_group, map_profile = _stage(rng, mix, "map", maps, data, capacity)
        red_group, red_profile = _stage(rng, mix, "reduce", total - maps, data, capacity, ("map",))
        groups = (map_group, red_group)
        drawn.append((groups, f"{cls.name} map {map_profile} reduce {red_profile}"))
        for group in groups:
            for r, w in resource_work(group, capacity).items():
                work[r] += w
    return drawn, work


def tetris_mix(
    *,
    seed: int = 0,
    n_nodes: int = 250,
    load: float = 1.0,
    duration_s: float = 3600.0,
    node_capacity: Mapping[str, float] | None = None,
    mix: TetrisMix | None = None,
    prefix: str = "tetris",
) -> Workload:
    """The Tetris §5.1 mix on ``n_nodes`` nodes at offered ``load`` (see the module docstring)."""
    if load <= 0 or not math.isfinite(load):
        raise InvalidInput("load", load, "a positive number (1.0 saturates the cluster)")
    if duration_s <= 0:
        raise InvalidInput("duration_s", duration_s, "a positive number of seconds")
    mix = mix or TetrisMix()
    capacity = ResourceVector(node_capacity) if node_capacity is not None else shapes.TETRIS_DEPLOYMENT
    nodes = shapes.uniform_nodes(n_nodes, capacity)
    rng = np.random.default_rng((seed, _STREAM))
    target = load * n_nodes * duration_s
    drawn, work = tetris_jobs(rng, mix, capacity, target)
    arrivals = np.sort(rng.uniform(0.0, duration_s, size=len(drawn)))
    queues = tenants.assign_queues(len(drawn), seed, stream=1)
    width = len(str(len(drawn)))
    jobs = tuple(
        JobSpec(f"{prefix}-{i + 1:0{width}d}", queue, float(arrival), groups, Opportunistic.AUTO)
        for i, ((groups, _), arrival, queue) in enumerate(zip(drawn, arrivals, queues, strict=True))
    )
    classes = {c.name: sum(1 for _, d in drawn if d.startswith(c.name + " ")) for c in mix.classes}
    return Workload(
        name=f"tetris-mix (load {load:g}, {n_nodes} nodes)",
        nodes=nodes,
        queues=tenants.tenant_queues(),
        jobs=jobs,
        model={
            "source": "Tetris §5.1 synthetic workload (Grandl et al., SIGCOMM 2014), our reading",
            "seed": seed,
            "n_nodes": n_nodes,
            "node_capacity": capacity.as_quantities(),
            "load": load,
            "load_definition": "max_r sum(tasks*duration*demand_r/capacity_r) / (n_nodes*duration_s)",
            "offered_load_per_resource": {r: round(w / (n_nodes * duration_s), 3) for r, w in work.items()},
            "duration_s": duration_s,
            "arrivals": f"uniform in [0, {duration_s:g}] s",
            "jobs": len(jobs),
            "jobs_per_class": classes,
            "tasks": sum(j.task_count for j in jobs),
            "mix": mix.as_model(),
            "opportunistic": "auto for every job",
            "usage": "engine usage model (TaskGroup.usage unset)",
            "tenants": tenants.tenant_model(),
        },
    )
