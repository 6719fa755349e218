"""SWIM traces (Facebook 2009 Hadoop workload) turned into map/reduce jobs.

Format (SWIM ``workloadSuite``): tab separated, no header, one job a row::

    job_id  submit_time_s  inter_job_gap_s  map_input_bytes  shuffle_bytes  reduce_output_bytes

Bytes → tasks, SWIM's replay recipe (``GenerateReplayScript``) with our stated defaults:

- scale every byte count by ``n_nodes / source_nodes``, ``source_nodes`` being the machines of the
  cluster the trace was recorded on (:data:`SWIM_SOURCES`: FB-2009 about 600, FB-2010 3,000);
- maps ``= max(1, ceil(input / split_bytes))``, ``split_bytes`` = 64 MiB;
- reduces ``= 0`` when shuffle is 0 (map-only job), else
  ``max(1, round((shuffle + output) / bytes_per_reduce))``, ``bytes_per_reduce`` = 1 GiB
  (a job that shuffles has a reduce stage even if its bytes round to 0, as in SWIM);
- the reduce group depends on the map group (a barrier).

With these defaults the full FB-2009 day (file ``_0``) comes to 428,824 tasks at 600 nodes
(406,005 maps, 22,819 reduces; 4,448 of 5,894 jobs map-only).

Task model (the trace has no CPU, memory or durations; these are ours, stated):

- map: 1 core, 2 GiB (one 2 GB slot, as Tetris §5.1 says of the Facebook cluster); reads its
  split from disk at ``map_rate`` = 10 MiB/s, a ``remote_fraction`` = 0.25 of it over the network;
  duration ``= startup_s + (input / maps) / map_rate``;
- reduce: 1 core, 4 GiB; fetches the shuffle over the network and merges/writes on disk, both
  at ``reduce_rate`` = 16 MiB/s; duration ``= startup_s + ((shuffle + output) / reduces) / reduce_rate``;
- ``startup_s`` = 5 s (task launch, JVM start);
- usage: not set (the engine's usage model applies);
- nodes: ``n_nodes`` of the Facebook machine profile Tetris §5.1 used when replaying these
  traces: 12 cores, 32 GiB, 4 × 50 MB/s disk, 1 Gbps NIC;
- demands are capped at the node's capacity, and resources the node shape lacks are dropped;
- queues: the tenant model (:mod:`stowage.sim.traces.tenants`); opportunistic intent ``auto``.
"""

from __future__ import annotations

import importlib.resources
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stowage.errors import WorkloadError
from stowage.labels import Opportunistic
from stowage.resources import CPU, DISK, MEMORY, NETWORK, ResourceVector
from stowage.sim.traces import shapes, tenants
from stowage.sim.workload import JobSpec, TaskGroup, Workload

__all__ = [
    "BUNDLED_SWIM",
    "SWIM_CLUSTER_NODES",
    "SWIM_SOURCES",
    "SwimRow",
    "SwimTaskModel",
    "bundled_swim_path",
    "parse_swim",
    "read_swim",
    "source_nodes_of",
    "swim_jobs",
]

#: Machines in the cluster the FB-2009 traces were recorded on (SWIM's ``clusterSizeRaw``).
SWIM_CLUSTER_NODES = 600
#: Source clusters of the SWIM traces, by the prefix of their file names (SWIM's workloadSuite
#: README: FB-2009 on about 600 machines, FB-2010 on 3,000).
SWIM_SOURCES = {"FB-2009": SWIM_CLUSTER_NODES, "FB-2010": 3000}
_MIB = 2**20
_GIB = 2**30
_MAX_PROBLEMS = 20


#: The SWIM trace shipped in ``stowage/data/`` (unchanged copy; New BSD licence, see LICENSE-SWIM.txt).
BUNDLED_SWIM = "FB-2009_samples_24_times_1hr_0.tsv"


