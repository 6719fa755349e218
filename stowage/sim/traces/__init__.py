"""Workload readers: each turns a source (synthetic mix, SWIM, openb, a user file) into model jobs.

:func:`resolve_workload` maps the CLI's ``--workload`` / ``--nodes`` / ``--node-shape`` to one
:class:`~stowage.sim.workload.Workload`; :func:`embedded_default` is the workload shipped inside
the package (``stowage/data/``), used when no ``--workload`` is given. See ``docs/workloads.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from stowage.errors import InvalidInput, WorkloadError
from stowage.resources import ResourceVector
from stowage.sim.traces import random_mix, shapes, tenants
from stowage.sim.traces.openb import read_openb
from stowage.sim.traces.swim import (
    BUNDLED_SWIM,
    SWIM_CLUSTER_NODES,
    SWIM_SOURCES,
    bundled_swim_path,
    read_swim,
    source_nodes_of,
)
from stowage.sim.traces.synthetic import TetrisMix, tetris_mix
from stowage.sim.traces.workload_file import load_workload_file
from stowage.sim.workload import Workload, nodes_over_limit

__all__ = [
    "BUNDLED_SWIM",
    "EMBEDDED_DATA_PER_TASK",
    "EMBEDDED_HOURS",
    "EMBEDDED_NODES",
    "EMBEDDED_SYNTHETIC_LOAD",
    "EMBEDDED_SYNTHETIC_SIZE_SCALE",
    "WORKLOAD_SPECS",
    "bundled_swim_path",
    "embedded_default",
    "resolve_workload",
]

#: The embedded default: this many nodes of the Facebook 2009 profile ...
EMBEDDED_NODES = 50
#: ... the first hours of FB-2009 (bytes scaled to 50/600 as SWIM prescribes) ...
EMBEDDED_HOURS = 2.0
#: ... plus the Tetris mix over the same hours at this offered load, task counts scaled by this.
EMBEDDED_SYNTHETIC_LOAD = 0.9
EMBEDDED_SYNTHETIC_SIZE_SCALE = 0.1
#: ... and 6 GiB per task instead of 4 (tasks ≈ 60–300 s): fewer, longer tasks keep the run short.
EMBEDDED_DATA_PER_TASK = 6 * 2**30

WORKLOAD_SPECS = (
    "embedded (default), synthetic, swim (bundled FB-2009 day), swim:PATH, openb:PODS[,NODES], "
    "random or random:SEED (a random mix), or a workload file (.yaml, .yml, .json; Stowage Job and Queue "
    "manifests too)"
)
_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def embedded_default(
    seed: int = 0, *, n_nodes: int = EMBEDDED_NODES, node_capacity: Mapping[str, float] | None = None
) -> Workload:
    """The bundled workload: 2 h of FB-2009 plus the Tetris mix on 50 nodes, highly loaded.

    ``n_nodes`` / ``node_capacity`` rebuild it for another cluster (FB bytes scale with the node
    count, the mix keeps its offered load); the defaults give the workload described here:

    - nodes: 50 × the Facebook 2009 machine profile (12 cores, 32 GiB, 200 MB/s disk, 1 Gbps);
    - FB-2009 (file ``_0``), jobs submitted in the first 2 hours: 239 jobs, bytes scaled by 50/600,
      the SWIM task model (:mod:`stowage.sim.traces.swim`): many small jobs;
    - the Tetris §5.1 mix, arrivals over the same 2 hours, offered load 0.9 on the busiest
      resource, task counts × 0.1 (10–250 tasks a job), 6 GiB per task (60–300 s tasks):
      the heavy jobs that keep the cluster busy past the window, so that schedulers differ;
    - about 9–10 thousand tasks (9,622 for seed 0), ~320 jobs;
    - queues: the tenant model. Jobs of both parts are merged in arrival order.
    """
    capacity = ResourceVector(node_capacity) if node_capacity is not None else shapes.FB_2009_PROFILE
    with bundled_swim_path() as path:
        fb = read_swim(path, n_nodes=n_nodes, seed=seed, hours=EMBEDDED_HOURS, node_capacity=capacity)
    mix = tetris_mix(
        seed=seed, n_nodes=n_nodes, load=EMBEDDED_SYNTHETIC_LOAD, duration_s=EMBEDDED_HOURS * 3600,
        node_capacity=capacity,
        mix=TetrisMix(size_scale=EMBEDDED_SYNTHETIC_SIZE_SCALE, data_per_task=EMBEDDED_DATA_PER_TASK),
    )
    jobs = tuple(sorted(fb.jobs + mix.jobs, key=lambda j: j.arrival_s))
    return Workload(
        name=f"embedded (FB-2009 first {EMBEDDED_HOURS:g} h + Tetris mix, {n_nodes} nodes)",
        nodes=fb.nodes,
        queues=tenants.tenant_queues(),
        jobs=jobs,
        model={
            "source": "embedded default: bundled FB-2009 slice plus the Tetris §5.1 mix on the same nodes",
            "seed": seed,
            "nodes": f"{n_nodes} × {capacity.as_quantities()}",
            "jobs": len(jobs),
            "tasks": sum(j.task_count for j in jobs),
            "swim": dict(fb.model),
            "synthetic": dict(mix.model),
        },
    )


def _positive(value: int | None, option: str) -> int | None:
    if value is not None and value < 1:
        raise InvalidInput(option, value, "a positive number of nodes")
    return value


def _existing(path: str, spec: str, what: str) -> Path:
    if not path:
        raise InvalidInput("--workload", spec, f"{what} after the colon")
    p = Path(path).expanduser()
    if not p.is_file():
        raise InvalidInput("--workload", spec, f"{what} that exists (no file at {str(p)!r})")
    return p


def resolve_workload(
    spec: str, *, nodes: int | None, node_shape: str | None, seed: int, source_nodes: int | None = None,
    max_nodes: int | None = None,
) -> Workload:
    """The workload a ``--workload`` spec names, with ``--nodes`` / ``--node-shape`` applied.

    Specs: ``embedded`` (or empty: :func:`embedded_default`), ``synthetic`` (Tetris mix, 250 nodes),
    ``swim`` (the bundled FB-2009 day, 600 nodes) or ``swim:PATH``, ``openb:PODS[,NODES]``, ``random``
    or ``random:SEED`` (:mod:`stowage.sim.traces.random_mix`; without SEED, ``seed``), or a workload
    file. Synthetic, SWIM and random size their work to the node count (load, byte scaling); the
    others keep their jobs and only change nodes (see :func:`shapes.resize_nodes`).

    ``source_nodes`` (``--source-nodes``, SWIM only): the machines of the cluster the trace was
    recorded on. For ``swim:PATH`` it defaults to what the file name says (FB-2009: 600, FB-2010:
    3,000) and is required otherwise; the simulated cluster defaults to that size (bytes unscaled).

    ``max_nodes`` (``--max-nodes``): more nodes, by ``--nodes`` or a file's ``count``, are refused before any
    is built (the size check after reading, ``sizing.plan_runs``, would come only after building them).
    """
    count = _positive(nodes, "--nodes")
    too_many = nodes_over_limit(count or 0, max_nodes)
    if too_many:
        raise InvalidInput("--nodes", count, too_many)
    source = _positive(source_nodes, "--source-nodes")
    shape = shapes.parse_node_shape(node_shape, "--node-shape") if node_shape else None
    spec = (spec or "embedded").strip()
    kind, sep, arg = spec.partition(":")
    if source is not None and kind != "swim":
        raise InvalidInput("--source-nodes", source, "only with --workload swim or swim:PATH (SWIM traces)")
    if spec in ("embedded", "default"):
        return embedded_default(seed, n_nodes=count or EMBEDDED_NODES, node_capacity=shape)
    if spec == "synthetic":
        return tetris_mix(seed=seed, n_nodes=count or 250, node_capacity=shape)
    if spec == "swim":
        source = source or SWIM_CLUSTER_NODES
        with bundled_swim_path() as path:
            return read_swim(path, n_nodes=count or source, seed=seed, node_capacity=shape, source_nodes=source)
    if kind == "swim" and sep:
        path = _existing(arg, spec, "swim:PATH with PATH a SWIM .tsv file")
        source = source or source_nodes_of(path)
        if source is None:
            known = ", ".join(f"{name}: {n:,}" for name, n in SWIM_SOURCES.items())
            raise InvalidInput("--source-nodes", None, f"the number of machines {path.name} was recorded on "
                                                      f"(its name does not say; {known})")
        return read_swim(path, n_nodes=count or source, seed=seed, node_capacity=shape, source_nodes=source)
    if kind == "random":
        if sep and not arg.strip().isdigit():
            raise InvalidInput("--workload", spec, "random:SEED with SEED a whole number ≥ 0")
        return random_mix.random_mix(int(arg) if sep else seed, n_nodes=count, node_capacity=shape)
    if kind == "openb" and sep:
        pods, _, node_list = arg.partition(",")
        pods_path = _existing(pods, spec, "openb:PODS[,NODES] with PODS an openb pod list .csv")
        nodes_path = _existing(node_list, spec, "openb:PODS,NODES with NODES an openb node list .csv") \
            if node_list else None
        return read_openb(pods_path, nodes_path, seed=seed, n_nodes=count, node_capacity=shape)
    path = Path(spec).expanduser()
    if path.suffix.lower() in _FILE_SUFFIXES or path.exists() or _looks_like_path(spec):
        if not path.is_file():
            # A path, not a spec name: the list of specs would not say what is wrong.
            raise WorkloadError([f"{spec}: no such file" if not path.exists() else f"{spec}: not a file"])
        given = shapes.uniform_nodes(count, shape) if count is not None and shape is not None else ()
        workload = load_workload_file(path, max_nodes=max_nodes, nodes=given)
        return _with_nodes(workload, count, shape)
    raise InvalidInput("--workload", spec, WORKLOAD_SPECS)


def _looks_like_path(spec: str) -> bool:
    return "/" in spec or "\\" in spec or spec.startswith(("~", "."))


def _with_nodes(workload: Workload, count: int | None, shape: ResourceVector | None) -> Workload:
    if count is None and shape is None:
        return workload
    resized = shapes.resize_nodes(workload.nodes, count, shape)
    model = {**workload.model, "nodes_override": f"--nodes {count}, --node-shape "
                                                 f"{shape.as_quantities() if shape else None}"}
    return Workload(workload.name, resized, workload.queues, workload.jobs, model)
