"""The simulation's job state in three tables, split by who may read them; each part of the engine is handed
the tables it reads. :class:`Spec`: the work as submitted (what the API server holds), never changed in a run.
:class:`Truth`: what only the simulated world knows (true durations and usage); a preset sees durations only
under ``SimConfig.oracle_durations``. :class:`Status`: progress, allocations and the run's counters. Jobs are in
arrival order (``Spec.j_source`` maps back to the workload's), groups job by job.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from stowage.errors import WorkloadError
from stowage.labels import Opportunistic
from stowage.policy import alignment, decide, tolerances
from stowage.resources import CORE_RESOURCES, DISK, NETWORK
from stowage.sim.workload import JobSpec, QueueSpec, Workload

__all__ = ["Spec", "Status", "Truth", "resource_axis"]

# JobSpec.opportunistic as the engine codes it: the decision's intent codes
_OPP_CODE = {Opportunistic.FALSE: decide.INTENT_FALSE, Opportunistic.AUTO: decide.INTENT_AUTO,
             Opportunistic.TRUE: decide.INTENT_TRUE}


def resource_axis(workload: Workload) -> tuple[str, ...]:
    """cpu, memory, disk, network, then any extended resource in name order."""
    extra = set().union(*(n.capacity for n in workload.nodes), *(g.demand for j in workload.jobs for g in j.groups))
    return CORE_RESOURCES + tuple(sorted(extra - set(CORE_RESOURCES)))


class Truth:
    """Each group's true task duration (s) and usage fraction (NaN: drawn); ``jobs`` in ``Spec.j_source`` order."""

    __slots__ = ("g_dur", "g_usage")

    def __init__(self, jobs: list[JobSpec]) -> None:
        groups = [g for job in jobs for g in job.groups]
        self.g_dur = np.array([max(float(g.duration_s), 0.0) for g in groups])
        self.g_usage = np.array([math.nan if g.usage is None else float(g.usage) for g in groups])