@contextmanager
def bundled_swim_path() -> Iterator[Path]:
    """A filesystem path to the bundled FB-2009 trace, valid inside the ``with`` block."""
    resource = importlib.resources.files("stowage") / "data" / BUNDLED_SWIM
    with importlib.resources.as_file(resource) as path:
        yield Path(path)


@dataclass(frozen=True, slots=True)
class SwimRow:
    job_id: str
    submit_s: float
    input_bytes: float
    shuffle_bytes: float
    output_bytes: float


@dataclass(frozen=True, slots=True)
class SwimTaskModel:
    """How bytes become tasks, durations and demands (every field lands in ``Workload.model``)."""

    split_bytes: float = 64 * _MIB
    bytes_per_reduce: float = 1 * _GIB
    map_cpu: float = 1.0
    map_memory: float = 2 * _GIB
    reduce_cpu: float = 1.0
    reduce_memory: float = 4 * _GIB
    map_rate: float = 10 * _MIB  # bytes/s one map task processes
    reduce_rate: float = 16 * _MIB  # bytes/s one reduce task fetches and writes
    remote_fraction: float = 0.25  # share of map input read over the network
    startup_s: float = 5.0

    def as_model(self) -> dict[str, Any]:
        return {
            "maps": "max(1, ceil(input / split_bytes))",
            "reduces": "0 if shuffle == 0 else max(1, round((shuffle + output) / bytes_per_reduce))",
            "split_bytes": self.split_bytes,
            "bytes_per_reduce": self.bytes_per_reduce,
            "map": {"cpu": self.map_cpu, "memory": self.map_memory, "disk": "map_rate",
                    "network": "remote_fraction * map_rate",
                    "duration_s": "startup_s + (input / maps) / map_rate"},
            "reduce": {"cpu": self.reduce_cpu, "memory": self.reduce_memory, "disk": "reduce_rate",
                       "network": "reduce_rate",
                       "duration_s": "startup_s + ((shuffle + output) / reduces) / reduce_rate"},
            "map_rate_bytes_per_s": self.map_rate,
            "reduce_rate_bytes_per_s": self.reduce_rate,
            "remote_fraction": self.remote_fraction,
            "startup_s": self.startup_s,
            "usage": "engine usage model (TaskGroup.usage unset)",
        }


def parse_swim(path: str | Path, *, hours: float | None = None) -> list[SwimRow]:
    """Rows of a SWIM file, in file order; only jobs submitted before ``hours`` when given.

    Raises :class:`WorkloadError` listing every malformed line (path, line number, why).
    """
    path = Path(path)
    limit = None if hours is None else hours * 3600.0
    rows: list[SwimRow] = []
    problems: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 6:
                problems.append(f"{path}:{lineno}: expected 6 tab-separated fields, got {len(fields)}")
                continue
            try:
                submit, _gap, inp, shuffle, out = (float(f) for f in fields[1:6])
            except ValueError:
                problems.append(f"{path}:{lineno}: fields 2-6 must be numbers, got {fields[1:6]!r}")
                continue
            if min(submit, inp, shuffle, out) < 0 or not all(map(math.isfinite, (submit, inp, shuffle, out))):
                problems.append(f"{path}:{lineno}: times and byte counts must be finite and >= 0")
                continue
            if limit is not None and submit >= limit:
                continue
            rows.append(SwimRow(fields[0].strip(), submit, inp, shuffle, out))
    if problems:
        more = len(problems) - _MAX_PROBLEMS
        raise WorkloadError(problems[:_MAX_PROBLEMS] + ([f"... and {more} more"] if more > 0 else []))
    return rows


def source_nodes_of(path: str | Path) -> int | None:
    """The source cluster's machines for a SWIM file named like SWIM's own (``FB-2010_samples_…``), else None."""
    name = Path(path).name.upper()
    return next((nodes for prefix, nodes in SWIM_SOURCES.items() if name.startswith(prefix)), None)


