"""The simulator's workload model: nodes, queues, jobs of task groups.

Every trace reader (``stowage.sim.traces``) produces a :class:`Workload`; the engine consumes only this. Amounts are
in base units (cores, bytes, bytes/s), times in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from stowage.errors import InvalidInput
from stowage.labels import Opportunistic
from stowage.model import JobOrder
from stowage.resources import ResourceVector

__all__ = ["JobSpec", "NodeSpec", "QueueSpec", "TaskGroup", "Workload", "nodes_over_limit"]


def nodes_over_limit(nodes: int, limit: int | None) -> str | None:
    """Why ``nodes`` nodes are refused (``--max-nodes``), or None. Asked before nodes are built as well as after:
    a count of ten million must be refused before ten million node objects exist."""
    if limit is None or nodes <= limit:
        return None
    return f"{nodes:,} nodes is above the limit of {limit:,} (--max-nodes raises it; --nodes N simulates fewer)"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    capacity: ResourceVector
    harvest: bool = True  # False: node label stowage.io/harvest="false"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    weight: float = 1.0
    job_order: JobOrder = JobOrder.SRTF
    opportunistic_allowed: bool = True


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """``tasks`` identical tasks; a barrier: none starts before every group in ``depends_on`` finished."""

    name: str
    tasks: int
    demand: ResourceVector
    duration_s: float  # when running alone at full speed
    usage: float | None = None  # fraction of demand really used; None → the engine's usage model
    depends_on: tuple[str, ...] = ()
    expected_duration_s: float | None = None  # what the user states (expectedDuration): a hint, not the truth
    min_available: int | None = None  # all or nothing: the first this many tasks start together (None: no gang)


@dataclass(frozen=True, slots=True)
class JobSpec:
    name: str
    queue: str
    arrival_s: float
    groups: tuple[TaskGroup, ...]
    opportunistic: Opportunistic = Opportunistic.AUTO
    priority: int = 0  # kube-default orders by priority, then arrival

    @property
    def task_count(self) -> int:
        return sum(g.tasks for g in self.groups)


@dataclass(frozen=True, slots=True)
class Workload:
    """A whole simulation input; ``model`` states how it was made (printed in every report)."""

    name: str
    nodes: tuple[NodeSpec, ...]
    queues: tuple[QueueSpec, ...]
    jobs: tuple[JobSpec, ...]
    model: Mapping[str, Any] = field(default_factory=dict)

    @property
    def task_count(self) -> int:
        return sum(j.task_count for j in self.jobs)

    def with_batch_arrivals(self) -> Workload:
        """Every job arrives at t = 0, in its original order (ties keep trace order).

        Tetris §5.2 measures makespan this way ("we assume that all jobs arrived at the
        beginning of the trace"): with arrivals spread over the trace, makespan is bounded by
        the last arrival and says little about the scheduler.
        """
        jobs = tuple(replace(job, arrival_s=0.0) for job in self.jobs)
        model = {**self.model, "arrivals": "batch: every job at t=0 (Tetris §5.2 makespan method)"}
        return replace(self, jobs=jobs, model=model)

    def sliced(self, *, first_jobs: int | None = None, hours: tuple[float, float] | None = None) -> Workload:
        """The jobs arriving in ``[hours[0], hours[1])`` h of the trace's clock, then the first ``first_jobs``.

        Jobs are taken in arrival order (ties keep trace order) and keep their arrival times, queues
        and everything else, so a slice replays exactly those jobs of the full workload. Raises
        :class:`InvalidInput` naming the option when the slice is empty.
        """
        if first_jobs is None and hours is None:
            return self
        order = sorted(range(len(self.jobs)), key=lambda i: (self.jobs[i].arrival_s, i))
        picked = [self.jobs[i] for i in order]
        said: list[str] = []
        if hours is not None:
            lo, hi = hours
            picked = [j for j in picked if lo * 3600.0 <= j.arrival_s < hi * 3600.0]
            said.append(f"arrivals in [{lo:g} h, {hi:g} h)")
            if not picked:
                hours_in = [j.arrival_s / 3600.0 for j in self.jobs] or [0.0]
                span = f"{min(hours_in):.2f}-{max(hours_in):.2f} h"
                raise InvalidInput("--hours", f"{lo:g}-{hi:g}",
                                   f"a window holding at least one arrival (this workload's arrivals: {span})")
        if first_jobs is not None:
            if first_jobs < 1:
                raise InvalidInput("--first-jobs", first_jobs, "a positive number of jobs")
            picked = picked[:first_jobs]
            said.append(f"first {first_jobs} jobs by arrival")
        text = ", then ".join(said)
        model = {**self.model, "slice": f"{text}: {len(picked)} of {len(self.jobs)} jobs",
                 "tasks_in_slice": sum(j.task_count for j in picked)}
        return replace(self, name=f"{self.name} [{text}]", jobs=tuple(picked), model=model)
