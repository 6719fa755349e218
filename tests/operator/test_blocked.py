"""A Job that cannot progress says so: ``tasks.blocked_groups`` and the ``Unschedulable`` condition of ``plan_job``."""

from __future__ import annotations

from stowage.operator import tasks

from stowage.resources import ResourceVector
from tests.operator.test_tasks import NOW, group, job

NODE = ResourceVector({"cpu": 7.5, "memory": 15 * 2**30, "pods": 110})
BIG = ResourceVector({"cpu": 16.0, "memory": 4 * 2**30})


def test_a_group_bigger_than_every_node_fits_no_node_naming_the_resource() -> None:
    demands = {"small": ResourceVector({"cpu": 1.0}), "big": ResourceVector({"cpu": 64.0, "memory": 2**30})}
    out = tasks.blocked_groups("research", True, demands, [NODE, BIG])
    assert set(out) == {"big"}
    reason, message = out["big"]
    assert reason == "FitsNoNode" and "'big'" in message and "cpu 64 > 16" in message, message


def test_fitting_needs_one_node_with_all_of_it_not_the_maximum_of_each() -> None:
    # 10 cores fit BIG, 10 GiB fit NODE, both together fit neither.
    demands = {"g": ResourceVector({"cpu": 10.0, "memory": 10 * 2**30})}
    assert tasks.blocked_groups("q", True, demands, [NODE, BIG])["g"][0] == "FitsNoNode"


def test_no_nodes_judges_nothing_and_a_missing_queue_blocks_every_group() -> None:
    demands = {"a": ResourceVector({"cpu": 64.0}), "b": None}
    assert tasks.blocked_groups("q", True, demands, []) == {}
    gone = tasks.blocked_groups("nightly", False, demands, [NODE])
    assert {g: r for g, (r, _) in gone.items()} == {"a": "QueueNotFound", "b": "QueueNotFound"}
    assert "'nightly'" in gone["a"][1]


def _condition(plan: tasks.JobPlan) -> dict | None:
    return next((c for c in plan.status["conditions"] if c["type"] == tasks.UNSCHEDULABLE), None)


def test_plan_job_reports_a_blocked_group_once_and_clears_it() -> None:
    j = job(group("map", 2))
    why = {"map": ("QueueNotFound", "Queue 'research' does not exist")}
    first = tasks.plan_job(j, [], now=NOW, blocked=why)
    assert _condition(first) == {"type": "Unschedulable", "status": "True", "reason": "QueueNotFound",
                                 "message": "Queue 'research' does not exist", "lastTransitionTime": NOW}
    assert ("Warning", "QueueNotFound", "Queue 'research' does not exist") in first.events
    again = tasks.plan_job({**j, "status": first.status}, [], now="2025-01-01T00:01:00Z", blocked=why)
    assert not [e for e in again.events if e[0] == "Warning"], "no second Event for the same state"
    assert _condition(again)["lastTransitionTime"] == NOW
    cleared = tasks.plan_job({**j, "status": again.status}, [], now="2025-01-01T00:02:00Z")
    assert _condition(cleared)["status"] == "False"
    assert _condition(tasks.plan_job(job(group("map", 2)), [], now=NOW)) is None, "no condition when never blocked"


def test_a_blocked_group_that_is_done_does_not_block_the_job() -> None:
    j = job(group("map", 1))
    pods = [{"metadata": {"name": "train-map-0", "labels": {"stowage.io/task-group": "map"}},
             "status": {"phase": "Succeeded"}}]
    plan = tasks.plan_job(j, pods, now=NOW, blocked={"map": ("FitsNoNode", "x")})
    assert plan.phase is tasks.Phase.SUCCEEDED and _condition(plan) is None