def swim_jobs(
    rows: list[SwimRow], *, n_nodes: int, seed: int, task_model: SwimTaskModel,
    node_capacity: Mapping[str, float] = shapes.FB_2009_PROFILE, prefix: str = "fb",
    source_nodes: int = SWIM_CLUSTER_NODES,
) -> tuple[JobSpec, ...]:
    """Turn SWIM rows into jobs by the recipe in the module docstring.

    Demands are made runnable on ``node_capacity`` (:func:`shapes.fit_demand`).
    """
    m = task_model
    scale = n_nodes / source_nodes
    map_demand = shapes.fit_demand(
        {CPU: m.map_cpu, MEMORY: m.map_memory, DISK: m.map_rate, NETWORK: m.remote_fraction * m.map_rate},
        node_capacity,
    )
    reduce_demand = shapes.fit_demand(
        {CPU: m.reduce_cpu, MEMORY: m.reduce_memory, DISK: m.reduce_rate, NETWORK: m.reduce_rate}, node_capacity
    )
    queues = tenants.assign_queues(len(rows), seed)
    jobs: list[JobSpec] = []
    for row, queue in zip(rows, queues, strict=True):
        inp, shuffle, out = row.input_bytes * scale, row.shuffle_bytes * scale, row.output_bytes * scale
        maps = max(1, math.ceil(inp / m.split_bytes))
        groups = [TaskGroup("map", maps, map_demand, m.startup_s + (inp / maps) / m.map_rate)]
        if row.shuffle_bytes > 0:
            reduces = max(1, round((shuffle + out) / m.bytes_per_reduce))
            duration = m.startup_s + ((shuffle + out) / reduces) / m.reduce_rate
            groups.append(TaskGroup("reduce", reduces, reduce_demand, duration, depends_on=("map",)))
        jobs.append(JobSpec(f"{prefix}-{row.job_id}", queue, row.submit_s, tuple(groups), Opportunistic.AUTO))
    return tuple(jobs)


def read_swim(
    path: str | Path,
    *,
    n_nodes: int = SWIM_CLUSTER_NODES,
    seed: int = 0,
    hours: float | None = None,
    node_capacity: Mapping[str, float] | None = None,
    task_model: SwimTaskModel | None = None,
    source_nodes: int = SWIM_CLUSTER_NODES,
) -> Workload:
    """A SWIM trace as a :class:`Workload` on ``n_nodes`` nodes, bytes scaled by ``n_nodes / source_nodes``.

    ``source_nodes``: machines of the cluster the trace was recorded on (default FB-2009's 600;
    :func:`source_nodes_of` reads it from SWIM's file names).
    """
    path = Path(path)
    model = task_model or SwimTaskModel()
    capacity = ResourceVector(node_capacity) if node_capacity is not None else shapes.FB_2009_PROFILE
    rows = parse_swim(path, hours=hours)
    jobs = swim_jobs(rows, n_nodes=n_nodes, seed=seed, task_model=model, node_capacity=capacity,
                     source_nodes=source_nodes)
    maps = sum(j.groups[0].tasks for j in jobs)
    reduces = sum(j.task_count for j in jobs) - maps
    return Workload(
        name=f"swim:{path.name}" + (f" (first {hours:g} h)" if hours is not None else ""),
        nodes=shapes.uniform_nodes(n_nodes, capacity),
        queues=tenants.tenant_queues(),
        jobs=jobs,
        model={
            "source": f"SWIM {path.name} (SWIMProjectUCB/SWIM workloadSuite, New BSD licence)",
            "hours": hours if hours is not None else "all",
            "n_nodes": n_nodes,
            "source_nodes": source_nodes,
            "byte_scale": f"n_nodes / source_nodes = {n_nodes} / {source_nodes} = {n_nodes / source_nodes:g}",
            "node_capacity": capacity.as_quantities(),
            "jobs": len(jobs),
            "map_only_jobs": sum(1 for j in jobs if len(j.groups) == 1),
            "tasks": {"map": maps, "reduce": reduces, "total": maps + reduces},
            "task_model": model.as_model(),
            "opportunistic": "auto for every job",
            "tenants": tenants.tenant_model(),
            "seed": seed,
        },
    )
