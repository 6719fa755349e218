"""Alibaba openb pod list (cluster-trace-gpu-v2023) as one-task jobs.

Pod list columns (CSV with header): ``name, cpu_milli, memory_mib, num_gpu, gpu_milli,
gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time`` (times in s).
Node list: ``sn, cpu_milli, memory_mib, gpu, model``.

The model (stated):

- each pod is a job with one group ``pod`` of one task, demand ``cpu_milli/1000`` cores,
  ``memory_mib`` MiB and ``num_gpu`` whole GPUs as the extended resource ``nvidia.com/gpu``
  (Kubernetes counts extended resources in integers; ``gpu_milli`` GPU sharing is not modelled);
- QoS ``LS`` and ``Guaranteed`` are regular work: ``opportunistic: false``;
  ``BE`` and ``Burstable`` are best effort: ``opportunistic: true``;
- arrival ``= (creation_time − first creation) / time_compression``; run time
  ``= (deletion_time − scheduled_time) / time_compression`` by default (creation→scheduled
  was the original cluster's own queueing, which the simulator replays with its own
  scheduler), or ``creation_time`` → ``deletion_time`` with ``duration_from="creation"``;
  floored at ``min_duration_s``. Compressing arrivals and run times by the same factor
  keeps the trace's concurrency (its load) unchanged;
- skipped and counted in ``model``: pods never scheduled (no ``scheduled_time``, phase
  ``Pending``), bad rows (missing or non-numeric fields, negative demands, no positive
  run time), and pods no node of the chosen set can hold (``fits_no_node``, e.g. a GPU pod
  when ``n_nodes`` keeps only CPU nodes);
- nodes: the node list (``n_nodes`` of it spread evenly over the list if given, keeping the
  mix of models), else ``n_nodes`` (default 16) of the most common model in it, G2:
  96 cores, 384 GiB, 8 GPUs;
- queues: the tenant model; usage: the engine's usage model.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stowage.errors import InvalidInput, WorkloadError
from stowage.labels import Opportunistic
from stowage.resources import CPU, MEMORY, ResourceVector
from stowage.sim.traces import shapes, tenants
from stowage.sim.workload import JobSpec, NodeSpec, TaskGroup, Workload

__all__ = ["DEFAULT_TIME_COMPRESSION", "QOS_INTENT", "read_openb", "read_openb_nodes", "spread_nodes"]

#: 100 × faster: the ~150-day pod list becomes ~36 simulated hours, a 540 s median pod 5.4 s.
DEFAULT_TIME_COMPRESSION = 100.0
_MIB = 2**20
QOS_INTENT: dict[str, Opportunistic] = {
    "LS": Opportunistic.FALSE,
    "Guaranteed": Opportunistic.FALSE,
    "BE": Opportunistic.TRUE,
    "Burstable": Opportunistic.TRUE,
}
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "qos", "creation_time", "deletion_time",
                "scheduled_time")
_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu")


def _missing_columns(reader: csv.DictReader, needed: tuple[str, ...], path: Path) -> None:
    present = set(reader.fieldnames or ())
    missing = [c for c in needed if c not in present]
    if missing:
        raise WorkloadError([f"{path}: missing column(s) {', '.join(missing)}; header has "
                             f"{', '.join(reader.fieldnames or ()) or 'nothing'}"])


def spread_nodes(nodes: tuple[NodeSpec, ...], n_nodes: int) -> tuple[NodeSpec, ...]:
    """``n_nodes`` of ``nodes`` spread evenly over the list (node ``floor(i·K/n)``), so the mix of
    models is kept; past ``K`` the list repeats, copy ``k`` of a node named ``<name>-<k>``."""
    if n_nodes < 1:
        raise InvalidInput("n_nodes", n_nodes, "a positive number of nodes")
    k = len(nodes)
    if n_nodes <= k:
        return tuple(nodes[i * k // n_nodes] for i in range(n_nodes))
    return tuple(
        nodes[i % k] if i < k else NodeSpec(f"{nodes[i % k].name}-{i // k + 1}", nodes[i % k].capacity)
        for i in range(n_nodes)
    )


def read_openb_nodes(path: str | Path, n_nodes: int | None = None) -> tuple[NodeSpec, ...]:
    """Nodes from an openb node list (cpu millicores, memory MiB, GPUs); ``n_nodes`` of them spread
    evenly over the list if given (:func:`spread_nodes`)."""
    path = Path(path)
    nodes: list[NodeSpec] = []
    problems: list[str] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        _missing_columns(reader, _NODE_COLUMNS, path)
        for lineno, row in enumerate(reader, start=2):
            try:
                cpu, mem, gpu = float(row["cpu_milli"]) / 1000, float(row["memory_mib"]) * _MIB, int(row["gpu"] or 0)
            except (TypeError, ValueError):
                problems.append(f"{path}:{lineno}: cpu_milli, memory_mib and gpu must be numbers")
                continue
            if cpu <= 0 or mem <= 0 or gpu < 0:
                problems.append(f"{path}:{lineno}: node needs positive cpu and memory, gpu >= 0")
                continue
            nodes.append(NodeSpec(row["sn"].strip() or f"node-{lineno - 1}",
                                  ResourceVector({CPU: cpu, MEMORY: mem, shapes.GPU: gpu})))
    if problems:
        raise WorkloadError(problems[:20])
    if not nodes:
        raise WorkloadError([f"{path}: no nodes"])
    return tuple(nodes) if n_nodes is None else spread_nodes(tuple(nodes), n_nodes)


def _num(row: Mapping[str, str], key: str) -> float:
    value = float(row[key])
    if not math.isfinite(value):
        raise ValueError(key)
    return value


def read_openb(
    pods_path: str | Path,
    nodes_path: str | Path | None = None,
    *,
    time_compression: float = DEFAULT_TIME_COMPRESSION,
    seed: int = 0,
    n_nodes: int | None = None,
    node_capacity: Mapping[str, float] | None = None,
    duration_from: str = "scheduled",
    min_duration_s: float = 1.0,
) -> Workload:
    """The openb pod list as a :class:`Workload` (model in the module docstring)."""
    pods_path = Path(pods_path)
    if time_compression <= 0 or not math.isfinite(time_compression):
        raise InvalidInput("time_compression", time_compression, "a positive factor")
    if duration_from not in ("scheduled", "creation"):
        raise InvalidInput("duration_from", duration_from, "'scheduled' or 'creation'")
    if nodes_path is not None and node_capacity is None:
        nodes = read_openb_nodes(nodes_path, n_nodes)
        node_source = f"{Path(nodes_path).name}" + (f" ({n_nodes} spread over the list)" if n_nodes else "")
    else:
        capacity = ResourceVector(node_capacity) if node_capacity is not None else shapes.OPENB_G2
        nodes = shapes.uniform_nodes(n_nodes or 16, capacity)
        node_source = f"{len(nodes)} × {capacity.as_quantities()}"

    kept: list[tuple[str, float, float, ResourceVector, Opportunistic, str]] = []
    skipped: Counter[str] = Counter()
    with pods_path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        _missing_columns(reader, _POD_COLUMNS, pods_path)
        for row in reader:
            if not (row.get("scheduled_time") or "").strip():
                skipped["never_scheduled"] += 1
                continue
            qos = (row.get("qos") or "").strip()
            if qos not in QOS_INTENT:
                skipped["unknown_qos"] += 1
                continue
            try:
                cpu, mem, gpu = _num(row, "cpu_milli") / 1000, _num(row, "memory_mib") * _MIB, _num(row, "num_gpu")
                created, deleted, scheduled = (_num(row, k) for k in ("creation_time", "deletion_time",
                                                                       "scheduled_time"))
            except (TypeError, ValueError, KeyError):
                skipped["bad_row"] += 1
                continue
            start = scheduled if duration_from == "scheduled" else created
            if min(cpu, mem, gpu) < 0 or cpu + mem + gpu <= 0:
                skipped["bad_demand"] += 1
                continue
            if deleted - start <= 0:
                skipped["no_run_time"] += 1
                continue
            demand = ResourceVector({CPU: cpu, MEMORY: mem, shapes.GPU: math.ceil(gpu)})
            if not any(demand.fits_in(n.capacity) for n in nodes):
                skipped["fits_no_node"] += 1
                continue
            kept.append((row["name"].strip(), created, deleted - start, demand, QOS_INTENT[qos], qos))
    if not kept:
        raise WorkloadError([f"{pods_path}: no usable pods (skipped: {dict(skipped) or 'none read'})"])

    kept.sort(key=lambda k: k[1])  # arrival order, so queue draws follow it
    origin = kept[0][1]
    queues = tenants.assign_queues(len(kept), seed, stream=2)
    jobs = tuple(
        JobSpec(name, queue, (created - origin) / time_compression,
                (TaskGroup("pod", 1, demand, max(min_duration_s, run / time_compression)),), intent)
        for (name, created, run, demand, intent, _), queue in zip(kept, queues, strict=True)
    )
    qos_counts = Counter(k[5] for k in kept)
    model: dict[str, Any] = {
        "source": f"Alibaba openb {pods_path.name} (cluster-trace-gpu-v2023, Weng et al. ATC'23; research use)",
        "pods_read": len(kept) + sum(skipped.values()),
        "pods_kept": len(kept),
        "skipped": dict(skipped),
        "qos": dict(qos_counts),
        "regular_ls_guaranteed": sum(qos_counts[q] for q in ("LS", "Guaranteed")),
        "opportunistic_be_burstable": sum(qos_counts[q] for q in ("BE", "Burstable")),
        "time_compression": time_compression,
        "duration": f"(deletion_time - {duration_from}_time) / {time_compression:g}, at least {min_duration_s:g} s",
        "arrival": f"(creation_time - {origin:g}) / {time_compression:g}",
        "demand": "cpu_milli/1000 cores, memory_mib MiB, ceil(num_gpu) nvidia.com/gpu; gpu_milli ignored",
        "nodes": node_source,
        "usage": "engine usage model (TaskGroup.usage unset)",
        "tenants": tenants.tenant_model(),
        "seed": seed,
    }
    return Workload(f"openb:{pods_path.name}", nodes, tenants.tenant_queues(), jobs, model)
