"""Small hand-made workloads for the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stowage.labels import Opportunistic
from stowage.model import JobOrder
from stowage.resources import ResourceVector
from stowage.sim.cluster import Cluster, contention_table
from stowage.sim.usage import UsageModel
from stowage.sim.workload import JobSpec, NodeSpec, QueueSpec, TaskGroup, Workload

#: Usage exactly as requested: no draw, no ramp, no bursts (hand-checkable timings).
FLAT = UsageModel(mean_fraction=1.0, concentration=0.0, ramp_s=0.0, burst_rate_per_s=0.0)
#: Frequent long bursts to the peak: harvested capacity gets reclaimed often.
BURSTY = UsageModel(burst_rate_per_s=0.05, burst_s=10.0)


def rv(**amounts: float) -> ResourceVector:
    return ResourceVector(amounts)


def nodes(count: int, **capacity: float) -> tuple[NodeSpec, ...]:
    cap = {"cpu": 4.0, "memory": 16.0, "disk": 100.0, "network": 100.0, **capacity}
    return tuple(NodeSpec(f"n{i}", rv(**cap)) for i in range(count))


def group(name: str, tasks: int, duration: float, *, usage: float | None = 1.0, deps: Sequence[str] = (),
          **demand: float) -> TaskGroup:
    return TaskGroup(name, tasks, rv(**({"cpu": 1.0, "memory": 1.0} | demand)), duration, usage, tuple(deps))


def job(name: str, arrival: float, *groups: TaskGroup, queue: str = "default",
        opportunistic: Opportunistic = Opportunistic.FALSE, priority: int = 0) -> JobSpec:
    return JobSpec(name, queue, arrival, tuple(groups), opportunistic, priority)


def workload(node_specs: tuple[NodeSpec, ...], jobs: Sequence[JobSpec],
             queues: Sequence[QueueSpec] = (QueueSpec("default", 1.0, JobOrder.SRTF, True),)) -> Workload:
    return Workload("test", node_specs, tuple(queues), tuple(jobs), {"source": "tests"})


def contended(seed: int = 0, n_jobs: int = 30) -> Workload:
    """Busy cluster with harvestable slack and bursts: evictions and OOM kills happen."""
    import numpy as np

    rng = np.random.default_rng(seed)
    jobs = []
    for j in range(n_jobs):
        opp = (Opportunistic.AUTO, Opportunistic.TRUE)[j % 2]
        g1 = TaskGroup("map", int(rng.integers(2, 12)),
                       rv(cpu=float(rng.choice([1.0, 2.0])), memory=float(rng.choice([2.0, 6.0])), disk=20.0),
                       float(rng.uniform(10, 60)), None)
        g2 = TaskGroup("reduce", int(rng.integers(1, 4)), rv(cpu=1.0, memory=4.0, network=30.0),
                       float(rng.uniform(5, 30)), None, ("map",))
        jobs.append(JobSpec(f"job{j}", ("a", "b")[j % 2], float(j * 3), (g1, g2), opp))
    queues = (QueueSpec("a", 1.0, JobOrder.SRTF, True), QueueSpec("b", 2.0, JobOrder.FSP, True))
    return Workload("contended", nodes(4, cpu=8.0, memory=16.0), queues, tuple(jobs), {"source": "tests"})


def model_rates(cluster: Cluster, use: np.ndarray, node: np.ndarray, opp: np.ndarray, uses: np.ndarray) -> np.ndarray:
    """Each task's progress rate under the contention model, from scratch: ``use`` (P, R) its usage, ``uses``
    (P, R) whether it needs each resource at all (the reference the engine's incremental tracker must equal)."""
    if use.shape[0] == 0:
        return np.zeros(0)
    reg_use = cluster.node_sums(np.where(opp[:, None], 0.0, use), node)
    opp_use = cluster.node_sums(np.where(opp[:, None], use, 0.0), node)
    masks, mask_of = np.unique(uses, axis=0, return_inverse=True)
    table = contention_table(reg_use, opp_use, cluster.cap, cluster.cpu, cluster.mem, masks)
    if table is None:
        return np.ones(use.shape[0])
    return table[opp.astype(np.int64), mask_of.reshape(-1), node]