class Spec:
    """The submitted work on the axis ``resources``, checked against the nodes' capacity ``cap`` (N, R)."""

    def __init__(self, wl: Workload, resources: tuple[str, ...], cap: NDArray[np.float64]) -> None:
        self.resources = res = resources
        self.kube_resources = np.array([r not in (DISK, NETWORK) for r in res])  # the Fit filter's
        self.io_resources = ~self.kube_resources
        if not wl.nodes:
            raise WorkloadError(["nodes: must list at least one node"])
        queues = wl.queues or (QueueSpec("default"),)  # no queue listed: one with every default
        self.queue_names = [q.name for q in queues]
        qidx = {name: i for i, name in enumerate(self.queue_names)}
        self.q_weight = np.array([q.weight for q in queues])
        self.q_order = [q.job_order for q in queues]
        self.q_opp = np.array([q.opportunistic_allowed for q in queues])
        jobs = sorted(range(len(wl.jobs)), key=lambda i: (wl.jobs[i].arrival_s, i))
        specs = [wl.jobs[i] for i in jobs]
        self.j_name = [j.name for j in specs]
        self.j_source = np.array(jobs, dtype=np.int64)  # engine job index → index in workload.jobs
        problems: list[str] = []
        g_job, g_demand, g_tasks, g_deps, self.g_name = [], [], [], [], []
        g_gang: list[int] = []
        self.g_expected: list[float | None] = []  # the workload's expectedDuration per group (a hint), None: none
        self.j_groups: list[list[int]] = []
        biggest = cap.max(axis=0)
        for j, job in enumerate(specs):
            if job.queue not in qidx:
                problems.append(f"jobs[{job.name}].queue: {job.queue!r} is not a queue; known: {self.queue_names}")
            names = {g.name: len(g_job) + k for k, g in enumerate(job.groups)}
            self.j_groups.append(list(range(len(g_job), len(g_job) + len(job.groups))))
            for g in job.groups:
                d = g.demand.to_array(res)
                slack = 1 + tolerances.FEASIBILITY_RTOL
                too_big = [r for r, x, b in zip(res, d, biggest, strict=True) if x > b * slack]
                if too_big:
                    problems.append(f"jobs[{job.name}].groups[{g.name}].demand: exceeds every node on {too_big}")
                elif not (d <= cap * slack).all(axis=1).any():
                    # Each resource fits somewhere but never all on one node: its tasks could never
                    # start, and the run would end with them unfinished.
                    problems.append(f"jobs[{job.name}].groups[{g.name}].demand: fits on no single node "
                                    "(each resource fits somewhere, never all together)")
                missing = [dep for dep in g.depends_on if dep not in names]
                if missing:
                    problems.append(f"jobs[{job.name}].groups[{g.name}].dependsOn: unknown groups {missing}")
                g_job.append(j)
                g_demand.append(d)
                self.g_expected.append(g.expected_duration_s)
                g_tasks.append(int(g.tasks))
                g_gang.append(int(g.min_available or 0))
                g_deps.append([names[dep] for dep in g.depends_on if dep in names])
                self.g_name.append(g.name)
        if problems:
            raise WorkloadError(problems)
        self.n_jobs, self.n_groups = len(jobs), len(g_job)
        self.g_job = np.array(g_job, dtype=np.int64)
        self.g_demand = np.array(g_demand, dtype=np.float64).reshape(self.n_groups, len(res))
        self.g_uses = self.g_demand > 0
        # Groups share a handful of demand shapes: per-pass fit checks run once per shape.
        self.shapes, g_shape = np.unique(self.g_demand, axis=0, return_inverse=True)
        self.g_shape: NDArray[np.int64] = g_shape.reshape(-1)
        self.clamped_shapes = alignment.clamp_demand(self.shapes)  # as alignment.feasible cleans them
        self.g_tasks = np.array(g_tasks, dtype=np.int64)
        self.g_gang = np.array(g_gang, dtype=np.int64)  # minAvailable per group (0: no gang)
        self.g_deps = g_deps
        self.g_children: list[list[int]] = [[] for _ in range(self.n_groups)]
        for g, deps in enumerate(g_deps):
            for d in deps:
                self.g_children[d].append(g)
        self.j_arrival = np.array([j.arrival_s for j in specs], dtype=np.float64)
        self.j_queue = np.array([qidx.get(j.queue, 0) for j in specs], dtype=np.int64)
        self.j_priority = np.array([j.priority for j in specs], dtype=np.int64)
        self.j_opp = np.array([_OPP_CODE[Opportunistic(j.opportunistic)] for j in specs], dtype=np.int64)
        self.g_queue = self.j_queue[self.g_job]
        self.t0 = float(self.j_arrival.min()) if self.n_jobs else 0.0


class Status:
    """Each group's and job's progress, the allocations by job and queue, and the run's counters."""

    def __init__(self, spec: Spec) -> None:
        n_g, n_j, r = spec.n_groups, spec.n_jobs, len(spec.resources)
        self.g_pending = np.zeros(n_g, np.int64)
        self.g_running = np.zeros(n_g, np.int64)
        self.g_done = np.zeros(n_g, np.int64)
        self.g_unmet = np.array([len(d) for d in spec.g_deps], dtype=np.int64)  # barriers still closed
        self.g_ready = np.zeros(n_g, bool)
        self.g_ready_at = np.full(n_g, np.inf)
        self.j_open_groups = np.array([len(gs) for gs in spec.j_groups], dtype=np.int64)
        self.j_finish = np.full(n_j, np.nan)
        self.j_arrived = np.zeros(n_j, bool)
        self.job_alloc = np.zeros((n_j, r))
        self.queue_alloc = np.zeros((2, len(spec.queue_names), r))  # [regular, opportunistic]
        self.alloc_total = np.zeros(r)
        self.evictions = self.oom_kills = self.task_starts = self.opp_done = self.tasks_done = 0
        self.wasted_work_s = 0.0
        self.promotions = 0
        self.run_s = 0.0  # task-seconds run (finished and evicted tasks)
        self.harvested_s = 0.0  # task-seconds run on harvested capacity (finished, evicted or promoted since)
        self.regular_runs: list[float] = []  # run time ÷ duration alone of each task that finished regular all along

    def waiting(self) -> NDArray[np.bool_]:
        """Groups whose barrier is open and that have tasks waiting."""
        return self.g_ready & (self.g_pending > 0)
