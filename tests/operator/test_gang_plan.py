"""All-or-nothing task groups in a Job's plan (``minAvailable``, ``plan._gangs``): the gang the dispatcher must
release whole, and the gangs taken back (a member failed or was evicted, or it did not come up in time)."""

from __future__ import annotations

from typing import Any

from stowage.operator import tasks

from tests.operator.test_tasks import NOW, group, job, pod

# NOW is 5 s after the test pods' creation.


def gang(replicas: int = 3, min_available: int = 3) -> dict[str, Any]:
    return {**group("w", replicas=replicas), "minAvailable": min_available}


def test_a_gang_with_nothing_active_is_released_whole() -> None:
    plan = tasks.plan_job(job(gang()), [], now=NOW)
    (g,) = plan.groups
    assert g.gang == 3 and len(g.releasable) == 3
    assert plan.delete == ()


def test_a_gang_that_is_up_lets_its_other_tasks_go_one_at_a_time() -> None:
    pods = [pod("train", "w", i) for i in range(2)]
    (g,) = tasks.plan_job(job(gang(replicas=4, min_available=2)), pods, now=NOW).groups
    assert g.gang == 0 and len(g.releasable) == 2


def test_a_member_that_failed_takes_the_gang_back_whole() -> None:
    pods = [pod("train", "w", 0), pod("train", "w", 1), pod("train", "w", 2, phase="Failed")]
    plan = tasks.plan_job(job(gang()), pods, now=NOW)
    (g,) = plan.groups
    assert sorted(plan.delete) == ["train-w-0", "train-w-1"]
    assert g.releasable == () and g.gang == 3
    assert ("Warning", "GangTakenBack",
            "task group 'w' is all or nothing (minAvailable 3): 2 of its 3 tasks are active (a member failed, was "
            "evicted or deleted, or was not created); its 2 pod(s) were deleted, without spending a retry, and the "
            "group waits to start whole again") in plan.notices


def test_an_evicted_member_takes_the_gang_back_whole() -> None:
    pods = [pod("train", "w", 0), pod("train", "w", 1), pod("train", "w", 2, deleting=True)]
    plan = tasks.plan_job(job(gang()), pods, now=NOW)
    assert sorted(plan.delete) == ["train-w-0", "train-w-1"]


def test_the_next_plan_after_the_take_back_releases_the_gang_whole() -> None:
    pods = [pod("train", "w", 0, deleting=True), pod("train", "w", 1, deleting=True),
            pod("train", "w", 2, phase="Failed")]
    plan = tasks.plan_job(job(gang()), pods, now=NOW)
    (g,) = plan.groups
    assert plan.delete == () and g.gang == 3
    assert [(t.index, t.attempt) for t in g.releasable] == [(0, 1), (1, 1), (2, 1)]
    assert g.failed == 1  # the failure spent its retry; the deleted members spent none


def test_a_gang_not_running_within_the_timeout_is_taken_back() -> None:
    pods = [pod("train", "w", 0), pod("train", "w", 1, phase="Pending"), pod("train", "w", 2, phase="Pending")]
    waiting = tasks.plan_job(job(gang()), pods, now=NOW, gang_timeout_s=60)
    assert waiting.delete == ()
    assert waiting.replan_at == 1_735_689_605 + 60 + 1  # the pods' creation + the timeout
    late = tasks.plan_job(job(gang()), pods, now="2025-01-01T00:01:06Z", gang_timeout_s=60)
    assert sorted(late.delete) == ["train-w-0", "train-w-1", "train-w-2"]
    assert any("only 1 of its 3 tasks were Running 60 s after it was released (packing.gang_ready_timeout_s)" in m
               for _, _, m in late.notices)


def test_a_group_without_min_available_is_no_gang() -> None:
    (g,) = tasks.plan_job(job(group("w", replicas=3)), [], now=NOW).groups
    assert g.gang == 0
