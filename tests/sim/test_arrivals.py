"""Batch arrivals: Tetris §5.2's makespan method (every job at t = 0, trace order kept)."""

from __future__ import annotations

from stowage.labels import Opportunistic
from stowage.resources import ResourceVector
from stowage.sim.workload import JobSpec, NodeSpec, QueueSpec, TaskGroup, Workload


def _workload() -> Workload:
    group = TaskGroup("map", 2, ResourceVector({"cpu": 1}), 10.0)
    jobs = tuple(JobSpec(f"j{i}", "q", arrival_s=100.0 * i, groups=(group,), opportunistic=Opportunistic.FALSE)
                 for i in range(3))
    return Workload("w", (NodeSpec("n", ResourceVector({"cpu": 4})),), (QueueSpec("q"),), jobs, {"source": "test"})


def test_batch_arrivals_move_every_job_to_zero_and_keep_the_rest() -> None:
    original = _workload()
    batch = original.with_batch_arrivals()
    assert [j.arrival_s for j in batch.jobs] == [0.0, 0.0, 0.0]
    assert [j.name for j in batch.jobs] == ["j0", "j1", "j2"]
    assert [j.groups for j in batch.jobs] == [j.groups for j in original.jobs]
    assert batch.nodes == original.nodes and batch.queues == original.queues
    assert batch.model["source"] == "test" and "batch" in batch.model["arrivals"]
    assert [j.arrival_s for j in original.jobs] == [0.0, 100.0, 200.0]  # the original is untouched
